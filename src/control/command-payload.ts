// What `rl.replica.<id>.cmd` accepts: the subject is open to anyone on the bus, so a payload that
// is not the shape this gateway sends is refused with a request error naming what is wrong (not
// an internal error, and nothing half-run). Each call is checked as `rl.engine.<id>.cmd` checks
// it (engines/control-call.ts).

import { GatewayError } from '../api/errors.ts';
import { controlCallOf } from '../engines/control-call.ts';
import type { ReplicaCommand } from '../wire/replica-share.ts';

/** The share of a fan-out on `rl.replica.<id>.cmd`. */
export function replicaCommandOf(data: unknown): ReplicaCommand {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw refuse('rl.replica.<id>.cmd payload must be a JSON object');
  const v = data as Record<string, unknown>;
  if (typeof v.requestId !== 'string') throw refuse('`requestId` must be a string');
  if (!Array.isArray(v.calls)) throw refuse('`calls` must be an array');
  const calls = v.calls.map((c, i) => controlCallOf(c, `\`calls[${i}]\``));
  if (!Array.isArray(v.legs)) throw refuse('`legs` must be an array');
  const legs = v.legs.map((l, i) => {
    const leg = l as { workerId?: unknown; call?: unknown } | null;
    if (typeof leg?.workerId !== 'string' || !Number.isInteger(leg.call) || (leg.call as number) < 0 || (leg.call as number) >= calls.length) {
      throw refuse(`\`legs[${i}]\` must be {workerId: string, call: an index of calls}`);
    }
    return { workerId: leg.workerId, call: leg.call as number };
  });
  if (!Number.isInteger(v.concurrency) || (v.concurrency as number) < 1) throw refuse('`concurrency` must be a whole number ≥ 1');
  return { requestId: v.requestId, calls, legs, concurrency: v.concurrency as number };
}

function refuse(message: string): GatewayError {
  return new GatewayError('invalid_request', message);
}
