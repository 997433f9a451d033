// sglang-router's legacy worker API, which slime up to 0.3.0 calls (`sglang_router` ≤ 0.2.1):
// `POST /add_worker?url=` (answers once the worker is ready, as sglang-router waits for its
// health), `GET /list_workers` (`{"urls": [...]}`), `POST /remove_worker?url=`. Answers and status
// codes are sglang-router's: plain-text successes, 400 when a worker cannot be added. Registration
// itself is the registry's, as for `POST /workers` (re-adding a URL is idempotent).

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { RouteOptions, Services } from './services.ts';
import { GatewayError } from '../api/errors.ts';
import { errorResponses, methodNotAllowedSchema } from '../api/error-responses.ts';
import { ADMIN_SECURITY } from '../api/openapi.ts';
import { acceptRawBodies } from './raw-body.ts';
import { bearerMatches, checkRegistrationBearer } from './admin-auth.ts';
import { allowedHostsOf, checkWorkerUrl } from '../fleet/worker-url.ts';
import { methodNotAllowed } from './rl-workers.ts';
import { healthOf } from '../fleet/fleet-view.ts';
import { workerControlUrl } from '../fleet/control-url.ts';

/** sglang-router's default `--worker-startup-timeout-secs`: how long `/add_worker` waits for health. */
const STARTUP_TIMEOUT_SECS = 600;
const MAX_TIMEOUT_SECS = 3600;
const POLL_MS = 50;
const TAG = ['workers'];

const UrlQuery = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: 'The worker URL, as sglang-router takes it (`http://host:port`).' }),
    timeout_secs: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_TIMEOUT_SECS,
        description: `rlgate only: how long to wait for the worker to be ready (default ${STARTUP_TIMEOUT_SECS}, sglang-router's).`,
      }),
    ),
  },
  { additionalProperties: true },
);
const RemoveQuery = Type.Object({ url: UrlQuery.properties.url }, { additionalProperties: true });
const Text = (description: string) => Type.String({ description: `text/plain: ${description}` });

