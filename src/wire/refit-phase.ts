// A refit's phases and what each engine did in them, as the coordinator actor records it and the
// refit's journal keeps it, so that a replica taking the refit over goes on from the record.
// Shapes only: actors/coordinator.ts writes the records, src/refit/journal.ts stores them.

export type Phase = 'pause' | 'refit' | 'verify' | 'resume';

/** One engine in one refit. */
export interface EngineRefitRecord {
  /** Phase where the engine failed, if it did. */
  failedIn?: Phase;
  step?: string;
  error?: string;
  status?: number;
  message?: string;
  /** Milliseconds spent per phase (refit sums its steps). */
  phases: Partial<Record<Phase, number>>;
}

/** Why a refit stopped short of its refit phase. */
export type RefitAbortReason = 'quorum_not_met' | 'no_target_paused' | 'gateway_failover';
