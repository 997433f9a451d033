// Data-plane worker selection: which engine serves the next request, round-robin among the
// eligible ones. With RL off only `serving`, breaker-not-open, control-active engines are
// eligible. With RL on the version pre-filter of spec §13.3 runs over the candidates (online
// engines whose breaker is not open) and counts its drops. Never reads HTTP headers: the caller
// hands the request's policy in.

import type { EngineHost } from './engine-host.ts';
import type { FleetView } from './fleet-view.ts';
import type { Registry } from './registry.ts';
import { admit, type DropReason, type VersionPolicy } from './version-policy.ts';
import type { Worker } from './worker.ts';

/** Where the pre-filter reports (obs/metrics.ts implements it). */
export interface RoutingCounts {
  candidateFiltered(reason: DropReason): void;
  unroutable(): void;
}

export interface PickOptions {
  modes?: ReadonlySet<string>;
  exclude?: ReadonlySet<string>;
  /** Only workers serving this model (the request's resolved model; slime §8.2). */
  modelId?: string;
  /** RL on: this request's version policy. Absent (RL off): no pre-filter is installed. */
  policy?: VersionPolicy;
  counts?: RoutingCounts;
}

// Lifecycle states of an engine that is up: the candidates the pre-filter judges. Paused and
// asleep engines are candidates so that their drop is counted; refitting ones are not (a refit
// in progress is the gateway's own doing, not a routing decision).
const CANDIDATE_STATES = new Set(['serving', 'paused', 'asleep']);

/** The model id untagged workers are registered under; never a real model. */
export const UNKNOWN_MODEL_ID = 'unknown';

export class Router {
  private cursor = 0;

  constructor(private readonly deps: { registry: Registry; view: FleetView; host: EngineHost }) {}

  /** Eligible engines right now, in registry order. */
  eligible(opts: PickOptions = {}): Worker[] {
    const out: Worker[] = [];
    const { policy, counts } = opts;
    let candidates = 0;
    // Fleet maximum per model, computed at most once per model and selection, and never under
    // `any` (the hot path allocates nothing beyond `out`).
    let maxModel: string | undefined;
    let max: string | undefined;
    for (const w of this.deps.registry.all()) {
      if (opts.modes && !opts.modes.has(w.connectionMode)) continue;
      if (opts.exclude?.has(w.id)) continue;
      if (opts.modelId !== undefined && w.modelId !== opts.modelId) continue;
      const e = this.deps.view.engine(w);
      if (e.breaker === 'open') continue;
      if (!policy) {
        if (e.state === 'serving' && e.control === 'active') out.push(w);
        continue;
      }
      if (!CANDIDATE_STATES.has(e.state)) continue;
      candidates++;
      let reason: DropReason | null;
      if (e.control !== 'active') reason = e.control;
      else if (policy.kind === 'any') reason = null;
      else {
        // Fleet maximum of the candidate's own model (the request's, when it names or resolves one).
        if (maxModel !== w.modelId) {
          maxModel = w.modelId;
          max = this.deps.view.fleetMax(w.modelId);
        }
        reason = admit(policy, e, max);
      }
      if (reason !== null) {
        counts?.candidateFiltered(reason);
        continue;
      }
      // An active engine whose actor is between states is not routable yet, but it was judged.
      if (e.state === 'serving') out.push(w);
    }
    if (policy && out.length === 0 && candidates > 0) counts?.unroutable();
    return out;
  }

  /**
   * The real models the registry serves: every worker's model id except the `unknown`
   * placeholder of untagged workers (slime §8.2), whatever their state.
   */
  models(): Set<string> {
    const out = new Set<string>();
    for (const w of this.deps.registry.all()) if (w.modelId !== UNKNOWN_MODEL_ID) out.add(w.modelId);
    return out;
  }

  pick(opts: PickOptions = {}): Worker | undefined {
    const candidates = this.eligible(opts);
    if (candidates.length === 0) return undefined;
    this.cursor = (this.cursor + 1) % 1_000_000_007;
    return candidates[this.cursor % candidates.length];
  }
}
