// The read side of the fleet: registry facts joined with each engine actor's state and this
// replica's routing figures, shaped as the `/v1/rl` rows, the merged label view
// selectors match against, and the DP-collapsed target set of a fan-out. Reads only;
// every write goes to an actor or the registry.

import { breakerOf, lifecycleOf } from '../../actors/engine.ts';
import { capabilitiesFor, type RlCapabilities } from './capabilities.ts';
import { workerControlUrl } from './control-url.ts';
import type { WorkerSample } from '../obs/metrics.ts';
import type { EngineHost } from './engine-host.ts';
import { sizeLabel } from './labels.ts';
import type { Registry } from './registry.ts';
import { RoutingUsage, type RoutingFigures, type RoutingSource } from './routing-usage.ts';
import { matchesSelector, type Selector } from './selector.ts';
import { fleetMaximum } from './versions.ts';
import { pageAfter } from './listing-page.ts';
import { mergedLabels, UNKNOWN_MODEL_ID, type Worker } from './worker.ts';

export const RL_PROTOCOL_VERSION = 1;

export interface RlWorkerEntry {
  id: string;
  url: string;
  base_url: string;
  engine: string;
  engine_version: string | null;
  model_id: string;
  worker_type: string;
  connection_mode: string;
  control_url: string | null;
  tp_size: number | null;
  dp_size: number | null;
  pp_size: number | null;
  dp_ranks: number;
  role: string | null;
  health: string;
  weight_version: string | null;
  version_source: string | null;
  control: string;
  labels: Record<string, string>;
  capabilities: RlCapabilities;
  /** rlgate additions (clients ignore unknown fields): the actor's lifecycle and breaker. */
  state: string;
  breaker: string;
  load: number;
  /** The replica that runs this engine's actor (null until a replica holds its lease). */
  owner: string | null;
  /** Held out of routing under every version policy until a refit brings it up and verifies it. */
  quarantined: boolean;
  quarantine_reason: string | null;
  /** What this replica's routing did with the engine (its DP ranks summed). */
  routing: RoutingFigures;
}

const NO_USAGE = new RoutingUsage();
const NO_ROUTING: RoutingSource = { figures: (ids) => NO_USAGE.figures(ids), queuedTokens: () => undefined };

/** Runtime facts of one engine, from its actor (or defaults while it is not hosted here). */
export interface EngineView {
  state: string;
  control: 'active' | 'paused' | 'asleep';
  version: string | undefined;
  versionSource: string | undefined;
  breaker: 'closed' | 'open' | 'half_open';
  load: number;
  hosted: boolean;
  /** Why the engine is held out of routing, or null. */
  quarantine: string | null;
}

/** What of a row only registry writes change (cached per registry generation). */
type FixedRow = Pick<
  RlWorkerEntry,
  | 'id'
  | 'url'
  | 'base_url'
  | 'engine'
  | 'engine_version'
  | 'model_id'
  | 'worker_type'
  | 'connection_mode'
  | 'control_url'
  | 'tp_size'
  | 'dp_size'
  | 'pp_size'
  | 'dp_ranks'
  | 'role'
  | 'labels'
  | 'capabilities'
  | 'owner'
>;

const ONLINE = new Set(['serving', 'paused', 'asleep', 'refitting']);

export class FleetView {
  /** The DP-collapsed, sorted engines, valid for one registry generation. */
  private reps: { generation: number; list: Array<[Worker, number]> } | undefined;
  /** Selector views by worker id, valid while neither the registry nor any engine's state moved. */
  private views: { registry: number; host: number; byId: Map<string, Record<string, string | undefined>> } | undefined;

  constructor(
    private readonly deps: {
      registry: Registry;
      host: EngineHost;
      /** Blocks known of an engine's KV cache from its events (kv-index.ts), when they are streamed. */
      kvBlocks?: (workerId: string) => number | undefined;
      /** The rows' `routing` and the queued-token gauge: this replica's routing usage and its policy's queue. */
      routing?: RoutingSource;
    },
  ) {}

  private get routing(): RoutingSource {
    return this.deps.routing ?? NO_ROUTING;
  }

  /** Each engine's load, breaker, queued tokens and KV blocks known, for the metrics' per-engine gauges (read at scrape time). */
  samples(): WorkerSample[] {
    return this.deps.registry.all().map((w) => {
      const e = this.engine(w);
      return { url: w.url, inflight: e.load, breaker: e.breaker, queuedTokens: this.routing.queuedTokens(w.id), kvBlocks: this.deps.kvBlocks?.(w.id) };
    });
  }

  /** Each engine's load and routing figures, for a live view's periodic refresh (GET /v1/rl/events). */
  usage(): Array<Pick<RlWorkerEntry, 'id' | 'load' | 'routing'>> {
    return this.representatives().map(([w]) => ({ id: w.id, load: this.engine(w).load, routing: this.routing.figures(this.rankIds(w)) }));
  }