export const sglangRouterRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { registry, config } = services;
  // sglang-router reads the query only; a body of any type is ignored, never parsed.
  acceptRawBodies(app);

  app.post(
    '/add_worker',
    {
      schema: {
        tags: TAG,
        summary: 'Add a worker (sglang-router legacy)',
        description:
          "Registers the worker as `POST /workers {url}` would, then answers once it is ready, as sglang-router waits for a worker's health. A worker not ready in time is removed again (when this call added it) and answered 400.",
        querystring: UrlQuery,
        response: { 200: Text('`Successfully added worker: <url>`'), ...errorResponses('invalid_request', 'unauthorized') },
      },
    },
    async (req, reply) => {
      checkRegistrationBearer(req.headers.authorization, config);
      const url = urlParam(req);
      const timeoutSecs = timeoutParam(req);
      checkWorkerUrl(url, allowedHostsOf(config.allowedWorkerHosts ?? []));
      // As POST /workers: with an admin key, re-adding a known URL without its bearer keeps the
      // worker's key and labels (a bare `{url}` registration would drop them).
      const known = registry.findByUrl(url);
      const keep = known !== undefined && !!config.adminKey && !bearerMatches(req.headers.authorization, config.adminKey);
      const { worker, created } = keep ? { worker: registry.touch(known.id), created: false } : registry.register({ url });
      const ready = await waitReady(services, worker.id, timeoutSecs, reply);
      if (ready === 'gone') throw new GatewayError('invalid_request', `worker ${url} was removed while it was being added`, { url });
      if (ready !== 'ready') {
        // sglang-router adds a worker only once it is healthy: one that never was is not kept.
        if (created && registry.get(worker.id)) registry.remove(worker.id);
        throw new GatewayError('invalid_request', `Timeout ${timeoutSecs}s waiting for worker ${url} to become healthy`, { url });
      }
      return reply.type('text/plain; charset=utf-8').send(`Successfully added worker: ${url}`);
    },
  );

  app.get(
    '/list_workers',
    {
      schema: {
        tags: TAG,
        summary: 'List worker URLs (sglang-router legacy)',
        description:
          'Every registered worker URL. With `--workers-list-control-urls`, a gRPC or ZMQ worker with a control app is listed by that URL, as in `GET /workers` (slime calls `/abort_request` on each).',
        response: { 200: Type.Object({ urls: Type.Array(Type.String()) }, { additionalProperties: true }), ...errorResponses() },
      },
    },
    async () => {
      const urls = registry
        .all()
        .sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0))
        .map((w) => (config.workersListControlUrls && w.connectionMode !== 'http' ? (workerControlUrl(w) ?? w.url) : w.url));
      return { urls };
    },
  );

  app.post(
    '/remove_worker',
    {
      schema: {
        tags: TAG,
        summary: 'Remove a worker (sglang-router legacy)',
        description:
          'Removes the worker with this URL, or every DP rank (`<url>@<rank>`) of the engine at this URL. Answers 200 whether or not it was registered, as sglang-router does. With `--admin-key` set it needs the admin bearer, as `DELETE /workers/{id}` does.',
        querystring: RemoveQuery,
        security: ADMIN_SECURITY,
        response: { 200: Text('`Successfully removed worker: <url>`'), ...errorResponses('invalid_request', 'unauthorized') },
      },
    },
    async (req, reply) => {
      if (config.adminKey && !bearerMatches(req.headers.authorization, config.adminKey)) {
        throw new GatewayError('unauthorized', 'changing worker keys, rl.* or weight_version labels, or existing workers needs the admin bearer token');
      }
      const url = urlParam(req);
      const exact = registry.findByUrl(url);
      const targets = exact ? [exact] : registry.siblings(url.replace(/\/+$/, '')).filter((w) => w.dpAware);
      for (const w of targets) if (registry.get(w.id)) registry.remove(w.id);
      return reply.type('text/plain; charset=utf-8').send(`Successfully removed worker: ${url}`);
    },
  );

  for (const url of ['/add_worker', '/remove_worker']) {
    app.route({ method: ['GET', 'PUT', 'PATCH', 'DELETE'], url, schema: methodNotAllowedSchema('workers', 'POST'), handler: methodNotAllowed('POST') });
  }
  app.route({
    method: ['POST', 'PUT', 'PATCH', 'DELETE'],
    url: '/list_workers',
    schema: methodNotAllowedSchema('workers', 'GET'),
    handler: methodNotAllowed('GET'),
  });
};

function urlParam(req: FastifyRequest): string {
  const url = (req.query as Record<string, unknown>).url;
  if (typeof url !== 'string' || url.trim() === '')
    throw new GatewayError('invalid_request', 'the `url` query parameter is required (one worker URL)', { field: 'url' });
  return url.trim();
}

function timeoutParam(req: FastifyRequest): number {
  const raw = (req.query as Record<string, unknown>).timeout_secs;
  if (raw === undefined) return STARTUP_TIMEOUT_SECS;
  const n = typeof raw === 'string' && /^[0-9]+$/.test(raw) ? Number(raw) : typeof raw === 'number' ? raw : NaN;
  if (!Number.isInteger(n) || n < 1 || n > MAX_TIMEOUT_SECS) {
    throw new GatewayError('invalid_request', `\`timeout_secs\` must be an integer from 1 to ${MAX_TIMEOUT_SECS}`, { field: 'timeout_secs' });
  }
  return n;
}

/** Polls the worker's health until it is ready, removed, the timeout passes or the caller goes away. */
async function waitReady(services: Services, id: string, timeoutSecs: number, reply: FastifyReply): Promise<'ready' | 'gone' | 'timeout' | 'caller_gone'> {
  const deadline = Date.now() + timeoutSecs * 1000;
  let callerGone = false;
  const onClose = () => {
    if (!reply.raw.writableFinished) callerGone = true;
  };
  reply.raw.once('close', onClose);
  try {
    for (;;) {
      const w = services.registry.get(id);
      if (!w) return 'gone';
      if (healthOf(services.view.engine(w)) === 'ready') return 'ready';
      if (callerGone) return 'caller_gone';
      if (Date.now() >= deadline) return 'timeout';
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  } finally {
    reply.raw.off('close', onClose);
  }
}
