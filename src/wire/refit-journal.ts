// A refit's journal: the `refits` bucket's value, keyed by refit id. The request and targets,
// before each phase's calls go out the phase, step and engines it calls, each engine's record as
// answers arrive, and at the end the report. Written only by the replica running the refit, by
// compare-and-set; kept 24 hours. Shapes only: src/refit/claim.ts creates it, src/refit/journal.ts
// writes and reads it back, src/refit/journals.ts follows it for every replica.

import type { EngineRefitRecord, Phase, RefitAbortReason } from './refit-phase.ts';
import type { RefitReport, WaveSummary } from './refit-report.ts';
import type { RefitRequest } from './refit-request.ts';

/** One finished wave of a rolling refit, as its parent's journal keeps it (the report adds its index). */
export type WaveRecord = Omit<WaveSummary, 'index'>;

/** A rolling refit's progress: the waves, fixed when it starts, and where it stands. */
export interface RolloutJournal {
  waves: string[][];
  /** The wave running now (0-based), or `waves.length` once none is left. */
  wave: number;
  /** Engines no new request is routed to (the wave being drained and refit); empty between waves. */
  draining: string[];
  /** Since when the current wave drains (ISO time): a runner that takes over drains no longer than the rest. */
  drain_started_at: string | null;
  done: WaveRecord[];
  /** Why no further wave started, if the waves stopped early. */
  stopped: string | null;
}

export interface RefitJournal {
  id: string;
  status: 'running' | 'done';
  /** The replica running it now. */
  holder: string;
  origin: string;
  submitted_at: string;
  request: RefitRequest;
  selector: string | null;
  targets: string[];
  asleep: string[];
  keep_paused: string[];
  /** The phase (and refit step) whose calls were sent last, and the engines that had not answered. */
  phase: Phase | null;
  step_index: number;
  pending: string[];
  engines: Record<string, EngineRefitRecord>;
  paused: string[];
  resumed: string[];
  abort_reason?: RefitAbortReason;
  /** Takeovers so far, each naming the replica that lost the refit. */
  takeovers: Array<{ from: string; to: string; at: string; phase: Phase | null; step_index: number }>;
  report?: RefitReport;
  /** A rolling refit: its waves (the parent's journal). */
  rollout?: RolloutJournal;
  /** A wave of a rolling refit: the parent refit's id. */
  parent?: string;
}
