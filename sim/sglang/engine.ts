// The simulated engine's state in one place: server args (weight_version, model_path), the
// scheduler, the weight store, memory occupation, faults, the request record and concurrency
// counters. Handlers read and write it; it never touches sockets.

import { FaultTable } from '../core/faults.ts';
import { Holds } from '../core/holds.ts';
import { MemoryGate } from '../core/memory-gate.ts';
import { Concurrency, RequestLog } from '../core/recorder.ts';
import type { RouteRule } from '../core/route-faults.ts';
import { ruleOf } from './faults.ts';
import type { ResolvedOptions } from './options.ts';
import { Scheduler } from './scheduler.ts';
import { WeightStore } from './weights.ts';

export class SimEngine {
  weightVersion: string;
  readonly scheduler: Scheduler;
  /** Released memory tags; admission stays shut while any is released. */
  readonly memory = new MemoryGate(() => this.scheduler.lockGate());
  readonly weights: WeightStore;
  readonly faults = new FaultTable<RouteRule>();
  readonly recorder: RequestLog;
  readonly concurrency = new Concurrency();
  /** Calls held by `hang` faults (ended only by close or POST /_sim/release-hung) and sleeping in delays. */
  readonly holds = new Holds();
  readonly startedAt = Date.now();

  constructor(readonly opts: ResolvedOptions) {
    this.weightVersion = opts.weightVersion;
    this.scheduler = new Scheduler({
      tokenRate: opts.tokenRate,
      maxRunningRequests: opts.maxRunningRequests,
      dpSize: opts.dpSize,
      cost: opts.cost,
    });
    this.weights = new WeightStore(opts.model);
    this.recorder = new RequestLog(opts.recordLimit);
    this.faults.add(opts.faults.map(ruleOf));
  }

  releaseMemory(tags: readonly string[]): void {
    this.memory.release(tags);
  }

  resumeMemory(tags: readonly string[]): void {
    this.memory.resume(tags);
  }

  /** Everything GET /_sim/state reports. */
  state(): Record<string, unknown> {
    return {
      version: this.opts.version,
      model: this.opts.model,
      servedModelName: this.opts.servedModelName,
      weightVersion: this.weightVersion,
      ...this.scheduler.view(),
      memoryReleased: [...this.memory.released],
      weights: this.weights.snapshot(),
      inFlight: this.concurrency.inFlight,
      peakInFlight: this.concurrency.peak,
      controlInFlight: this.concurrency.controlInFlight,
      peakControlInFlight: this.concurrency.controlPeak,
      hung: this.holds.hung.size,
      delayed: this.holds.delayed,
      requestsSeen: this.recorder.total,
      faults: this.faults.list(),
      tokenRate: Number.isFinite(this.opts.tokenRate) ? this.opts.tokenRate : null,
      tpSize: this.opts.tpSize,
      dpSize: this.opts.dpSize,
      ppSize: this.opts.ppSize,
      uptimeMs: Date.now() - this.startedAt,
    };
  }

  close(): void {
    this.scheduler.close();
    this.weights.close();
  }
}
