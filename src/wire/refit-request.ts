// What a trainer asks for when it starts a refit: the body of `<root>.refit.request` (and of
// POST /v1/rl/refits), carried on in the queued refit and the journal, and the request's reply
// on the bus. Shapes only: src/refit/request.ts holds the schema that checks a request (and fails
// to compile if it says anything other than this), src/refit/service.ts answers.

import type { RefitReport, SkippedEngine } from './refit-report.ts';

/** One broadcast chunk of a distributed refit: parallel lists, one entry per tensor. */
export interface WeightChunk {
  names: string[];
  dtypes: string[];
  shapes: number[][];
  load_format?: string | null;
}

export interface DiskSource {
  kind: 'disk';
  model_path: string;
  load_format?: string;
  flush_cache?: boolean;
}

export interface DistributedSource {
  kind: 'distributed';
  master_address: string;
  master_port: number;
  world_size?: number;
  group_name?: string;
  backend?: string;
  chunks: WeightChunk[];
  flush_cache?: boolean;
  /** Keep the weight-update group after the refit (slime keeps it across refits). */
  keep_group?: boolean;
}

/**
 * How the fleet is refit (docs/refit-strategies.md). `all`, the default: every target paused,
 * loaded, verified and resumed together. `rolling`: in waves of at most `max_unavailable` engines,
 * each drained (no new requests routed to it, its running ones given `drain_timeout_ms` to end)
 * and then refit as `all` does; the next wave starts once the previous one serves again.
 * `in_flight`: running requests frozen in place while the weights load, then go on; only engines
 * whose pause modes include `in_place` or `keep`.
 */
export interface RefitStrategy {
  kind: 'all' | 'rolling' | 'in_flight';
  /** rolling: engines refit at once, a count (≥ 1) or a share of the targets (`"25%"`, at least one engine). Default 1. */
  max_unavailable?: number | string;
  /** rolling: how long a wave's running requests may take to end before it is paused anyway. Default 30000. */
  drain_timeout_ms?: number;
  /** rolling: how what still runs after the drain is paused (SGLang's `abort` or `retract`). Default `abort`. */
  pause_mode?: 'abort' | 'retract';
  /** rolling: more failed engines than this (over all waves) and no further wave starts. Default 0. */
  max_failed?: number;
  /** in_flight: `keep` the old weights' KV (default), or `flush` the prefix cache with the load (engines pausing with `keep` only: SGLang cannot flush in place). */
  cache?: 'flush' | 'keep';
}

export interface RefitRequest {
  /**
   * The refit's id, chosen by the client so that a retried request is the same refit (the queue
   * de-duplicates on it) and its report can be fetched by id from any replica. Generated if absent.
   */
  refit_id?: string;
  /** Answer the plan (targets, skipped engines, world size, rank offsets, calls) and touch nothing. */
  dry_run?: boolean;
  weight_version: string;
  selector?: string;
  source: DiskSource | DistributedSource;
  pause_mode?: string;
  verify?: boolean;
  quorum?: { min_engines?: number; min_fraction?: number };
  /** Per-phase deadlines in ms. */
  deadlines_ms?: { pause?: number; refit?: number; verify?: number; resume?: number };
  /**
   * Once this long has passed in the pause and the quorum is met, engines still pausing are cut
   * from the refit and quarantined, so the others wait no longer (default 10000).
   */
  grace_ms?: number;
  /**
   * Parameters read back from every engine after the load (SGLang's `/get_weights_by_name`),
   * each with the first values the trainer sent: an engine that answered the load with 200
   * without applying it shows other values and fails verification (then is quarantined).
   */
  verify_weights?: Array<{ name: string; values: Array<number | null> }>;
  /** How the fleet is refit; `all` when absent. */
  strategy?: RefitStrategy;
}

/** The answer to a dry run: what the refit would do, nothing touched. */
export interface RefitPlanView {
  dry_run: true;
  refit_id: string | null;
  weight_version: string;
  source: 'disk' | 'distributed';
  selector: string | null;
  quorum: number;
  targets: Array<{ worker_id: string; url: string; rank_offset?: number }>;
  skipped: SkippedEngine[];
  asleep: string[];
  world_size?: number;
  phases: Array<{ phase: string; step: string | null; method: string; path: string; engines: string[] }>;
  /** Engine calls the refit would make when every engine succeeds. */
  calls: number;
  /** The strategy, when not `all`; a rolling refit's waves (worker ids, in order). */
  strategy?: 'rolling' | 'in_flight';
  waves?: string[][];
}

/**
 * The reply on `<root>.refit.request`: the report with the status HTTP would give it (200, or
 * 207 when an engine failed), or a dry run's plan. A refused request is an error reply instead.
 */
export type RefitReply = { status: 200 | 207; report: RefitReport } | { status: 200; plan: RefitPlanView };
