// One control-plane call to one engine, as it travels between the gateway front, the NATS bus
// and the replica that owns the engine: plain JSON (the body as base64, since bytes are forwarded
// byte for byte). Owns the shapes only; executing a call lives in control-client.ts.

import { setMaxListeners } from 'node:events';

/** HEAD is forwarded as HEAD (SMG does): the engine's status and headers, no body. */
export type ControlMethod = 'GET' | 'HEAD' | 'POST';

export interface ControlCall {
  method: ControlMethod;
  /** Validated engine path without its leading slash (control/engine-path.ts). */
  path: string;
  /** Raw query string without `?`, selector pairs already removed; '' for none. */
  query: string;
  /** Request body as base64; absent or '' when the caller sent none. */
  body?: string;
  contentType?: string;
  /** Only x-request-id, traceparent and tracestate ever travel (spec §9.3). */
  trace?: Record<string, string>;
  /** Absolute deadline (epoch ms): time spent queued behind other commands counts against it. */
  deadline: number;
  /** The configured per-call timeout in seconds, for the `timed out after Ns` message. */
  timeoutSecs: number;
  /** Set on a refit's calls: the engine's owner records which refit paused it (not an operator). */
  refitId?: string;
}

/** What came back from one engine call. Messages already follow spec §5 / §9.7. */
export type ControlOutcome =
  | {
      kind: 'answer';
      status: number;
      latencyMs: number;
      /** Parsed JSON when the engine said json and it parsed; otherwise lossy UTF-8 text. */
      body: unknown;
      truncated: boolean;
    }
  | { kind: 'timeout'; latencyMs: number; message: string }
  | {
      kind: 'unreachable';
      latencyMs: number;
      message: string;
      /**
       * `bus_unavailable`: the gateway's own bus was down, the call may never have left it.
       * `not_owner`: the replica asked no longer owns the engine (ownership was moving); the
       * call was not made, so the dispatcher sends it to the new owner.
       */
      code?: 'bus_unavailable' | 'not_owner';
    }
  | { kind: 'no_control_endpoint'; latencyMs: 0; message: string; connectionMode: string };

export const BODY_CAP = 1024 * 1024;

export function encodeBody(body: Uint8Array | null | undefined): string | undefined {
  if (!body || body.length === 0) return undefined;
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('base64');
}

/** The last body decoded: every leg of a fan-out carries the same one, decoded once. */
let lastBody: { text: string; bytes: Buffer } | undefined;

/** The call's body as bytes. Callers only read them (the buffer may be shared between legs). */
export function decodeBody(body: string | undefined): Buffer | null {
  if (!body) return null;
  if (lastBody?.text === body) return lastBody.bytes;
  const bytes = Buffer.from(body, 'base64');
  lastBody = { text: body, bytes };
  return bytes;
}

/**
 * A signal that aborts at one deadline for a whole share of legs, or when the share is
 * cancelled: one timer for the share instead of one per leg. A call whose own deadline is this
 * one needs no timer of its own (control-client.ts).
 */
export class ShareDeadline {
  private readonly ctrl = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private readonly forward: () => void;

  constructor(
    readonly at: number,
    private readonly parent: AbortSignal | undefined,
  ) {
    // Every leg of the share listens on this one signal: no listener cap (Node warns past 10,
    // and a capped signal's listeners cost O(n) each to add).
    setMaxListeners(0, this.ctrl.signal);
    this.timer = setTimeout(() => this.ctrl.abort(DEADLINE), Math.max(0, at - Date.now()));
    this.forward = () => this.ctrl.abort(parent?.reason);
    if (parent?.aborted) this.ctrl.abort(parent.reason);
    else parent?.addEventListener('abort', this.forward, { once: true });
    shareDeadlines.set(this.ctrl.signal, at);
  }

  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.parent?.removeEventListener('abort', this.forward);
  }
}

/** The reason a ShareDeadline's signal gives when its deadline passed (not a cancel). */
export const DEADLINE = Object.freeze({ deadline: true });

const shareDeadlines = new WeakMap<AbortSignal, number>();

/** The deadline `signal` enforces by itself, if it is a ShareDeadline's. */
export function deadlineOf(signal: AbortSignal | undefined): number | undefined {
  return signal ? shareDeadlines.get(signal) : undefined;
}
