// Rendezvous (highest-random-weight) hashing, the default policy's key mode: each engine scores
// hash(key, engine id) and the highest wins. Removing an engine moves only the keys it won; adding
// one takes keys only onto itself. No state: the answer depends on the key and the candidates'
// ids, never on their order.

import { fmix32, fnv1a, keySeed } from './key-hash.ts';

/** The key's engine among `candidates`; undefined when there is none. */
export function rendezvous<T extends { id: string }>(key: string, candidates: readonly T[]): T | undefined {
  // The key's hash state is computed once, then continued per engine.
  const seed = keySeed(key);
  let best: T | undefined;
  let bestScore = -1;
  for (const w of candidates) {
    const score = fmix32(fnv1a(w.id, seed));
    // Ties (astronomically rare) go to the smaller id, so the answer never depends on order.
    if (score > bestScore || (score === bestScore && best !== undefined && w.id < best.id)) {
      best = w;
      bestScore = score;
    }
  }
  return best;
}
