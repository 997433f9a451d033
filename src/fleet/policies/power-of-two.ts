// SMG's `power_of_two`: two distinct random candidates, the less loaded of them (the first on a
// tie). Loads are the engines' reported KV use when both report it, else the requests in flight
// from this replica, for both: one of each would not compare.

import type { Candidate, Decision, PolicyRequest, RandomSource, RoutingPolicy } from './policy.ts';

export class PowerOfTwoPolicy implements RoutingPolicy {
  readonly name = 'power_of_two';
  readonly needsPrompt = false;

  constructor(private readonly random: RandomSource) {}

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates } = req;
    const n = candidates.length;
    if (n === 1) return { worker: candidates[0]!, reason: 'power_of_two' };
    // The second from the other n-1, by an offset: always distinct, one draw each.
    const i1 = Math.min(n - 1, Math.floor(this.random() * n));
    const i2 = (i1 + 1 + Math.min(n - 2, Math.floor(this.random() * (n - 1)))) % n;
    const a = candidates[i1]!;
    const b = candidates[i2]!;
    const ka = req.report?.(a.id)?.kvUsage;
    const kb = req.report?.(b.id)?.kvUsage;
    const [la, lb] = ka !== undefined && kb !== undefined ? [ka, kb] : [req.inFlight(a.id), req.inFlight(b.id)];
    return { worker: la <= lb ? a : b, reason: 'power_of_two' };
  }
}
