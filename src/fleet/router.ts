// Data-plane worker selection: which engine serves the next request. The router finds the
// eligible engines and hands them to the configured routing policy (policies/, `--policy`), which
// picks one and says why; by default least in flight (ties round robin), or, with a routing key,
// the rendezvous-hash winner. With RL off only `serving`, breaker-not-open, control-active engines
// are eligible. With RL on the version pre-filter runs over the candidates (online
// engines whose breaker is not open) and counts its drops. Never reads HTTP headers: the caller
// hands policy, key and prompt in. What it reads of the fleet (each worker's engine view, each
// model's fleet maximum) is kept in a table rebuilt only when the registry or an engine actor
// changed, not per request; a rebuild that shows an engine's cache emptied (new weights, a
// restart, sleep) tells the policy. Every decision and every answered request's counts also go
// to this replica's routing usage (routing-usage.ts), the figures the /v1/rl rows show.

import type { EngineHost } from './engine-host.ts';
import type { EngineView, FleetView } from './fleet-view.ts';
import { LeastInflightPolicy } from './policies/least-inflight.ts';
import type { Decision, LoadReport, Reason, RequestOutcome, RoutingInputs, RoutingPolicy } from './policies/policy.ts';
import { groupKey, type VersionPins } from './version-pins.ts';
import type { Registry } from './registry.ts';
import { RoutingUsage, routingSource, type RoutingFigures } from './routing-usage.ts';
import { admit, type DropReason, type VersionPolicy } from './version-policy.ts';
import type { Worker } from './worker.ts';

export { rendezvous } from './policies/rendezvous.ts';

/** Where the pre-filter reports (obs/metrics.ts implements it). */
export interface RoutingCounts {
  candidateFiltered(reason: DropReason): void;
  unroutable(): void;
}

/** Where each decision is counted, by worker URL and reason (obs/metrics.ts implements it). */
export interface DecisionCounts {
  routingDecision(workerUrl: string, reason: Reason): void;
}

/** Where an answered request's token counts are counted, by worker URL (obs/metrics.ts implements it). */
export interface AnswerCounts {
  answerTokens(workerUrl: string, counts: Pick<RequestOutcome, 'promptTokens' | 'cachedTokens' | 'completionTokens'>): void;
}

export interface PickOptions extends RoutingInputs {
  modes?: ReadonlySet<string>;
  exclude?: ReadonlySet<string>;
  /** Only workers serving this model (the request's resolved model). */
  modelId?: string;
  /** RL on: this request's version policy. Absent (RL off): no pre-filter is installed. */
  policy?: VersionPolicy;
  counts?: RoutingCounts;
  /**
   * Session affinity (slime's `X-SMG-Routing-Key`): under the default policy the same key goes to
   * the same eligible engine, whatever its load; removing an engine moves only the keys it held.
   * Other policies read it as SMG's do.
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
  private table: RoutingTable | null = null;
  private readonly policy: RoutingPolicy;
  private readonly inFlight: (id: string) => number;
  /** What routing did on this replica, per worker: decisions and answered token counts. */
  readonly usage: RoutingUsage;

  constructor(
    private readonly deps: {
      registry: Registry;
      view: FleetView;
      host: EngineHost;
      /** The data plane's policy (the gateway passes `--policy`'s); least in flight when absent. */
      policy?: RoutingPolicy;
      /** This replica's routing figures (shared with the view that shows them); a fresh one when absent. */
      usage?: RoutingUsage;
      decisions?: DecisionCounts;
      answers?: AnswerCounts;
      /** The engines' own load reports, once a wire gives them. */
      reports?: (id: string) => LoadReport | undefined;
      /** Engines a rolling refit drains (refit/journals.ts): no new request goes there while another can take it. */
      draining?: { any(): boolean; has(id: string): boolean };
      /** One version per GRPO group while engines of several versions serve (RL on; version-pins.ts). */
      pins?: VersionPins;
      /**
       * Whether groups are held to one version now: while a rolling refit runs. Otherwise a fleet
       * of mixed versions is routed as SMG routes it (the version policy alone decides).
       */
      pinning?: () => boolean;
      /** A group that had to be served by a second version (no engine of its own was eligible). */
      groupSplit?: () => void;
    },
  ) {
    const policy: RoutingPolicy = deps.policy ?? new LeastInflightPolicy();
    this.policy = policy;
    this.inFlight = (id) => deps.host.load(id);
    this.usage = deps.usage ?? new RoutingUsage();
    deps.registry.on('removed', (w: Worker) => {
      policy.workerRemoved?.(w.id);
      this.usage.forget(w.id);
    });
  }

  /** The policy's name (`--policy`). */
  get policyName(): string {
    return this.policy.name;
  }

  /**
   * Whether routing reads the prompt now: callers extract it only then. The policy may; and while
   * a rolling refit runs, a GRPO group is known by its prompt (version-pins.ts), whatever the policy.
   */
  get needsPrompt(): boolean {
    return this.policy.needsPrompt || (this.deps.pins !== undefined && (this.deps.pinning?.() ?? true));
  }

