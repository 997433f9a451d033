// The minimal data plane: SGLang-native /generate and OpenAI-shaped /v1/chat/completions and
// /v1/completions, routed among eligible engines. HTTP engines are relayed as they answer
// (streamed bytes are piped, never re-parsed; the caller's bytes go upstream untouched); the one
// exception is a buffered JSON /generate with RL on, read whole so the mixed-version check can
// see it (and sent byte for byte). Token engines (gRPC, ZMQ) go through token-relay.ts.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import { HttpEngineClient } from '../engines/http.ts';
import { GatewayError } from './errors.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { checkDataPlaneBody, type DataPlanePath } from './data-plane-input.ts';
import type { RouteOptions, Services } from './services.ts';
import { tokenRelay } from './token-relay.ts';
import type { TokenEngine } from '../engines/generation.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import { parseVersionPolicy, policyFromHeader, type VersionPolicy } from '../fleet/version-policy.ts';
import { GATEWAY_ONLY_HEADERS, ROUTED_HEADER, isJsonContentType, isMixedBytes, stampMixed, stampWeightVersion } from './stamping.ts';

function isTokenEngine(c: EngineClient): c is EngineClient & TokenEngine {
  return typeof (c as Partial<TokenEngine>).generate === 'function';
}

const HTTP_ONLY = new Set(['http']);
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade', ...GATEWAY_ONLY_HEADERS]);
const SMG_POLICY_HEADER = 'x-smg-version-policy';
const RL_POLICY_HEADER = 'x-rl-version-policy';

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
  const rl = services.config.rl.enabled;
  const policy = rl ? requestPolicy(services.config.rl.versionPolicy, req) : undefined;

  // OpenAI-shaped routes need a chat template and tokenizer on token engines: HTTP engines only.
  const worker = services.router.pick({ modes: path === '/generate' ? undefined : HTTP_ONLY, policy, counts: services.metrics });
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
    // Streams are never inspected (§13.4): only a buffered 2xx JSON /generate is read whole.
    const inspect =
      rl && path === '/generate' && parsed.stream !== true && upstream.statusCode >= 200 && upstream.statusCode < 300 &&
      isJsonContentType(upstream.headers['content-type']);
    let payload: Buffer | Readable = upstream.body;
    if (inspect) {
      payload = Buffer.from(await upstream.body.arrayBuffer());
      release(outcome);
    }
    reply.code(upstream.statusCode);
    for (const [k, v] of Object.entries(upstream.headers)) {
      if (v !== undefined && !HOP_HEADERS.has(k.toLowerCase())) reply.header(k, v);
    }
    reply.header(ROUTED_HEADER, worker.url);
    if (rl) {
      const version = services.view.engine(worker).version;
      stampWeightVersion(reply, version);
      if (inspect && isMixedBytes(payload as Buffer, version)) {
        stampMixed(reply);
        services.metrics.mixedVersion();
      }
    }
    services.metrics.request(path, upstream.statusCode);
    return reply.send(payload);
  } catch (err) {
    release(abort.signal.aborted ? 'neutral' : 'failure');
    services.metrics.request(path, 502);
    if (abort.signal.aborted) throw new GatewayError('invalid_request', 'client went away');
    throw new GatewayError('upstream_unreachable', `upstream \`${worker.url}\` unreachable: ${(err as Error).message}`, { worker_id: worker.id, url: worker.url });
  }
}

/**
 * The version policy of one request (RL on; spec §13.2): each policy header present must parse
 * (else 400 `invalid_version_policy`, before routing); `x-rl-version-policy` wins over
 * `x-smg-version-policy` when both are valid; neither → the configured default.
 */
function requestPolicy(configured: string, req: FastifyRequest): VersionPolicy {
  const smg = headerPolicy(req.headers[SMG_POLICY_HEADER]);
  const ours = headerPolicy(req.headers[RL_POLICY_HEADER]);
  return ours ?? smg ?? defaultPolicy(configured);
}

function headerPolicy(value: string | string[] | undefined): VersionPolicy | undefined {
  if (value === undefined) return undefined;
  // A repeated header is one value to SMG's parser too: it cannot parse as a single policy.
  const text = Array.isArray(value) ? value.join(', ') : value;
  return policyFromHeader(utf8HeaderValue(text));
}

// Node hands header values over as latin1 (one char per byte): re-read non-ASCII ones as UTF-8.
const UTF8 = new TextDecoder('utf-8', { fatal: true });
function utf8HeaderValue(text: string): string {
  if (!/[^\x00-\x7f]/.test(text)) return text;
  try {
    return UTF8.decode(Buffer.from(text, 'latin1'));
  } catch {
    throw new GatewayError('invalid_version_policy', 'header value is not UTF-8');
  }
}

// The configured default was validated at startup (gateway/config.ts); parse it once.
let configuredPolicy: { text: string; policy: VersionPolicy } | undefined;
function defaultPolicy(text: string): VersionPolicy {
  if (configuredPolicy?.text !== text) configuredPolicy = { text, policy: parseVersionPolicy(text.trim()) };
  return configuredPolicy.policy;
}
