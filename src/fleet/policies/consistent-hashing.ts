// SMG's `consistent_hashing`, first match wins: `X-SMG-Target-Worker` routes to that worker (none
// when it is not a candidate); `X-SMG-Routing-Key` to the key's engine on the hash ring (about 1/N
// of the keys move when one of N engines comes or goes); else a stable header of the caller
// (authorization, x-forwarded-for, cookie: SMG's implicit session key) on the same ring; else a
// random candidate.

import { RingCache } from './hash-ring.ts';
import type { Candidate, Decision, PolicyRequest, RandomSource, RoutingPolicy } from './policy.ts';
import { randomOf } from './random.ts';
import { targetOf } from './target-worker.ts';

export class ConsistentHashingPolicy implements RoutingPolicy {
  readonly name = 'consistent_hashing';
  readonly needsPrompt = false;
  private readonly rings = new RingCache();

  constructor(private readonly random: RandomSource) {}

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> | undefined {
    const { candidates } = req;
    if (req.targetWorker !== undefined) {
      const worker = targetOf(req.targetWorker, candidates);
      return worker ? { worker, reason: 'target_worker' } : undefined;
    }
    if (req.routingKey !== undefined) return { worker: this.rings.lookup(candidates, req.routingKey), reason: 'routing_key' };
    if (req.implicitKey !== undefined) return { worker: this.rings.lookup(candidates, req.implicitKey), reason: 'implicit_key' };
    return { worker: randomOf(candidates, this.random), reason: 'random' };
  }
}
