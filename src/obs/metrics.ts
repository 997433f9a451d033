// Prometheus series (prom-client), one registry per gateway. Every name is `<prefix>_<stem>`
// (`--metrics-prefix`, default `rlgate`), and every stem SMG also exports is SMG's own, so
// `--metrics-prefix smg` gives SMG's names and SMG's dashboards read this gateway unchanged
// (docs/operations.md#metrics has the mapping). RL series (`<prefix>_rl_…`) exist only
// when RL is on and appear when first recorded. Label values stay bounded: `op` is mapped by
// engines/engine-path.ts, workers are registry URLs, models are registry model ids, routing
// reasons are the policies' fixed set.

import type { ServerResponse } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { DEFAULT_METRICS_PREFIX, METRICS_PREFIX_PATTERN } from './metrics-prefix.ts';
import { RequestTiming, type DataPlaneSeries } from './request-timing.ts';
import type { ControlOutcome } from '../wire/control-call.ts';

const CONTROL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
// Data-plane histograms carry a worker label, so their series grow with the fleet: few buckets.
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
// Up to 30 s: a stream held by a refit's pause shows as one long gap.
const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** SMG's circuit-breaker codes (`smg_worker_cb_state`). */
const BREAKER_CODE = { closed: 0, open: 1, half_open: 2 } as const;

/** One worker as the per-worker gauges show it, read at scrape time. */
export interface WorkerSample {
  url: string;
  /** Data-plane requests this replica has in flight to it. */
  inflight: number;
  breaker: keyof typeof BREAKER_CODE;
  /** The routing policy's queued work on it, in tokens; undefined when the policy keeps none. */
  queuedTokens?: number;
  /** Blocks of its KV cache known from its KV events; undefined without a stream. */
  kvBlocks?: number;
}

/** The token counts of one answer, as the relay read them (each may be unknown). */
export interface AnswerTokens {
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
}

type Lazy<T> = () => T;
function lazy<T>(make: () => T): Lazy<T> {
  let v: T | undefined;
  return () => (v ??= make());
}

export class Metrics {
  readonly registry = new Registry();
  readonly prefix: string;
  private readonly rl: boolean;

  private readonly controlCalls: Lazy<Counter<'op' | 'result'>>;
  private readonly controlDuration: Lazy<Histogram<'op'>>;
  private readonly fanouts: Lazy<Counter<'result'>>;
  private readonly fanoutDuration: Lazy<Histogram>;
  private readonly weightVersion: Lazy<Gauge<'worker'>>;
  private readonly controlState: Lazy<Gauge<'worker'>>;
  private readonly quarantined: Lazy<Gauge<'worker'>>;
  private readonly refits: Lazy<Counter<'result'>>;
  private readonly refitPhase: Lazy<Histogram<'phase'>>;
  private readonly refitsInFlight: Gauge | undefined;
  private readonly filtered: Lazy<Counter<'reason'>>;
  private readonly unroutables: Lazy<Counter>;
  private readonly mixed: Lazy<Counter>;
  private readonly staleInFlight: Lazy<Counter<'action'>>;
  private readonly groupSplits: Lazy<Counter>;
  private readonly downtime: Lazy<Counter>;
  private readonly versionLag: Lazy<Histogram>;
  private readonly inflightChanges: Lazy<Counter>;
  private readonly requests: Counter<'route' | 'status_class'>;
  private readonly decisions: Counter<'worker' | 'reason'>;
  /** The reasons counted per worker, so a removed worker's series can go. */
  private readonly decisionReasons = new Map<string, Set<string>>();
  private readonly promptTokens: Counter<'worker'>;
  private readonly cachedTokens: Counter<'worker'>;
  private readonly completionTokens: Counter<'worker'>;
  private readonly engineStates: Gauge<'worker' | 'state'>;
  private readonly dataPlane: DataPlaneSeries;
  /** Read on every scrape by the per-worker gauges (gateway.ts sets it). */
  private workers: () => Iterable<WorkerSample> = () => [];

