// `GET /v1/models`: the OpenAI model list, from the registry as SMG answers it (so an OpenAI SDK's
// `models.list()` works against the gateway): one entry per real model some registered worker
// serves, whatever its state. It never asks an engine; workers registered as `unknown` list nothing.

import type { FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { RouteOptions } from './services.ts';
import { GatewayError } from '../api/errors.ts';
import { errorResponses } from '../api/error-responses.ts';
import type { Worker } from '../fleet/worker.ts';

/** SMG's `owned_by` for a model its own workers serve (no provider). */
const OWNED_BY = 'self_hosted';

const ModelObject = Type.Object(
  {
    id: Type.String({ description: 'The model id workers are registered under (served_model_name, model_id, ...).' }),
    object: Type.Literal('model'),
    created: Type.Integer({ description: 'Unix seconds: when the first worker still serving it was registered.' }),
    owned_by: Type.String({ description: '`self_hosted`, as SMG answers for its own workers.' }),
  },
  { additionalProperties: true },
);

const ModelList = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(ModelObject) },
  { additionalProperties: true, description: 'The OpenAI list shape.' },
);

export const modelRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { registry } = services;
  app.get(
    '/v1/models',
    {
      schema: {
        tags: ['generate'],
        summary: 'List the models',
        description: 'The models the registered workers serve, in the OpenAI list shape. 503 while none is known (as SMG).',
        response: { 200: ModelList, ...errorResponses('no_available_workers') },
      },
    },
    async () => {
      const first = new Map<string, Worker>();
      const models = registry.models();
      for (const w of registry.all()) {
        if (!models.has(w.modelId)) continue;
        const seen = first.get(w.modelId);
        if (!seen || w.registeredAt < seen.registeredAt) first.set(w.modelId, w);
      }
      // SMG answers 503 "No models available"; here it is the catalogue's retryable code.
      if (first.size === 0)
        throw new GatewayError('no_available_workers', 'no models available: no registered worker serves a known model yet', { retryable: true });
      const data = [...first.values()]
        .sort((a, b) => (a.modelId < b.modelId ? -1 : a.modelId > b.modelId ? 1 : 0))
        .map((w) => ({ id: w.modelId, object: 'model' as const, created: Math.floor(w.registeredAt / 1000), owned_by: OWNED_BY }));
      return { object: 'list' as const, data };
    },
  );
};
