// The audit record of one refit: who took part, what happened to each engine in each phase, how
// long each phase took, each engine's breaker and version afterwards, and the engines left out.
// It travels on `<root>.refit.<id>.report`, in the `report` event, in the reply to the request
// and in the journal. Shapes only: src/refit/report.ts builds it.

import type { Phase } from './refit-phase.ts';

export type SkipReason = 'unreachable' | 'not_discovered' | 'no_control_endpoint' | 'source_unsupported' | 'wave_not_run';

/** A selected engine that could not take part: left out before anything was paused. */
export interface SkippedEngine {
  worker_id: string;
  url: string;
  reason: SkipReason;
  message: string;
}

export interface EngineReport {
  worker_id: string;
  url: string;
  outcome: 'ok' | 'failed';
  /** Phase (and refit step) where the engine failed. */
  failed_phase?: Phase;
  failed_step?: string;
  error?: string;
  status?: number;
  message?: string;
  phases: { pause: number | null; refit: number | null; verify: number | null; resume: number | null };
  rank_offset?: number;
  breaker: string;
  state: string;
  weight_version: string | null;
}

export interface RefitReport {
  id: string;
  status: 'succeeded' | 'partial' | 'failed';
  weight_version: string;
  source: 'disk' | 'distributed';
  selector: string | null;
  started_at: string;
  finished_at: string;
  duration_ms: number;
  phases: Partial<Record<Phase, number>>;
  total: number;
  succeeded: number;
  quorum: number;
  aborted?: string;
  world_size?: number;
  engines: EngineReport[];
  failed: EngineReport[];
  /** Selected engines that could not take part: left out before anything was paused (or, `wave_not_run`, whose rolling wave never started). */
  skipped: SkippedEngine[];
  /** Engine-milliseconds held: each engine's pause sent to its resume answered, summed (a rolling refit: over its waves). */
  downtime_engine_ms?: number;
  /** The strategy, when not `all`. */
  strategy?: 'rolling' | 'in_flight';
  /** A rolling refit's waves, in order: each its own refit (`refit_id`), with its drain. */
  waves?: Array<WaveSummary>;
}

/** One wave of a rolling refit, in its parent's report. */
export interface WaveSummary {
  index: number;
  refit_id: string;
  engines: string[];
  status: 'succeeded' | 'partial' | 'failed';
  succeeded: number;
  drain_ms: number;
  /** Engines still running requests when the drain timed out: paused in the strategy's mode. */
  drain_timed_out: string[];
  /** Requests the wave's engines ran or queued when the drain began (they were let finish, up to the drain timeout). */
  drained_requests: number;
  duration_ms: number;
}
