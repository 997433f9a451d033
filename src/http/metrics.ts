// GET /metrics: the gateway's Prometheus registry in text exposition format.

import type { FastifyPluginAsync } from 'fastify';
import type { RouteOptions } from './services.ts';

export const metricsRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', services.metrics.registry.contentType);
    return services.metrics.registry.metrics();
  });
};
