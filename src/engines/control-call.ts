// One control-plane call to one engine, as it travels between the gateway front, the NATS bus
// and the replica that owns the engine: plain JSON (the body as base64, since bytes are forwarded
// byte for byte). Owns the shapes only; executing a call lives in control-client.ts.

export type ControlMethod = 'GET' | 'POST';

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

export function decodeBody(body: string | undefined): Buffer | null {
  if (!body) return null;
  return Buffer.from(body, 'base64');
}
