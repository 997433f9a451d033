// Data-plane worker selection: which engine serves the next request. Among the eligible ones the
// least in-flight wins (ties round-robin), or, with a routing key, the rendezvous-hash winner.
// With RL off only `serving`, breaker-not-open, control-active engines are eligible. With RL on
// the version pre-filter of spec §13.3 runs over the candidates (online engines whose breaker is
// not open) and counts its drops. Never reads HTTP headers: the caller hands policy and key in.
// What it reads of the fleet (each worker's engine view, each model's fleet maximum) is kept in a
// table rebuilt only when the registry or an engine actor changed, not per request.

import type { EngineHost } from './engine-host.ts';
import type { EngineView, FleetView } from './fleet-view.ts';
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
  /**
   * Session affinity (slime's `X-SMG-Routing-Key`): the same key goes to the same eligible
   * engine, whatever its load; removing an engine moves only the keys it held.
   */
  routingKey?: string;
}

// Lifecycle states of an engine that is up: the candidates the pre-filter judges. Paused and
// asleep engines are candidates so that their drop is counted; refitting ones are not (a refit
// in progress is the gateway's own doing, not a routing decision).
const CANDIDATE_STATES = new Set(['serving', 'paused', 'asleep']);

/** The model id untagged workers are registered under; never a real model. */

/** The fleet as routing sees it, valid while the registry's and the host's generations hold. */
interface RoutingTable {
  registryGeneration: number;
  hostGeneration: number;
  /** Registry order, with each worker's engine view as of the last change. */
  entries: Array<{ w: Worker; e: EngineView }>;
  /** Fleet maximum per model, computed on first ask. */
  maxByModel: Map<string, string | undefined>;
}

export class Router {
  private cursor = 0;
  private table: RoutingTable | null = null;

  constructor(private readonly deps: { registry: Registry; view: FleetView; host: EngineHost }) {}

  /**
   * The table for this moment. Every actor transition bumps the host's generation and every
   * registry change the registry's, synchronously, so a table is never read after a change it
   * does not reflect. Loads are not in it: pick() reads them live.
   */
  private current(): RoutingTable {
    const { registry, host, view } = this.deps;
    const t = this.table;
    if (t && t.registryGeneration === registry.generation && t.hostGeneration === host.generation) return t;
    const fresh: RoutingTable = {
      registryGeneration: registry.generation,
      hostGeneration: host.generation,
      entries: registry.all().map((w) => ({ w, e: view.engine(w) })),
      maxByModel: new Map(),
    };
    this.table = fresh;
    return fresh;
  }

  private fleetMax(t: RoutingTable, modelId: string): string | undefined {
    if (!t.maxByModel.has(modelId)) t.maxByModel.set(modelId, this.deps.view.fleetMax(modelId));
    return t.maxByModel.get(modelId);
  }

  /** Eligible engines right now, in registry order. */
  eligible(opts: PickOptions = {}): Worker[] {
    const out: Worker[] = [];
    const { policy, counts } = opts;
    const t = this.current();
    let candidates = 0;
    for (const { w, e } of t.entries) {
      if (opts.modes && !opts.modes.has(w.connectionMode)) continue;
      if (opts.exclude?.has(w.id)) continue;
      if (opts.modelId !== undefined && w.modelId !== opts.modelId) continue;
      if (e.breaker === 'open') continue;
      // A quarantined engine may hold partial or stale weights: no policy admits it.
      if (e.quarantine !== null) continue;
      if (!policy) {
        if (e.state === 'serving' && e.control === 'active') out.push(w);
        continue;
      }
      if (!CANDIDATE_STATES.has(e.state)) continue;
      candidates++;
      let reason: DropReason | null;
      if (e.control !== 'active') reason = e.control;
      else if (policy.kind === 'any') reason = null;
      else reason = admit(policy, e, this.fleetMax(t, w.modelId));
      if (reason !== null) {
        counts?.candidateFiltered(reason);
        continue;
      }
      if (e.state === 'serving') out.push(w);
    }
    if (policy && out.length === 0 && candidates > 0) counts?.unroutable();
    return out;
  }

  /**
   * The real models the registry serves: every worker's model id except the `unknown`
   * placeholder of untagged workers (slime §8.2), whatever their state.
   */
  models(): ReadonlySet<string> {
    return this.deps.registry.models();
  }

  /** One of `candidates` (by default the eligible engines for `opts`, read once per request by a caller that needs them too). */
  pick(opts: PickOptions = {}, candidates: Worker[] = this.eligible(opts)): Worker | undefined {
    const n = candidates.length;
    if (n === 0) return undefined;
    if (opts.routingKey !== undefined) return rendezvous(opts.routingKey, candidates);
    // One pass from a rotating start: the first engine with the fewest requests in flight wins,
    // so equal loads (an idle fleet) still spread round-robin. No sort on the hot path.
    this.cursor = (this.cursor + 1) % 1_000_000_007;
    const start = this.cursor % n;
    const { host } = this.deps;
    let best = candidates[start]!;
    let bestLoad = host.load(best.id);
    for (let i = 1; i < n && bestLoad > 0; i++) {
      const w = candidates[(start + i) % n]!;
      const load = host.load(w.id);
      if (load < bestLoad) {
        best = w;
        bestLoad = load;
      }
    }
    return best;
  }
}

/**
 * Rendezvous (highest-random-weight) hashing: each engine scores hash(key, engine id) and the
 * highest wins. Removing an engine moves only the keys it won; adding one takes keys only onto
 * itself. The key's hash state is computed once, then continued per engine.
 */
export function rendezvous<T extends { id: string }>(key: string, candidates: readonly T[]): T | undefined {
  // A separator byte after the key keeps ("ab","c") and ("a","bc") apart.
  const seed = Math.imul(fnv1a(key, FNV_OFFSET) ^ 0xff, FNV_PRIME) >>> 0;
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

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** 32-bit FNV-1a over UTF-16 code units, continuing from `h`. */
function fnv1a(s: string, h: number): number {
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, FNV_PRIME);
  }
  return h >>> 0;
}

/** MurmurHash3's finaliser: FNV alone avalanches poorly on the last characters (ids ending in 0-9). */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
