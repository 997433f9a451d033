// SMG's `random`: a uniformly random candidate.

import type { Candidate, Decision, PolicyRequest, RandomSource, RoutingPolicy } from './policy.ts';

export class RandomPolicy implements RoutingPolicy {
  readonly name = 'random';
  readonly needsPrompt = false;

  constructor(private readonly random: RandomSource) {}

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    return { worker: randomOf(req.candidates, this.random), reason: 'random' };
  }
}

/** A uniformly random element of a non-empty list. */
export function randomOf<T>(items: readonly T[], random: RandomSource): T {
  return items[Math.min(items.length - 1, Math.floor(random() * items.length))]!;
}
