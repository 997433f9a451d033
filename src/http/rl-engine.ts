// `/v1/rl` pass-through routes (spec §9–10): GET|POST /workers/:id/engine/* to one worker and
// GET|POST /engine/*?selector= to every matching worker. Other methods (HEAD and OPTIONS too)
// are 405 and reach no engine. A client that disconnects cancels the engine calls outstanding.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { RouteOptions } from './services.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { methodNotAllowed } from './rl-workers.ts';
import { TRACE_HEADERS, type IncomingControl } from '../control/passthrough.ts';
import { CONCURRENCY_HEADER, requestedConcurrency } from '../control/concurrency.ts';

export const rlEngineRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { passthrough } = services;
  acceptRawBodies(app);

  // The bare `/engine` forms exist so an empty path is a 400 invalid_engine_path, not a 404.
  for (const url of ['/workers/:id/engine/*', '/workers/:id/engine']) {
    app.route<{ Params: { id: string; '*'?: string } }>({
      method: ['GET', 'POST'],
      url,
      // fastify would otherwise answer HEAD through this handler, i.e. as an engine call.
      exposeHeadRoute: false,
      handler: async (req, reply) => {
        const { status, body } = await passthrough.proxy(req.params.id, incoming(req, req.params['*'] ?? '', reply));
        return reply.code(status).send(body);
      },
    });
  }

  for (const url of ['/engine/*', '/engine']) {
    app.route<{ Params: { '*'?: string } }>({
      method: ['GET', 'POST'],
      url,
      exposeHeadRoute: false,
      handler: async (req, reply) => {
        const query = new URLSearchParams(rawQuery(req.url));
        const selector = query.has('selector') ? (query.get('selector') ?? '') : undefined;
        const concurrency = requestedConcurrency(req.headers[CONCURRENCY_HEADER]);
        const { status, body } = await passthrough.fanout({ ...incoming(req, req.params['*'] ?? '', reply), selector, concurrency });
        return reply.code(status).send(body);
      },
    });
  }

  for (const url of ['/workers/:id/engine/*', '/engine/*', '/workers/:id/engine', '/engine']) {
    app.route({ method: ['DELETE', 'PUT', 'PATCH', 'HEAD', 'OPTIONS'], url, handler: methodNotAllowed('GET, POST') });
  }
};

function incoming(req: FastifyRequest, path: string, reply: FastifyReply): IncomingControl {
  const trace: Record<string, string> = {};
  for (const h of TRACE_HEADERS) {
    const v = req.headers[h];
    if (typeof v === 'string') trace[h] = v;
  }
  // The legs run inside the request: if the caller goes away, stop them (spec §10.1 step 5).
  const abort = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  return {
    method: req.method === 'GET' ? 'GET' : 'POST',
    path: path ?? '',
    rawQuery: rawQuery(req.url),
    body: rawBody(req.body),
    contentType: typeof req.headers['content-type'] === 'string' ? req.headers['content-type'] : undefined,
    trace,
    signal: abort.signal,
  };
}

function rawQuery(url: string): string {
  const i = url.indexOf('?');
  return i < 0 ? '' : url.slice(i + 1);
}
