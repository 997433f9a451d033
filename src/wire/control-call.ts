// One control-plane call to one engine and what came back, as they travel between the gateway
// front, the NATS bus and the replica that owns the engine: plain JSON, the body as base64 since
// bytes are forwarded byte for byte. Shapes only: building, checking and running a call live in
// src/engines/ (control-call.ts, control-client.ts).

/** HEAD is forwarded as HEAD (SMG does): the engine's status and headers, no body. */
export type ControlMethod = 'GET' | 'HEAD' | 'POST';

export interface ControlCall {
  method: ControlMethod;
  /** Validated engine path without its leading slash (engines/engine-path.ts). */
  path: string;
  /** Raw query string without `?`, selector pairs already removed; '' for none. */
  query: string;
  /** Request body as base64; absent or '' when the caller sent none. */
  body?: string;
  contentType?: string;
  /** Only x-request-id, traceparent and tracestate ever travel. */
  trace?: Record<string, string>;
  /** Absolute deadline (epoch ms): time spent queued behind other commands counts against it. */
  deadline: number;
  /** The configured per-call timeout in seconds, for the `timed out after Ns` message. */
  timeoutSecs: number;
  /** Set on a refit's calls: the engine's owner records which refit paused it (not an operator). */
  refitId?: string;
}

/** What came back from one engine call. Messages already follow SMG's error catalogue. */
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
       * `no_owner`: no replica took the call (the owner died and its lease has not moved yet, or
       * no lease was claimed): it was not made, and the dispatcher sends it again to whoever owns
       * the engine next.
       * `owner_lost`: the replica running the call died before answering; the call may have run.
       */
      code?: 'bus_unavailable' | 'not_owner' | 'no_owner' | 'owner_lost';
      /**
       * Not sent, and safe to send again: the replica that owns the engine had its lease fence
       * closed (it may reopen soon), or the bus was down before the call could leave this replica.
       */
      fenced?: true;
    }
  | { kind: 'no_control_endpoint'; latencyMs: 0; message: string; connectionMode: string };

/** What `<root>.engine.<id>.cmd` carries; its reply is the ControlOutcome. */
export interface EngineCommand {
  call: ControlCall;
  /** Names the call for `<root>.replica.<id>.cancel`. */
  requestId?: string;
}
