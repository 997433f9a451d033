// The least loaded candidate, as several policies fall back to it: the first one, in candidate
// order, with the fewest requests in flight from this replica.

import type { Candidate } from './policy.ts';

export function leastLoaded<W extends Candidate>(candidates: readonly W[], inFlight: (id: string) => number): W {
  let best = candidates[0]!;
  let bestLoad = inFlight(best.id);
  for (let i = 1; i < candidates.length && bestLoad > 0; i++) {
    const load = inFlight(candidates[i]!.id);
    if (load < bestLoad) {
      best = candidates[i]!;
      bestLoad = load;
    }
  }
  return best;
}
