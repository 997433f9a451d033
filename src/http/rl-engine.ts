// `/v1/rl` pass-through routes: GET|POST /workers/:id/engine/* to one worker and
// GET|POST /engine/*?selector= to every matching worker. HEAD goes to the engines as HEAD, as
// SMG's GET routes take it, and is answered with the status and headers but no body. Other
// methods (OPTIONS too) are 405 and reach no engine. A client that disconnects cancels the
// engine calls outstanding.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { RouteOptions } from './services.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { methodNotAllowed } from './rl-workers.ts';
import { TRACE_HEADERS, type IncomingControl } from '../control/incoming-control.ts';
import { CONCURRENCY_HEADER, requestedConcurrency } from '../control/concurrency.ts';
import { errorResponses, methodNotAllowedSchema, RL_AUTH } from '../api/error-responses.ts';
import { EnginePathParams, FanoutAnswer, FanoutHeaders, mirroredResponses, TraceHeaders, WorkerEnginePathParams } from '../api/fanout-schema.ts';
import { SelectorQuery } from '../api/rl-worker-schema.ts';
import { WorkerIdParams } from '../api/worker-schema.ts';
import type { ControlMethod } from '../wire/control-call.ts';

const TAG = ['rl-engine'];
// A POST body goes to the engines as sent (any content type); documented as JSON, what engines take.
const EngineBody = { description: "The engine route's own body, forwarded byte for byte." };

export const rlEngineRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { passthrough } = services;
  acceptRawBodies(app);

  // The bare `/engine` forms exist so an empty path is a 400 invalid_engine_path, not a 404.
  // One route per method: only POST documents a body (fastify refuses a body schema on GET).
  for (const url of ['/workers/:id/engine/*', '/workers/:id/engine'])
    for (const method of ['GET', 'HEAD', 'POST'] as const) {
      app.route<{ Params: { id: string; '*'?: string } }>({
        method,
        url,
        schema: {
          tags: TAG,
          summary: "Call one engine's own route",
          description:
            "Proxies one engine-native route to one worker's control endpoint; the answer wraps the engine's and mirrors its status. An empty engine path is a 400.",
          params: url.endsWith('*') ? WorkerEnginePathParams : WorkerIdParams,
          headers: TraceHeaders,
          ...(method === 'POST' ? { body: EngineBody } : {}),
          response: mirroredResponses(
            errorResponses(
              ...RL_AUTH,
              'invalid_engine_path',
              'worker_not_found',
              'no_control_endpoint',
              'payload_too_large',
              'uri_too_long',
              'upstream_unreachable',
              'bus_unavailable',
              'upstream_timeout',
            ),
          ),
        },
        // HEAD has its own route (forwarded as HEAD), not fastify's GET answered without a body.
        exposeHeadRoute: false,
        handler: async (req, reply) => {
          const { status, body } = await passthrough.proxy(req.params.id, incoming(req, req.params['*'] ?? '', reply));
          return reply.code(status).send(body);
        },
      });
    }

  for (const url of ['/engine/*', '/engine'])
    for (const method of ['GET', 'HEAD', 'POST'] as const) {
      app.route<{ Params: { '*'?: string } }>({
        method,
        url,
        schema: {
          tags: TAG,
          summary: 'Send one call to every matching engine',
          description:
            'Fans the same engine-native call out to every engine the selector matches (DP ranks collapsed): 200 when every engine answered 2xx, 207 otherwise. Query parameters other than `selector` go to the engines. An empty engine path is a 400.',
          ...(url.endsWith('*') ? { params: EnginePathParams } : {}),
          querystring: SelectorQuery,
          headers: FanoutHeaders,
          ...(method === 'POST' ? { body: EngineBody } : {}),
          response: {
            200: FanoutAnswer,
            207: { ...FanoutAnswer, description: 'Multi-Status: at least one engine failed or answered non-2xx (see `failed`).' },
            ...errorResponses(
              ...RL_AUTH,
              'invalid_engine_path',
              'selector_required',
              'invalid_selector',
              'no_workers_match',
              'invalid_request',
              'payload_too_large',
            ),
          },
        },
        exposeHeadRoute: false,
        handler: async (req, reply) => {
          const query = new URLSearchParams(rawQuery(req.url));
          const selector = query.has('selector') ? (query.get('selector') ?? '') : undefined;
          const concurrency = requestedConcurrency(req.headers[CONCURRENCY_HEADER]);
          const { status, json } = await passthrough.fanout({ ...incoming(req, req.params['*'] ?? '', reply), selector, concurrency });
          // Written by the control plane straight from the outcomes (fanout-answer.ts): nothing to serialise here.
          return reply.code(status).type('application/json; charset=utf-8').send(json);
        },
      });
    }

  for (const url of ['/workers/:id/engine/*', '/engine/*', '/workers/:id/engine', '/engine']) {
    app.route({
      method: ['DELETE', 'PUT', 'PATCH', 'OPTIONS'],
      url,
      schema: methodNotAllowedSchema('rl-engine', 'GET, HEAD, POST', ...RL_AUTH),
      handler: methodNotAllowed('GET, HEAD, POST'),
    });
  }
};

function incoming(req: FastifyRequest, path: string, reply: FastifyReply): IncomingControl {
  const trace: Record<string, string> = {};
  for (const h of TRACE_HEADERS) {
    const v = req.headers[h];
    if (typeof v === 'string') trace[h] = v;
  }
  // The legs run inside the request: if the caller goes away, stop them.
  const abort = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  return {
    method: methodOf(req.method),
    path: path ?? '',
    rawQuery: rawQuery(req.url),
    body: rawBody(req.body),
    contentType: typeof req.headers['content-type'] === 'string' ? req.headers['content-type'] : undefined,
    trace,
    signal: abort.signal,
  };
}

/**
 * The caller's method, sent as it is: the control client hands it to undici unchanged, so a HEAD
 * reaches the engine as HEAD.
 */
function methodOf(method: string): ControlMethod {
  return method === 'GET' || method === 'HEAD' ? method : 'POST';
}

function rawQuery(url: string): string {
  const i = url.indexOf('?');
  return i < 0 ? '' : url.slice(i + 1);
}
