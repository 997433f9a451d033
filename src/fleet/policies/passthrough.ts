// SMG's `passthrough`, for a gateway in front of one engine: the first candidate, no balancing.

import type { Candidate, Decision, PolicyRequest, RoutingPolicy } from './policy.ts';

export class PassthroughPolicy implements RoutingPolicy {
  readonly name = 'passthrough';
  readonly needsPrompt = false;

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    return { worker: req.candidates[0]!, reason: 'first_available' };
  }
}
