// `least_inflight`, rlgate's routing before SMG's policies (the default until bounded_affinity): the engine with the
// fewest requests in flight from this replica, ties taken in turn from a rotating start so an idle
// fleet is served round robin; with a routing key, the key's engine by rendezvous hashing, whatever
// its load. Not one of SMG's names: SMG's default, cache_aware, is there by `--policy cache_aware`.

import type { Candidate, Decision, PolicyRequest, RoutingPolicy } from './policy.ts';
import { rendezvous } from './rendezvous.ts';

export class LeastInflightPolicy implements RoutingPolicy {
  readonly name = 'least_inflight';
  readonly needsPrompt = false;
  private cursor = 0;

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates, inFlight } = req;
    if (req.routingKey !== undefined) return { worker: rendezvous(req.routingKey, candidates)!, reason: 'routing_key' };
    // One pass from a rotating start: the first engine with the fewest requests in flight wins,
    // so equal loads still spread round-robin. No sort on the hot path.
    const n = candidates.length;
    this.cursor = (this.cursor + 1) % 1_000_000_007;
    const start = this.cursor % n;
    let best = candidates[start]!;
    let bestLoad = inFlight(best.id);
    for (let i = 1; i < n && bestLoad > 0; i++) {
      const w = candidates[(start + i) % n]!;
      const load = inFlight(w.id);
      if (load < bestLoad) {
        best = w;
        bestLoad = load;
      }
    }
    return { worker: best, reason: 'min_load' };
  }
}
