// SMG's `--routing-key-override`: a request with `X-SMG-Routing-Key` is routed by the manual
// policy's sticky map (its eviction, idle and assignment settings) whatever the configured policy,
// which goes on routing the requests without a key. Policies that already route by the key keep
// their own way: SMG's manual and consistent_hashing, and rlgate's least_inflight (rendezvous).
// The keyed requests never reach the configured policy, so its state (cache_aware's tree) does not
// record them, as in SMG.

import type { ManualPolicy } from './manual.ts';
import type { Candidate, Decision, PolicyRequest, RequestOutcome, RoutingInputs, RoutingPolicy } from './policy.ts';

/** Policies the override leaves alone: they honour the key themselves. */
const KEY_AWARE = new Set(['manual', 'consistent_hashing', 'least_inflight']);

export function withRoutingKeyOverride(policy: RoutingPolicy, sticky: ManualPolicy): RoutingPolicy {
  return KEY_AWARE.has(policy.name) ? policy : new RoutingKeyOverride(policy, sticky);
}

class RoutingKeyOverride implements RoutingPolicy {
  readonly name: string;
  readonly needsPrompt: boolean;
  /** The configured policy's count, when it keeps one: keyed requests never reach it, so it counts the rest. */
  readonly queuedTokens?: (workerId: string) => number;

  constructor(
    private readonly inner: RoutingPolicy,
    private readonly sticky: ManualPolicy,
  ) {
    this.name = inner.name;
    this.needsPrompt = inner.needsPrompt;
    if (inner.queuedTokens) this.queuedTokens = (id) => inner.queuedTokens!(id);
  }

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> | undefined {
    return req.routingKey === undefined ? this.inner.pick(req) : this.sticky.pick(req);
  }

  routed(workerId: string, inputs: RoutingInputs): void {
    if (inputs.routingKey === undefined) this.inner.routed?.(workerId, inputs);
    else this.sticky.routed(workerId, inputs);
  }

  finished(workerId: string, inputs: RoutingInputs, outcome?: RequestOutcome): void {
    if (inputs.routingKey === undefined) this.inner.finished?.(workerId, inputs, outcome);
    else this.sticky.finished(workerId, inputs);
  }

  workerRemoved(workerId: string): void {
    this.inner.workerRemoved?.(workerId);
    this.sticky.workerRemoved(workerId);
  }

  cacheFlushed(workerId: string): void {
    this.inner.cacheFlushed?.(workerId);
  }
}
