// Turns engine-call outcomes into the wire envelopes RlCallOutcome and the fan-out answer
// (RlFailedCall), and into the proxy's HTTP answer. One place decides which outcome is an
// error of which code, so the per-worker route and the fan-out can never disagree.

import { GatewayError } from '../api/errors.ts';
import type { Worker } from '../fleet/worker.ts';
import type { ControlOutcome } from '../wire/control-call.ts';
export { noControlEndpoint } from '../fleet/control-url.ts';

export interface RlCallOutcome {
  worker_id: string;
  url: string;
  status: number;
  latency_ms: number;
  body: unknown;
  body_truncated?: true;
}

export interface RlFailedCall {
  worker_id: string;
  url: string;
  error: string;
  message: string;
  status?: number;
  connection_mode?: string;
}

export function callOutcome(w: Pick<Worker, 'id' | 'url'>, o: Extract<ControlOutcome, { kind: 'answer' }>): RlCallOutcome {
  const out: RlCallOutcome = { worker_id: w.id, url: w.url, status: o.status, latency_ms: o.latencyMs, body: o.body };
  if (o.truncated) out.body_truncated = true;
  return out;
}

export function isSuccess(o: ControlOutcome): boolean {
  return o.kind === 'answer' && o.status >= 200 && o.status < 300;
}

/** The failed[] entry for an outcome that is not a 2xx answer; undefined for a success. */
export function failedCall(w: Pick<Worker, 'id' | 'url'>, o: ControlOutcome): RlFailedCall | undefined {
  switch (o.kind) {
    case 'answer':
      return isSuccess(o) ? undefined : { worker_id: w.id, url: w.url, error: 'upstream_error', message: `HTTP ${o.status}`, status: o.status };
    case 'timeout':
      return { worker_id: w.id, url: w.url, error: 'upstream_timeout', message: o.message };
    case 'unreachable':
      return { worker_id: w.id, url: w.url, error: unreachableCode(o), message: o.message };
    case 'no_control_endpoint':
      return { worker_id: w.id, url: w.url, error: 'no_control_endpoint', message: o.message, connection_mode: o.connectionMode };
  }
}

/** Per-worker proxy: the engine's status is mirrored; failures without an answer are errors. */
export function proxyAnswer(w: Pick<Worker, 'id' | 'url'>, o: ControlOutcome): { status: number; body: RlCallOutcome } {
  switch (o.kind) {
    case 'answer': {
      const usable = Number.isInteger(o.status) && o.status >= 200 && o.status <= 599;
      return { status: usable ? o.status : 502, body: callOutcome(w, o) };
    }
    case 'timeout':
      throw new GatewayError('upstream_timeout', o.message, { worker_id: w.id, url: w.url });
    case 'unreachable':
      // bus_unavailable is a 503: the gateway's bus is down, the engine may well be fine.
      throw new GatewayError(unreachableCode(o), o.message, { worker_id: w.id, url: w.url });
    case 'no_control_endpoint':
      throw new GatewayError('no_control_endpoint', o.message, { worker_id: w.id, url: w.url, connection_mode: o.connectionMode });
  }
}

/**
 * The public error of a leg that reached no engine: `bus_unavailable` when the gateway's bus was
 * down, else `upstream_unreachable` (a leg still refused by a replica that lost the engine when
 * its deadline ran out is one too: no engine was reached).
 */
export function unreachableCode(o: Extract<ControlOutcome, { kind: 'unreachable' }>): 'bus_unavailable' | 'upstream_unreachable' {
  return o.code === 'bus_unavailable' ? 'bus_unavailable' : 'upstream_unreachable';
}