  /** The policy's queued work on a worker, in tokens; undefined when the policy keeps no such count. */
  queuedTokens(workerId: string): number | undefined {
    return this.policy.queuedTokens?.(workerId);
  }

  /** The `routing` object of one engine's row, summed over its workers (its DP ranks). */
  figures(workerIds: readonly string[]): RoutingFigures {
    return routingSource(this.usage, this.policy).figures(workerIds);
  }

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
    if (t && this.policy.cacheFlushed) this.noticeFlushes(t, fresh);
    this.table = fresh;
    return fresh;
  }

  /** The newest version any engine of the model holds now (cached with the routing table). */
  fleetMaxOf(modelId: string): string | undefined {
    return this.fleetMax(this.current(), modelId);
  }

  private fleetMax(t: RoutingTable, modelId: string): string | undefined {
    if (!t.maxByModel.has(modelId)) t.maxByModel.set(modelId, this.deps.view.fleetMax(modelId));
    return t.maxByModel.get(modelId);
  }

  /**
   * Eligible engines right now, in registry order. Engines a rolling refit drains are left out
   * while any other engine is eligible: a drain never makes the fleet refuse a request.
   */
  eligible(opts: PickOptions = {}): Worker[] {
    const out = this.eligibleAll(opts);
    const draining = this.deps.draining;
    // Outside a rolling refit nothing drains: no lookup per candidate.
    if (!draining?.any() || out.length === 0) return out;
    const serving = out.filter((w) => !draining.has(w.id));
    return serving.length > 0 ? serving : out;
  }

  private eligibleAll(opts: PickOptions): Worker[] {
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
   * placeholder of untagged workers, whatever their state.
   */
  models(): ReadonlySet<string> {
    return this.deps.registry.models();
  }

  /** One of `candidates` (by default the eligible engines for `opts`, read once per request by a caller that needs them too). */
  pick(opts: PickOptions = {}, candidates: Worker[] = this.eligible(opts)): Worker | undefined {
    return this.decide(opts, candidates)?.worker;
  }

  /**
   * The policy's pick among `candidates` and why, counted by worker and reason; the request is
   * taken as sent to it (the policy's `routed`). Undefined when there is no candidate, or when the
   * policy finds none fits (a target worker that is not eligible).
   */
  decide(opts: PickOptions = {}, all: Worker[] = this.eligible(opts)): Decision<Worker> | undefined {
    if (all.length === 0) return undefined;
    const { policy } = this;
    // With RL on and a rolling refit running, a GRPO group's siblings go to engines of the version
    // its first sample got; otherwise the prompt is not hashed, nor a pin kept.
    const { pins, view } = this.deps;
    const group = pins && opts.policy && (this.deps.pinning?.() ?? true) ? groupKey(opts) : undefined;
    const candidates =
      group !== undefined
        ? pins!.narrow(
            group,
            all,
            (w) => view.engine(w).version,
            () => this.deps.groupSplit?.(),
          )
        : all;
    const d = policy.pick({
      candidates,
      modelId: opts.modelId,
      inFlight: this.inFlight,
      report: this.deps.reports,
      text: opts.text,
      tokens: opts.tokens,
      routingKey: opts.routingKey,
      targetWorker: opts.targetWorker,
      implicitKey: opts.implicitKey,
    });
    if (!d) return undefined;
    if (group !== undefined) {
      const v = view.engine(d.worker).version;
      if (v !== undefined) pins!.served(group, v);
    }
    policy.routed?.(d.worker.id, opts);
    this.deps.decisions?.routingDecision(d.worker.url, d.reason);
    this.usage.decided(d.worker.id, d.reason);
    return d;
  }

  /** A request `decide` sent to `workerId` ended; `inputs` are the ones it was routed with. */
  finished(workerId: string, inputs: RoutingInputs, outcome?: RequestOutcome): void {
    this.policy.finished?.(workerId, inputs, outcome);
    if (!outcome?.answered) return;
    // A worker removed while its answer streamed has no figures or series left to add to.
    const w = this.deps.registry.get(workerId);
    if (!w) return;
    this.usage.finished(workerId, outcome);
    this.deps.answers?.answerTokens(w.url, outcome);
  }

  /** Tells the policy of every engine whose cache the change from `prev` to `next` emptied. */
  private noticeFlushes(prev: RoutingTable, next: RoutingTable): void {
    const before = new Map(prev.entries.map(({ w, e }) => [w.id, e]));
    for (const { w, e } of next.entries) {
      const was = before.get(w.id);
      if (was && cacheEmptied(was, e)) this.policy.cacheFlushed!(w.id);
    }
  }
}

/**
 * New weights flush SGLang's prefix cache; so do a restart (the engine back through
 * `unreachable` or `registering`) and sleep (memory released). Seen at the next rebuild.
 */
export function cacheEmptied(was: EngineView, now: EngineView): boolean {
  if (was.version !== now.version) return true;
  if (now.state !== was.state && (now.state === 'unreachable' || now.state === 'registering')) return true;
  return now.control === 'asleep' && was.control !== 'asleep';
}
