// The simulated TokenSpeed engine's state in one place, shared by the gRPC servicer and the HTTP
// RL control app as in the real engine process: weight version, scheduler (pause state, in-flight
// requests), weight store and groups, memory occupation, profiling, faults, records, KV relay.
// Handlers read and write it; it never touches sockets.

import { FaultTable } from '../core/faults.ts';
import { Holds } from '../core/holds.ts';
import { MemoryGate } from '../core/memory-gate.ts';
import { Concurrency } from '../core/recorder.ts';
import type { FaultRule } from './faults.ts';
import { BLOCK_SIZE, KvRelay } from './kv-events.ts';
import type { ResolvedOptions } from './options.ts';
import { Recorder } from './recorder.ts';
import { Scheduler } from './scheduler.ts';
import { WeightStore } from './weights.ts';

/** Reported as max_total_num_tokens under the fixed cost model, which has no KV pool. */
export const MAX_TOTAL_TOKENS = 1_000_000;

export class TsEngine {
  weightVersion: string;
  /** The version at launch: what the rust profile keeps reporting in model/server facts. */
  readonly launchVersion: string;
  readonly scheduler: Scheduler;
  /** Released memory tags; admission stays shut while any is released. */
  readonly memory = new MemoryGate(() => this.scheduler.lockGate());
  readonly weights: WeightStore;
  readonly faults = new FaultTable<FaultRule>();
  readonly recorder: Recorder;
  /** null when SubscribeKvEvents answers UNIMPLEMENTED. */
  readonly kv: KvRelay | null;
  profiling: { since: string; outputDir: string | null } | null = null;
  /** Set on SIGTERM: health turns false / NOT_SERVING, new Generate calls are refused. */
  shuttingDown = false;
  /** The control app's advertised base URL (null when off or bound to a wildcard host). */
  controlUrl: string | null = null;
  controlApp: 'off' | 'running' | 'stopped' = 'off';
  /** The control app's bound port (server_args.rl_control_port), null without the app. */
  controlPort: number | null = null;
  /** The gRPC port once bound (server_args.port). */
  grpcPort = 0;
  /** Open subscription streams (SubscribeKvEvents): each entry ends its call cleanly. */
  readonly subscriptions = new Set<() => void>();
  /** Calls (gRPC and control app) held by `hang` faults and sleeping in delays. */
  readonly holds = new Holds();
  /** Control-app requests being handled now, and the most at once since the last reset. */
  readonly concurrency = new Concurrency();
  readonly startedAt = Date.now();
  /** KV tokens per DP rank (max_total_num_tokens): the realistic model's pool, else a nominal figure. */
  readonly maxTotalTokens: number;
  /** page_size in server_args: the realistic model's page, else 1. */
  readonly pageSize: number;

  constructor(readonly opts: ResolvedOptions) {
    const realistic = opts.cost.kind === 'realistic';
    this.maxTotalTokens = realistic ? opts.cost.kvCacheTokens : MAX_TOTAL_TOKENS;
    this.pageSize = realistic ? opts.cost.pageSize : 1;
    this.weightVersion = opts.weightVersion;
    this.launchVersion = opts.weightVersion;
    this.scheduler = new Scheduler({ tokenRate: opts.tokenRate, maxRunningRequests: opts.maxRunningRequests, dpSize: opts.dpSize, cost: opts.cost });
    this.weights = new WeightStore(opts.model);
    this.recorder = new Recorder(opts.recordLimit);
    this.faults.add(opts.faults);
    this.kv = opts.kvEvents.enabled
      ? new KvRelay({
          replay: opts.profile.kvReplay,
          loadIntervalMs: opts.kvLoadIntervalMs,
          // A block is a cache page when the engine models pages.
          blockSize: opts.cost.kind === 'realistic' ? opts.cost.pageSize : BLOCK_SIZE,
          load: () => this.loadFacts(),
        })
      : null;
    if (this.kv) {
      const kv = this.kv;
      this.scheduler.hooks = {
        stored: (tokens, from, rank) => kv.stored(tokens, from, rank),
        removed: (tokens, from, rank) => kv.removed(tokens, from, rank),
        flushed: () => kv.cleared(),
      };
    }
  }

  /** The value for weight_version fields 7 and 12, or undefined to leave them unset. */
  stampVersion(): string | undefined {
    const s = this.opts.stamp;
    if (s.kind === 'none') return undefined;
    return s.kind === 'fixed' ? s.value : this.weightVersion;
  }

  /** weight_version in GetModelInfo / server_args: live (python) or the launch value (rust). */
  factsVersion(): string {
    return this.opts.profile.liveModelFacts ? this.weightVersion : this.launchVersion;
  }

  get paused(): boolean {
    return this.scheduler.paused !== null;
  }

  releaseMemory(tags: readonly string[]): void {
    this.memory.release(tags);
  }

  resumeMemory(tags: readonly string[]): void {
    this.memory.resume(tags);
  }

  loadFacts(): { running: number; waiting: number; usedTokens: number; maxTotalTokens: number; maxRunning: number } {
    const ranks = this.scheduler.countsByRank();
    // With a KV pool per rank, the engine's capacity is every rank's.
    const kv = this.scheduler.kvByRank();
    return {
      running: ranks.reduce((a, r) => a + r.running, 0),
      waiting: ranks.reduce((a, r) => a + r.waiting, 0),
      usedTokens: ranks.reduce((a, r) => a + r.tokens, 0),
      maxTotalTokens: kv ? kv.reduce((a, k) => a + k.totalTokens, 0) : MAX_TOTAL_TOKENS,
      maxRunning: this.opts.maxRunningRequests,
    };
  }

  /** Everything GET /_sim/state reports. */
  state(): Record<string, unknown> {
    const o = this.opts;
    return {
      servicerImpl: o.servicerImpl,
      servicerImplSource: o.servicerImplSource,
      model: o.model,
      servedModelName: o.servedModelName,
      version: o.version,
      weightVersion: this.weightVersion,
      launchWeightVersion: this.launchVersion,
      stamp: o.stamp.kind === 'fixed' ? o.stamp.value : o.stamp.kind,
      ...this.scheduler.view(),
      memoryReleased: [...this.memory.released],
      profiling: this.profiling,
      weights: this.weights.snapshot(),
      controlApp: this.controlApp,
      controlUrl: this.controlUrl,
      updateFrom: o.rlUpdateFrom,
      kvEvents: { ...o.kvEvents, subscribers: this.kv?.subscriberCount ?? 0, lastSequence: this.kv?.lastSequence ?? null },
      rustTuning: o.rustTuning,
      shuttingDown: this.shuttingDown,
      hung: this.holds.hung.size,
      delayed: this.holds.delayed,
      controlInFlight: this.concurrency.controlInFlight,
      peakControlInFlight: this.concurrency.controlPeak,
      controlRequestsSeen: this.recorder.control.total,
      rpcsSeen: this.recorder.rpcs.total,
      faults: this.faults.list(),
      tokenRate: Number.isFinite(o.tokenRate) ? o.tokenRate : null,
      attnTpSize: o.attnTpSize,
      dpSize: o.dpSize,
      uptimeMs: Date.now() - this.startedAt,
    };
  }

  close(): void {
    this.scheduler.close();
    this.weights.close();
    this.kv?.close();
    this.holds.releaseHung();
  }
}
