// A refit's progress events, one JSON message each on `<root>.refit.<id>.events`, kept by the
// refit events stream so that any replica can replay them (docs/refit-events.md says when each is
// sent). Readers take them as untrusted: anyone allowed to publish there may. Shapes only:
// src/refit/publisher.ts publishes them (for the front, the claim, the runner and the phase runner).

import type { Phase } from './refit-phase.ts';
import type { RefitReport, SkippedEngine } from './refit-report.ts';

/** An event as its sender writes it; `refit_id` and `time` are added as it is published. */
export type RefitEventBody =
  | {
      type: 'accepted';
      weight_version: string;
      source: 'disk' | 'distributed';
      selector: string | null;
      targets: string[];
      skipped: SkippedEngine[];
      replica: string;
    }
  /** `recovered`: where a taken-over refit goes on (`pausing`, `verifying`, `resuming`, `cleanup`), or null. */
  | { type: 'started'; replica: string; targets: string[]; quorum: number; steps: string[]; verify: boolean; recovered: string | null }
  | { type: 'phase'; phase: Phase; step: string | null; step_index: number; steps: number; targets: string[] }
  | {
      type: 'leg';
      worker_id: string;
      url: string;
      phase: Phase;
      step: string | null;
      step_index: number;
      outcome: 'ok' | 'failed';
      error?: string;
      status?: number;
      message?: string;
      latency_ms: number;
      started_at: string;
      finished_at: string;
    }
  | { type: 'takeover'; from: string; to: string; phase: Phase | null; step_index: number }
  /** A rolling refit's waves, as planned (sent when it starts, and again by a replica that takes it over). */
  | { type: 'rollout'; waves: string[][]; wave: number; max_failed: number }
  /** A wave drains, is refit (its own refit `wave_refit_id`, whose events follow with `wave` set), or is done. */
  | {
      type: 'wave';
      wave: number;
      waves: number;
      status: 'draining' | 'refitting' | 'done';
      engines: string[];
      wave_refit_id: string;
      drain_ms?: number;
      drain_timed_out?: string[];
      result?: 'succeeded' | 'partial' | 'failed';
      succeeded?: number;
    }
  | { type: 'report'; report: RefitReport };

/**
 * `wave`: an event of a rolling refit's wave, sent again on the parent's stream (`refit_id` the
 * parent's, `wave_refit_id` the wave's own).
 */
export type RefitEvent = RefitEventBody & { refit_id: string; time: string; wave?: number; wave_refit_id?: string };