  engine(w: Worker): EngineView {
    const snap = this.deps.host.snapshot(w.id);
    if (!snap) {
      const r = this.deps.host.remote(w.id);
      if (r) {
        return {
          state: r.state,
          control: r.control as EngineView['control'],
          version: r.weight_version ?? undefined,
          versionSource: r.version_source ?? undefined,
          breaker: r.breaker as EngineView['breaker'],
          load: this.deps.host.load(w.id),
          hosted: false,
          quarantine: r.quarantine ?? null,
        };
      }
      const label = mergedLabels(w).weight_version;
      return { state: 'registering', control: 'active', version: label, versionSource: undefined, breaker: 'closed', load: 0, hosted: false, quarantine: null };
    }
    const c = snap.context;
    return {
      state: lifecycleOf(snap),
      control: c.control,
      version: c.version,
      versionSource: c.versionSource,
      breaker: breakerOf(snap),
      load: this.deps.host.load(w.id),
      hosted: true,
      quarantine: c.quarantine,
    };
  }

  /** One row per engine (DP ranks collapsed onto the lowest rank), sorted by base_url then url. */
  rows(): RlWorkerEntry[] {
    return this.representatives().map(([w, ranks]) => this.row(w, ranks));
  }

  /** One page of `rows()`, after `cursor` (listing-page.ts); `total` counts the whole fleet's rows. */
  rowsPage(cursor: string | undefined, limit: number): { rows: RlWorkerEntry[]; total: number; next: string | null } {
    const reps = this.representatives();
    const page = pageAfter(reps, ([w]) => [w.baseUrl, w.url], cursor, limit);
    return { rows: page.items.map(([w, ranks]) => this.row(w, ranks)), total: reps.length, next: page.next };
  }

  /** The parts of rows that only registry writes change, by worker id, for one registry generation. */
  private fixed: { generation: number; byId: Map<string, FixedRow> } | undefined;

  private fixedRow(w: Worker, dpRanks: number): FixedRow {
    const generation = this.deps.registry.generation;
    if (this.fixed?.generation !== generation) this.fixed = { generation, byId: new Map() };
    const key = `${w.id}|${dpRanks}`;
    let f = this.fixed.byId.get(key);
    if (!f) {
      const labels = mergedLabels(w);
      f = {
        id: w.id,
        url: w.url,
        base_url: w.baseUrl,
        engine: w.engine,
        engine_version: labels.version ?? null,
        model_id: w.modelId,
        worker_type: w.workerType,
        connection_mode: w.connectionMode,
        control_url: workerControlUrl(w),
        tp_size: sizeLabel(labels.tp_size),
        dp_size: sizeLabel(labels.dp_size),
        pp_size: sizeLabel(labels.pp_size),
        dp_ranks: dpRanks,
        role: labels.role ?? null,
        labels,
        capabilities: capabilitiesFor(w.engine, labels),
        owner: w.owner || null,
      };
      this.fixed.byId.set(key, f);
    }
    return f;
  }

  /** The row of exactly this registry entry; dp_ranks counts the DP ranks of its engine. */
  rowOf(id: string): RlWorkerEntry {
    const w = this.deps.registry.require(id);
    const ranks = w.dpAware ? this.deps.registry.siblings(w.baseUrl).filter((s) => s.dpAware).length : 1;
    return this.row(w, Math.max(1, ranks));
  }

  /** DP-collapsed workers whose merged label view matches; all without one. */
  targets(selector?: Selector): Worker[] {
    const reps = this.representatives().map(([w]) => w);
    if (!selector) return reps;
    // Views are cached: a fan-out does not rebuild every engine's labels (they change only
    // when the registry or an engine's published state does).
    const { registry, host } = this.deps;
    let v = this.views;
    if (!v || v.registry !== registry.generation || v.host !== host.generation) {
      v = this.views = { registry: registry.generation, host: host.generation, byId: new Map() };
    }
    const byId = v.byId;
    return reps.filter((w) => {
      let view = byId.get(w.id);
      if (!view) byId.set(w.id, (view = this.selectorView(w)));
      return matchesSelector(selector, view);
    });
  }

  /** Labels plus synthetic keys that shadow labels of the same name. */
  selectorView(w: Worker): Record<string, string | undefined> {
    const labels = mergedLabels(w);
    const e = this.engine(w);
    return {
      ...labels,
      id: w.id,
      url: w.url,
      base_url: w.baseUrl,
      engine: w.engine,
      model: w.modelId,
      worker_type: w.workerType,
      connection_mode: w.connectionMode,
      health: healthOf(e),
      weight_version: e.version,
      control: e.control,
      role: labels.role,
    };
  }

