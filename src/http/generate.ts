// The minimal data plane: SGLang-native /generate and OpenAI-shaped /v1/chat/completions and
// /v1/completions, routed among eligible engines. HTTP engines are relayed as they answer
// (streamed bytes are piped, never re-parsed; the caller's bytes go upstream untouched); token
// engines (gRPC, ZMQ) go through token-relay.ts.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { HttpEngineClient } from '../engines/http.ts';
import { GatewayError } from './errors.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { checkDataPlaneBody, type DataPlanePath } from './data-plane-input.ts';
import type { RouteOptions, Services } from './services.ts';
import { tokenRelay } from './token-relay.ts';
import type { TokenEngine } from '../engines/generation.ts';
import type { EngineClient } from '../engines/engine-client.ts';

function isTokenEngine(c: EngineClient): c is EngineClient & TokenEngine {
  return typeof (c as Partial<TokenEngine>).generate === 'function';
}

const HTTP_ONLY = new Set(['http']);
const ROUTED_HEADER = 'x-smg-routed-worker-id';
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade', ROUTED_HEADER]);

export const generateRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  acceptRawBodies(app);
  for (const path of ['/generate', '/v1/chat/completions', '/v1/completions'] as const) {
    app.post(path, (req, reply) => relay(services, path, req, reply));
  }
  app.put('/generate', (req, reply) => relay(services, '/generate', req, reply));
};

async function relay(services: Services, path: DataPlanePath, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const body = rawBody(req.body);
  const parsed = checkDataPlaneBody(path, body);

  // OpenAI-shaped routes need a chat template and tokenizer on token engines: HTTP engines only.
  const worker = services.router.pick(path === '/generate' ? {} : { modes: HTTP_ONLY });
  if (!worker) {
    services.metrics.request(path, 503);
    throw new GatewayError('no_available_workers', 'no available workers: every engine is paused, refitting, unreachable or breaker-open; retry', { retryable: true });
  }
  const client = services.host.client(worker.id);
  if (client && isTokenEngine(client)) return tokenRelay(services, worker, client, parsed, reply);
  if (!(client instanceof HttpEngineClient)) throw new GatewayError('no_available_workers', 'no available workers', { retryable: true });

  const abort = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  services.host.acquire(worker.id);
  let released = false;
  const release = (outcome: 'success' | 'failure' | 'neutral') => {
    if (released) return;
    released = true;
    services.host.release(worker.id, outcome);
  };

  try {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (worker.apiKey) headers.authorization = `Bearer ${worker.apiKey}`;
    const upstream = await client.pool.request({ path, method: 'POST', headers, body, signal: abort.signal });
    const outcome = upstream.statusCode >= 500 ? 'failure' : 'success';
    // A caller that goes away mid-stream says nothing about the engine: neither success nor failure.
    upstream.body.on('end', () => release(outcome));
    upstream.body.on('close', () => release(abort.signal.aborted ? 'neutral' : outcome));
    upstream.body.on('error', () => release(abort.signal.aborted ? 'neutral' : 'failure'));
    reply.code(upstream.statusCode);
    for (const [k, v] of Object.entries(upstream.headers)) {
      if (v !== undefined && !HOP_HEADERS.has(k.toLowerCase())) reply.header(k, v);
    }
    reply.header(ROUTED_HEADER, worker.url);
    services.metrics.request(path, upstream.statusCode);
    return reply.send(upstream.body);
  } catch (err) {
    release(abort.signal.aborted ? 'neutral' : 'failure');
    services.metrics.request(path, 502);
    if (abort.signal.aborted) throw new GatewayError('invalid_request', 'client went away');
    throw new GatewayError('upstream_unreachable', `upstream \`${worker.url}\` unreachable: ${(err as Error).message}`, { worker_id: worker.id, url: worker.url });
  }
}
