// Which model a data-plane request is for: a named model must be served by some
// worker; an unnamed one (or the `unknown` placeholder itself) resolves to the fleet's single
// real model. Shared by the generation routes and the tokenizer routes; it never picks a worker.

import { GatewayError } from '../api/errors.ts';
import { UNKNOWN_MODEL_ID } from '../fleet/worker.ts';
import type { Services } from './services.ts';

/**
 * The model id to route for, or 404 `model_not_found`. Workers registered as `unknown` serve no
 * real model. The name is only a routing filter: nothing about it is sent upstream (HTTP
 * bodies go up as received, token engines have no model field). An empty fleet resolves to
 * `unknown`, so that the caller answers its retryable 503.
 */
export function resolveModel(services: Pick<Services, 'router' | 'registry'>, named: unknown): string {
  const name = typeof named === 'string' ? named.trim() : '';
  const models = services.router.models();
  if (name && name !== UNKNOWN_MODEL_ID) {
    if (models.has(name)) return name;
    throw new GatewayError('model_not_found', `model \`${name}\` is not served by any registered worker`, { model: name });
  }
  if (models.size === 1) return models.values().next().value!;
  // No worker registered at all is an empty fleet, not a model question.
  if (models.size === 0 && services.registry.all().length === 0) return UNKNOWN_MODEL_ID;
  const why =
    models.size === 0
      ? 'no registered worker serves a known model yet'
      : `the fleet serves ${models.size} models (${[...models].sort().join(', ')}); name one in \`model\``;
  throw new GatewayError('model_not_found', `the request names no model and ${why}`, { model: null });
}
