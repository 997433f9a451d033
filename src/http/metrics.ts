// GET /metrics: the gateway's Prometheus registry in text exposition format.

import type { FastifyPluginAsync } from 'fastify';
import type { RouteOptions } from './services.ts';
import { errorResponses } from '../api/error-responses.ts';

const metricsSchema = {
  tags: ['gateway'],
  summary: 'Prometheus metrics',
  description: "The gateway's metrics (`rlgate_*`, and `rlgate_rl_*` with RL on) in Prometheus text exposition format.",
  response: { 200: { description: 'Prometheus text format.', content: { 'text/plain': { schema: { type: 'string' } } } }, ...errorResponses() },
};

export const metricsRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  app.get('/metrics', { schema: metricsSchema }, async (_req, reply) => {
    reply.header('content-type', services.metrics.registry.contentType);
    return services.metrics.registry.metrics();
  });
};
