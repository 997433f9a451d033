// One buffered call to an HTTP engine's data-plane route that generates nothing for a rollout
// (`/v1/tokenize`, `/v1/detokenize`, `/health_generate`): sent on the engine's data pool with its
// key, read whole, bounded by LIGHT_CALL_SECS (or `--request-timeout-secs` when shorter: the data
// plane's bound is sized for long generations, and a hung engine must not hold a tokenize or a
// health probe for hours). It counts no load and no breaker outcome:
// these calls are light, and a probe's failure is the caller's answer, not a routing fact. It
// never retries and never picks an engine.

import type { IncomingHttpHeaders } from 'node:http';
import { GatewayError } from '../api/errors.ts';
import type { HttpEngineClient } from '../engines/http.ts';
import type { Worker } from '../fleet/worker.ts';
import type { RelayServices } from './relay-services.ts';

/** Longest wait for a light call's answer: a tokenize or a one-token generation takes well under a second. */
export const LIGHT_CALL_SECS = 30;

/** The deadline of a light call, in seconds. */
export function lightCallSecs(config: { requestTimeoutSecs: number }): number {
  return Math.min(LIGHT_CALL_SECS, config.requestTimeoutSecs);
}

export interface EngineAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface EngineRequest {
  method: 'GET' | 'POST';
  path: string;
  /** Sent as JSON. */
  body?: unknown;
}

/** The engine's answer, whatever its status; 502 `upstream_unreachable` or 504 `upstream_timeout` when there is none. */
export async function callHttpEngine(
  services: Pick<RelayServices, 'config'>,
  worker: Worker,
  client: HttpEngineClient,
  req: EngineRequest,
): Promise<EngineAnswer> {
  const timeoutSecs = lightCallSecs(services.config);
  const headers: Record<string, string> = {};
  if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
  if (req.body !== undefined) headers['content-type'] = 'application/json';
  const signal = AbortSignal.timeout(timeoutSecs * 1000);
  try {
    const res = await client.pool.request({
      path: req.path,
      method: req.method,
      headers,
      body: req.body === undefined ? undefined : JSON.stringify(req.body),
      signal,
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: res.headers, body };
  } catch (err) {
    const context = { worker_id: worker.id, url: worker.url };
    if (signal.aborted) throw new GatewayError('upstream_timeout', `request to \`${worker.url}\` timed out after ${timeoutSecs}s`, context);
    throw new GatewayError('upstream_unreachable', `upstream \`${worker.url}\` unreachable: ${(err as Error).message}`, context);
  }
}