  /** Per-model maximum version among versioned engines. */
  fleetMax(modelId: string): string | undefined {
    const versions: string[] = [];
    for (const [w] of this.representatives()) {
      if (w.modelId !== modelId) continue;
      const v = this.engine(w).version;
      if (v !== undefined) versions.push(v);
    }
    return fleetMaximum(versions);
  }

  private row(w: Worker, dpRanks: number): RlWorkerEntry {
    const f = this.fixedRow(w, dpRanks);
    const e = this.engine(w);
    return {
      id: f.id,
      url: f.url,
      base_url: f.base_url,
      engine: f.engine,
      engine_version: f.engine_version,
      model_id: f.model_id,
      worker_type: f.worker_type,
      connection_mode: f.connection_mode,
      control_url: f.control_url,
      tp_size: f.tp_size,
      dp_size: f.dp_size,
      pp_size: f.pp_size,
      dp_ranks: f.dp_ranks,
      role: f.role,
      health: healthOf(e),
      weight_version: e.version ?? null,
      version_source: e.versionSource ?? null,
      control: e.control,
      labels: f.labels,
      capabilities: f.capabilities,
      state: e.state,
      breaker: e.breaker,
      load: e.load,
      owner: f.owner,
      quarantined: e.quarantine !== null,
      quarantine_reason: e.quarantine,
      routing: this.routing.figures(this.rankIds(w)),
    };
  }

  /** The workers of `w`'s engine: its DP ranks when it is DP-aware, else itself. */
  private rankIds(w: Worker): string[] {
    if (!w.dpAware) return [w.id];
    return this.deps.registry
      .siblings(w.baseUrl)
      .filter((s) => s.dpAware)
      .map((s) => s.id);
  }

  /** [representative, number of DP ranks] per engine, sorted. */
  private representatives(): Array<[Worker, number]> {
    const generation = this.deps.registry.generation;
    if (this.reps?.generation !== generation) this.reps = { generation, list: this.groupRanks() };
    return this.reps.list;
  }

  private groupRanks(): Array<[Worker, number]> {
    const groups = new Map<string, Worker[]>();
    for (const w of this.deps.registry.all()) {
      const key = w.dpAware ? `dp|${w.baseUrl}` : `url|${w.url}`;
      const g = groups.get(key);
      if (g) g.push(w);
      else groups.set(key, [w]);
    }
    const reps: Array<[Worker, number]> = [];
    for (const g of groups.values()) {
      g.sort((a, b) => (a.dpRank ?? 0) - (b.dpRank ?? 0));
      reps.push([g[0]!, g.length]);
    }
    reps.sort(([a], [b]) => cmp(a.baseUrl, b.baseUrl) || cmp(a.url, b.url));
    return reps;
  }
}

export function healthOf(e: EngineView): string {
  return ONLINE.has(e.state) ? 'ready' : 'not_ready';
}

/**
 * SMG's `stats` of the data-plane `GET /workers` listing (its ListWorkersResult): workers by
 * type. A type SMG has no count for (its EPD `encode`) is in the listing's `total` only.
 */
export interface WorkerTypeCounts {
  prefill_count: number;
  decode_count: number;
  regular_count: number;
}

export function workerTypeCounts(workers: readonly Worker[]): WorkerTypeCounts {
  const counts: WorkerTypeCounts = { prefill_count: 0, decode_count: 0, regular_count: 0 };
  for (const w of workers) {
    if (w.workerType === 'regular') counts.regular_count++;
    else if (w.workerType === 'prefill') counts.prefill_count++;
    else if (w.workerType === 'decode') counts.decode_count++;
  }
  return counts;
}

/** rlgate's own figures over the fleet: `rlgate` beside SMG's `stats` in `GET /workers`, and `/readiness`. */
export interface WorkerStats {
  total_workers: number;
  healthy_workers: number;
  /** Distinct real models served (the `unknown` placeholder of untagged workers is none). */
  total_models: number;
  /** Data-plane requests in flight, summed over the workers. */
  total_load: number;
  by_type: { regular: number; prefill: number; decode: number };
}

/** rlgate's figures of a listing: every registry worker counted, DP ranks each (as SMG's registry counts them). */
export function workerStats(workers: readonly Worker[], view: FleetView): WorkerStats {
  const stats: WorkerStats = {
    total_workers: workers.length,
    healthy_workers: 0,
    total_models: 0,
    total_load: 0,
    by_type: { regular: 0, prefill: 0, decode: 0 },
  };
  const models = new Set<string>();
  for (const w of workers) {
    const e = view.engine(w);
    if (healthOf(e) === 'ready') stats.healthy_workers++;
    stats.total_load += e.load;
    if (w.modelId !== UNKNOWN_MODEL_ID) models.add(w.modelId);
    if (w.workerType === 'regular' || w.workerType === 'prefill' || w.workerType === 'decode') stats.by_type[w.workerType]++;
  }
  stats.total_models = models.size;
  return stats;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
