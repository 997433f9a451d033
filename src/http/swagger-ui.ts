// Swagger UI at /docs, built on its first request instead of at start-up: @fastify/swagger-ui and
// the file server under it (@fastify/static, send, glob) are a tenth of a gateway's start-up CPU,
// for a page few gateways ever serve. The first request builds a small fastify app of its own
// holding the UI (over the main app's OpenAPI document, complete by then: routes are fixed once
// the gateway listens) and every /docs request is answered from it in memory (inject), through
// the main app's reply, so the main app's hooks and error envelope apply as to any route.

import Fastify, { type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest } from 'fastify';
import { UI_PREFIX, uiOptions } from '../api/openapi.ts';

/** Hop-by-hop and framing headers of the inner answer: the main app's reply sets its own. */
const NOT_COPIED = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date', 'content-length']);

export const swaggerUiRoutes: FastifyPluginAsync = async (app) => {
  let ui: Promise<FastifyInstance> | undefined;
  const build = async (): Promise<FastifyInstance> => {
    const [{ default: swagger }, { default: swaggerUi }] = await Promise.all([import('@fastify/swagger'), import('@fastify/swagger-ui')]);
    const inner = Fastify({ logger: false });
    await inner.register(swagger, { mode: 'static', specification: { document: app.swagger() as never } });
    await inner.register(swaggerUi, uiOptions());
    await inner.ready();
    return inner;
  };

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    if (!ui) {
      ui = build();
      // A failed build is tried again by the next request, not remembered.
      ui.catch(() => (ui = undefined));
    }
    const inner = await ui;
    const res = await inner.inject({ method: 'GET', url: req.url, headers: req.headers });
    // What the UI does not serve is the gateway's own 404, in its envelope.
    if (res.statusCode === 404) return reply.callNotFound();
    for (const [name, value] of Object.entries(res.headers)) if (value !== undefined && !NOT_COPIED.has(name)) reply.header(name, value);
    // An empty answer (a redirect, a 304) stays empty: a Buffer would earn it a content type.
    return reply.code(res.statusCode).send(res.rawPayload.length > 0 ? res.rawPayload : undefined);
  };

  app.get(UI_PREFIX, { schema: { hide: true } }, handler);
  app.get(`${UI_PREFIX}/*`, { schema: { hide: true } }, handler);
};
