// Which worker types a registration may name. rlgate routes regular workers only: SMG's prefill
// and decode workers (PD disaggregation: `bootstrap_port` names a prefill worker's KV bootstrap
// server) and its encode workers (EPD) need a router that pairs two engines per request, which
// rlgate does not have yet. A registration naming one is refused with the reason, before anything
// changes, so such an engine is never taken and then routed as a regular one. Pure.

import { GatewayError } from '../api/errors.ts';

/** SMG's worker types that need disaggregated routing. */
const DISAGGREGATED = new Set(['prefill', 'decode', 'encode']);

const FIX =
  'PD disaggregated routing is not supported yet: rlgate routes regular workers only. Register engines started without disaggregation as `regular` (or omit worker_type), or route PD through SMG';

/**
 * The worker type a registration stores: `regular` (also for an absent or empty one, and any
 * letter case, as SMG's parser takes it). Throws 400 `invalid_request` naming the worker for a
 * prefill, decode or encode worker, for a `bootstrap_port`, and for a type SMG does not know.
 */
export function registeredWorkerType(url: string, workerType: string | undefined, bootstrapPort?: number | null): 'regular' {
  const type = (workerType ?? '').trim().toLowerCase();
  if (DISAGGREGATED.has(type)) {
    const port = bootstrapPort === undefined || bootstrapPort === null ? '' : `, bootstrap_port ${bootstrapPort}`;
    throw new GatewayError('invalid_request', `worker \`${url}\` is a ${type} worker (worker_type \`${workerType}\`${port}): ${FIX}`, {
      field: 'worker_type',
      url,
      worker_type: workerType,
    });
  }
  if (type !== '' && type !== 'regular') {
    throw new GatewayError('invalid_request', `worker \`${url}\`: unknown worker_type \`${workerType}\` (SMG's types are regular, prefill, decode, encode)`, {
      field: 'worker_type',
      url,
      worker_type: workerType,
    });
  }
  if (bootstrapPort !== undefined && bootstrapPort !== null) {
    throw new GatewayError('invalid_request', `worker \`${url}\` has a bootstrap_port (${bootstrapPort}), which only a PD prefill worker has: ${FIX}`, {
      field: 'bootstrap_port',
      url,
    });
  }
  return 'regular';
}
