// A control call as the HTTP door hands it to the control plane: the caller's method, path,
// query, bytes and trace headers, before any call to an engine is built from it (leg-runner.ts).
// The pass-through and the leg runner both read it; it holds no logic.

import type { ControlMethod } from '../wire/control-call.ts';

export interface IncomingControl {
  method: ControlMethod;
  /** The catch-all path, percent-decoded. */
  path: string;
  /** Raw query string, without `?`. */
  rawQuery: string;
  body: Buffer | null;
  contentType: string | undefined;
  trace: Record<string, string>;
  signal?: AbortSignal;
}

/** The caller's trace headers that travel with the call; no other header does. */
export const TRACE_HEADERS = ['x-request-id', 'traceparent', 'tracestate'] as const;