  constructor(opts: { rlEnabled: boolean; processMetrics?: boolean; prefix?: string }) {
    const prefix = opts.prefix ?? DEFAULT_METRICS_PREFIX;
    if (!METRICS_PREFIX_PATTERN.test(prefix)) throw new Error(`metrics prefix \`${prefix}\` must match ${METRICS_PREFIX_PATTERN.source}`);
    this.prefix = prefix;
    this.rl = opts.rlEnabled;
    const name = (stem: string) => `${prefix}_${stem}`;
    const rl = (stem: string) => name(`rl_${stem}`);
    const registers = [this.registry];
    if (opts.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: `${prefix}_` });
    this.controlCalls = lazy(
      () =>
        new Counter({
          name: rl('control_calls_total'),
          help: 'Proxied engine control calls by op and result',
          labelNames: ['op', 'result'] as const,
          registers,
        }),
    );
    this.controlDuration = lazy(
      () =>
        new Histogram({
          name: rl('control_call_duration_seconds'),
          help: 'Latency of one proxied control call',
          labelNames: ['op'] as const,
          buckets: CONTROL_BUCKETS,
          registers,
        }),
    );
    this.fanouts = lazy(() => new Counter({ name: rl('fanout_total'), help: 'Fan-out requests by result', labelNames: ['result'] as const, registers }));
    this.fanoutDuration = lazy(
      () => new Histogram({ name: rl('fanout_duration_seconds'), help: 'Wall time of one fan-out', buckets: CONTROL_BUCKETS, registers }),
    );
    this.weightVersion = lazy(
      () =>
        new Gauge({
          name: rl('worker_weight_version'),
          help: 'Numeric weight version the gateway believes each engine holds',
          labelNames: ['worker'] as const,
          registers,
        }),
    );
    this.controlState = lazy(
      () =>
        new Gauge({ name: rl('worker_control_state'), help: 'Engine control state: 0 active, 1 paused, 2 asleep', labelNames: ['worker'] as const, registers }),
    );
    this.quarantined = lazy(
      () =>
        new Gauge({
          name: rl('worker_quarantined'),
          help: 'Engine held out of routing until a refit brings it to the fleet version (1), or not (0)',
          labelNames: ['worker'] as const,
          registers,
        }),
    );
    this.refits = lazy(() => new Counter({ name: rl('refits_total'), help: 'Refit transactions by result', labelNames: ['result'] as const, registers }));
    this.refitPhase = lazy(
      () =>
        new Histogram({
          name: rl('refit_phase_duration_seconds'),
          help: 'Wall time of each refit phase',
          labelNames: ['phase'] as const,
          buckets: CONTROL_BUCKETS,
          registers,
        }),
    );
    // Read 0 from the start (RL on): "no refit running" is a value an alert can test.
    this.refitsInFlight = this.rl ? new Gauge({ name: rl('refits_in_flight'), help: 'Refits this replica is running now', registers }) : undefined;
    this.filtered = lazy(
      () =>
        new Counter({
          name: rl('candidates_filtered_total'),
          help: 'Routing candidates dropped by the version pre-filter, by reason',
          labelNames: ['reason'] as const,
          registers,
        }),
    );
    this.unroutables = lazy(() => new Counter({ name: rl('requests_unroutable_total'), help: 'Selections whose eligible set became empty', registers }));
    this.mixed = lazy(() => new Counter({ name: rl('mixed_version_total'), help: 'Buffered /generate responses flagged mixed-version', registers }));
    this.versionLag = lazy(
      () =>
        new Histogram({
          name: rl('rollout_version_lag'),
          help: 'Versions a finished /generate was behind the fleet: the fleet maximum when it ended minus the version it was admitted on (numeric versions)',
          buckets: [0, 1, 2, 3, 4, 8, 16],
          registers,
        }),
    );
    this.downtime = lazy(
      () =>
        new Counter({
          name: rl('refit_downtime_engine_seconds_total'),
          help: 'Engine-seconds refits held engines from serving: each engine from its pause sent to its resume answered',
          registers,
        }),
    );
    this.groupSplits = lazy(
      () =>
        new Counter({
          name: rl('group_version_splits_total'),
          help: 'Requests of a GRPO group (same prompt or routing key) served by another version than its first sample, no engine of that version being eligible',
          registers,
        }),
    );
    this.staleInFlight = lazy(
      () =>
        new Counter({
          name: rl('stale_requests_total'),
          help: 'Requests in flight under max-staleness whose fleet moved past their bound, by what was done (aborted, marked)',
          labelNames: ['action'] as const,
          registers,
        }),
    );
    this.inflightChanges = lazy(
      () =>
        new Counter({
          name: rl('version_change_with_inflight_total'),
          help: 'Engine weight-version changes while the engine had data-plane requests in flight',
          registers,
        }),
    );
    this.requests = new Counter({
      name: name('requests_total'),
      help: 'Data-plane requests by route and status class',
      labelNames: ['route', 'status_class'] as const,
      registers,
    });
    this.decisions = new Counter({
      name: name('routing_decisions_total'),
      help: "Data-plane routing decisions by the chosen worker and the policy's reason",
      labelNames: ['worker', 'reason'] as const,
      registers,
    });
    // The answers' own counts (SGLang's meta_info, OpenAI's usage): cached ÷ prompt is the
    // engine's prefix hit rate, the figure a routing policy is judged by.
    this.promptTokens = new Counter({
      name: name('worker_prompt_tokens_total'),
      help: 'Prompt tokens of the answers each worker gave, as the answers counted them',
      labelNames: ['worker'] as const,
      registers,
    });
    this.cachedTokens = new Counter({
      name: name('worker_cached_tokens_total'),
      help: "Prompt tokens of the answers each worker gave that its prefix cache held (the answers' cached_tokens)",
      labelNames: ['worker'] as const,
      registers,
    });
    this.completionTokens = new Counter({
      name: name('worker_completion_tokens_total'),
      help: 'Completion tokens of the answers each worker gave',
      labelNames: ['worker'] as const,
      registers,
    });
    this.engineStates = new Gauge({
      name: name('engine_state'),
      help: '1 for the lifecycle state each engine actor is in',
      labelNames: ['worker', 'state'] as const,
      registers,
    });
    this.dataPlane = {
      duration: new Histogram({
        name: name('router_request_duration_seconds'),
        help: 'Data-plane request time, from the whole body read to the last byte sent, by route, model, answering worker and status',
        labelNames: ['route', 'model', 'worker', 'status'] as const,
        buckets: REQUEST_BUCKETS,
        registers,
      }),
      ttft: new Histogram({
        name: name('router_ttft_seconds'),
        help: 'Time to the first event of a streamed 2xx data-plane answer',
        labelNames: ['route', 'model', 'worker'] as const,
        buckets: TTFT_BUCKETS,
        registers,
      }),
      itl: new Histogram({
        name: name('router_inter_token_latency_seconds'),
        help: 'Time between consecutive events of a streamed 2xx data-plane answer',
        labelNames: ['route', 'model', 'worker'] as const,
        buckets: ITL_BUCKETS,
        registers,
      }),
      attempts: new Counter({
        name: name('worker_requests_total'),
        help: 'Data-plane attempts routed to each worker, retries included',
        labelNames: ['worker', 'model'] as const,
        registers,
      }),
    };
    const workers = () => this.workers();
    new Gauge({
      name: name('worker_requests_active'),
      help: 'Data-plane requests this replica has in flight to each worker',
      labelNames: ['worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set({ worker: w.url }, w.inflight);
      },
    });
    new Gauge({
      name: name('worker_cb_state'),
      help: 'Data-plane circuit breaker of each worker: 0 closed, 1 open, 2 half-open',
      labelNames: ['worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set({ worker: w.url }, BREAKER_CODE[w.breaker]);
      },
    });
    new Gauge({
      name: name('worker_queued_tokens'),
      help: 'Work the routing policy counts as queued on each worker (routed, not finished), in tokens; only policies that count it (bounded_affinity)',
      labelNames: ['worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) if (w.queuedTokens !== undefined) this.set({ worker: w.url }, w.queuedTokens);
      },
    });
    new Gauge({
      name: name('worker_kv_blocks'),
      help: "Blocks of each engine's KV cache known from its KV events (absent for an engine without a stream)",
      labelNames: ['worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) if (w.kvBlocks !== undefined) this.set({ worker: w.url }, w.kvBlocks);
      },
    });
  }

  /** Where the per-worker gauges read the fleet at scrape time (in flight, breaker, queued tokens, KV blocks). */
  collectWorkers(source: () => Iterable<WorkerSample>): void {
    this.workers = source;
  }

  /** Starts timing one data-plane request; observed when `res` closes (request-timing.ts). */
  startRequest(route: string, res: ServerResponse): RequestTiming {
    return new RequestTiming(this.dataPlane, route, res);
  }

  controlCall(op: string, outcome: ControlOutcome): void {
    if (!this.rl || outcome.kind === 'no_control_endpoint') return;
    const result =
      outcome.kind === 'answer'
        ? outcome.status >= 200 && outcome.status < 300
          ? 'ok'
          : 'upstream_error'
        : outcome.kind === 'timeout'
          ? 'timeout'
          : 'unreachable';
    this.controlCalls().inc({ op, result });
    this.controlDuration().observe({ op }, outcome.latencyMs / 1000);
  }

  fanout(result: 'ok' | 'partial' | 'no_match', seconds?: number): void {
    if (!this.rl) return;
    this.fanouts().inc({ result });
    if (seconds !== undefined) this.fanoutDuration().observe(seconds);
  }

  /** A refit this replica runs began (a taken-over one too). */
  refitStarted(): void {
    this.refitsInFlight?.inc();
  }

  /** A refit `refitStarted()` counted ended, finished or handed to another replica. */
  refitEnded(): void {
    this.refitsInFlight?.dec();
  }

  /** A finished refit: its result and the wall time of each phase it ran (once per refit). */
  refit(result: string, phases: Record<string, number>, downtimeEngineMs = 0): void {
    if (!this.rl) return;
    this.refits().inc({ result });
    if (downtimeEngineMs > 0) this.downtime().inc(downtimeEngineMs / 1000);
    for (const [phase, ms] of Object.entries(phases)) this.refitPhase().observe({ phase }, ms / 1000);
  }

  /** A routing candidate dropped by the pre-filter. */
  candidateFiltered(reason: 'paused' | 'asleep' | 'stale' | 'unversioned'): void {
    if (this.rl) this.filtered().inc({ reason });
  }

  /** A selection whose eligible set became empty although it had candidates. */
  unroutable(): void {
    if (this.rl) this.unroutables().inc();
  }

  /** A buffered /generate answer flagged `x-smg-mixed-version`. */
  mixedVersion(): void {
    if (this.rl) this.mixed().inc();
  }

  /** How many versions an answered /generate was behind its model's fleet when it ended (the off-policy lag). */
  rolloutLag(versions: number): void {
    if (this.rl) this.versionLag().observe(versions);
  }

  /** A sibling of a GRPO group served by another version than its group's first sample. */
  groupVersionSplit(): void {
    if (this.rl) this.groupSplits().inc();
  }

  /** A request in flight went past its `max-staleness` bound: aborted, or let finish and marked. */
  staleRequest(action: 'aborted' | 'marked'): void {
    if (this.rl) this.staleInFlight().inc({ action });
  }

  /** An engine's version changed while it had data-plane requests in flight. */
  versionChangeWithInflight(): void {
    if (this.rl) this.inflightChanges().inc();
  }

  private readonly lastState = new Map<string, string>();

  /**
   * An engine's state, by worker URL; the RL gauges go by `engine`, the engine's base URL (the
   * worker URL without its DP rank), so an engine's ranks share one series.
   */
  engineState(url: string, engine: string, e: { state: string; control: string; weight_version: string | null; quarantine?: string | null }): void {
    const prev = this.lastState.get(url);
    if (prev !== undefined && prev !== e.state) this.engineStates.remove({ worker: url, state: prev });
    this.engineStates.set({ worker: url, state: e.state }, 1);
    this.lastState.set(url, e.state);
    if (!this.rl) return;
    this.controlState().set({ worker: engine }, e.control === 'paused' ? 1 : e.control === 'asleep' ? 2 : 0);
    this.quarantined().set({ worker: engine }, e.quarantine ? 1 : 0);
    if (e.weight_version !== null && /^\d+$/.test(e.weight_version)) this.weightVersion().set({ worker: engine }, Number(e.weight_version));
    else this.weightVersion().remove({ worker: engine });
  }

  /** One routing decision (fleet/router.ts): the worker chosen and why, retries included. */
  routingDecision(workerUrl: string, reason: string): void {
    this.decisions.inc({ worker: workerUrl, reason });
    let seen = this.decisionReasons.get(workerUrl);
    if (!seen) this.decisionReasons.set(workerUrl, (seen = new Set()));
    seen.add(reason);
  }

  /** One answered request's token counts, on the worker that answered it (fleet/router.ts). */
  answerTokens(workerUrl: string, counts: AnswerTokens): void {
    const worker = { worker: workerUrl };
    if (counts.promptTokens !== undefined) this.promptTokens.inc(worker, counts.promptTokens);
    if (counts.cachedTokens !== undefined) this.cachedTokens.inc(worker, counts.cachedTokens);
    if (counts.completionTokens !== undefined) this.completionTokens.inc(worker, counts.completionTokens);
  }

  request(route: string, status: number): void {
    this.requests.inc({ route, status_class: `${Math.floor(status / 100)}xx` });
  }

  /** A removed worker: drop its series; `goneEngine`, its base URL when no DP rank of it is left, drops the RL gauges too. */
  forget(url: string, goneEngine: string | undefined): void {
    const prev = this.lastState.get(url);
    if (prev !== undefined) this.engineStates.remove({ worker: url, state: prev });
    this.lastState.delete(url);
    for (const reason of this.decisionReasons.get(url) ?? []) this.decisions.remove({ worker: url, reason });
    this.decisionReasons.delete(url);
    for (const c of [this.promptTokens, this.cachedTokens, this.completionTokens]) c.remove({ worker: url });
    if (this.rl && goneEngine !== undefined) {
      this.weightVersion().remove({ worker: goneEngine });
      this.controlState().remove({ worker: goneEngine });
      this.quarantined().remove({ worker: goneEngine });
    }
  }
}
