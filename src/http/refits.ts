// The server-side refit transaction over HTTP: POST /v1/rl/refits runs pause → refit → verify →
// resume across the selected engines and answers the report (200 all succeeded, 207 otherwise);
// GET /v1/rl/refits/:id returns a kept report; GET /v1/rl/refits lists the recent ones.

import type { FastifyPluginAsync } from 'fastify';
import type { RouteOptions } from './services.ts';
import { acceptRawBodies, parseJsonObject, rawBody } from './raw-body.ts';
import { reportStatus } from '../refit/report.ts';
import { methodNotAllowed } from './rl-workers.ts';

export const refitRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { refits } = services;
  acceptRawBodies(app);

  app.post('/refits', async (req, reply) => {
    // The refit route speaks the generic request-error code; invalid_body belongs to §11 writes.
    const body = parseJsonObject(rawBody(req.body), 'invalid_request');
    if (body.dry_run === true) return reply.code(200).send(refits.plan(body));
    const report = await refits.run(body, 'http');
    return reply.code(reportStatus(report)).send(report);
  });

  app.get('/refits', async () => ({ refits: refits.list() }));

  app.get<{ Params: { id: string } }>('/refits/:id', async (req) => await refits.get(req.params.id));

  app.route({ method: ['PUT', 'PATCH', 'DELETE'], url: '/refits', handler: methodNotAllowed('GET, POST') });
  app.route({ method: ['POST', 'PUT', 'PATCH', 'DELETE'], url: '/refits/:id', handler: methodNotAllowed('GET') });
};
