// `GET /health_generate`, which SMG's router serves among its probes: the answer of the first
// routable worker (HTTP engines first, then by URL) to a one-token generation
// (relay/health-generate.ts), stamped with that worker. With no routable worker it is 503
// `no_available_workers`, as SMG answers 503 when no worker is healthy.

import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { Type } from '@sinclair/typebox';
import { GatewayError } from '../api/errors.ts';
import { errorResponses } from '../api/error-responses.ts';
import { healthGenerateOn } from '../relay/health-generate.ts';
import { ROUTED_HEADER } from '../relay/stamping.ts';
import type { RouteOptions } from './services.ts';

export const healthGenerateRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  app.get(
    '/health_generate',
    {
      schema: {
        tags: ['gateway'],
        summary: 'Health by generation (SMG)',
        description:
          "The first routable worker's (HTTP engines first, then by URL) answer to a one-token generation: an SGLang engine's own `/health_generate` (200 or 503, no body, passed back), a token engine's generating health check (200 or 503, no body). `x-smg-routed-worker-id` names the worker. 503 `no_available_workers` when no worker is routable.",
        response: {
          200: Type.Any({ description: "The engine's answer (SGLang's is empty)." }),
          503: Type.Any({ description: "The engine's answer (SGLang's is empty), or `no_available_workers` (no routable worker)." }),
          ...errorResponses('upstream_unreachable', 'upstream_timeout'),
        },
      },
    },
    async (_req, reply: FastifyReply) => {
      const routable = services.router.eligible({});
      const worker = routable.sort(
        (a, b) => Number(b.connectionMode === 'http') - Number(a.connectionMode === 'http') || (a.url < b.url ? -1 : a.url > b.url ? 1 : 0),
      )[0];
      const client = worker && services.host.client(worker.id);
      if (!worker || !client) {
        throw new GatewayError(
          'no_available_workers',
          'no routable worker to run a generation: every engine is paused, refitting, unreachable or breaker-open; retry',
          {
            retryable: true,
          },
        );
      }
      const answer = await healthGenerateOn(services, worker, client);
      const type = answer.headers['content-type'];
      if (type !== undefined) reply.header('content-type', type);
      return reply.code(answer.status).header(ROUTED_HEADER, worker.url).send(answer.body);
    },
  );
};
