// SMG's `round_robin`: the candidates in turn, by a counter that every pick advances.

import type { Candidate, Decision, PolicyRequest, RoutingPolicy } from './policy.ts';

export class RoundRobinPolicy implements RoutingPolicy {
  readonly name = 'round_robin';
  readonly needsPrompt = false;
  private counter = 0;

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const i = this.counter % req.candidates.length;
    this.counter = (this.counter + 1) % Number.MAX_SAFE_INTEGER;
    return { worker: req.candidates[i]!, reason: 'round_robin' };
  }
}
