// The simulated engine's state in one place: server args (weight_version, model_path), the
// scheduler, the weight store, memory occupation, faults, the request record and concurrency
// counters. Handlers read and write it; it never touches sockets.

import type { ServerResponse } from 'node:http';
import { FaultTable } from './faults.ts';
import type { ResolvedOptions } from './options.ts';
import { Concurrency, RequestRecorder } from './recorder.ts';
import { Scheduler } from './scheduler.ts';
import { WeightStore } from './weights.ts';
import { MemoryGate } from '../core/memory-gate.ts';

export const MEMORY_TAGS = ['weights', 'kv_cache', 'cuda_graph'] as const;

export class SimEngine {
  weightVersion: string;
  readonly scheduler: Scheduler;
  /** Released memory tags; admission stays shut while any is released. */
  readonly memory = new MemoryGate(() => this.scheduler.lockGate());
  readonly weights: WeightStore;
  readonly faults = new FaultTable();
  readonly recorder: RequestRecorder;
  readonly concurrency = new Concurrency();
  /** Memory tags currently released; any released tag holds new requests at the gate. */
  /** Responses held by a `hang` fault, ended only by close or POST /_sim/release-hung. */
  readonly hung = new Set<ServerResponse>();
  /** Requests sleeping in a `delayMs` fault right now. */
  delayed = 0;
  readonly startedAt = Date.now();

  constructor(readonly opts: ResolvedOptions) {
    this.weightVersion = opts.weightVersion;
    this.scheduler = new Scheduler({
      tokenRate: opts.tokenRate,
      maxRunningRequests: opts.maxRunningRequests,
      dpSize: opts.dpSize,
    });
    this.weights = new WeightStore(opts.model);
    this.recorder = new RequestRecorder(opts.recordLimit);
    this.faults.add(opts.faults);
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
      hung: this.hung.size,
      delayed: this.delayed,
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
