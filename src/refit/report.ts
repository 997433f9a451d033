// Builds the audit record of one refit (its shape: wire/refit-report.ts): who took part, what
// happened to each engine in each phase, how long each phase took, and each engine's breaker and
// version afterwards. HTTP answers it with 200 when every engine succeeded and 207 otherwise. A
// refit refused when it was taken has one too, in which every engine failed and none was touched.

import type { CoordinatorContext } from '../../actors/coordinator.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Worker } from '../fleet/worker.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { Phase } from '../wire/refit-phase.ts';
import type { EngineReport, RefitReport, SkippedEngine } from '../wire/refit-report.ts';
import type { RefitRequest } from '../wire/refit-request.ts';

export function buildReport(args: {
  id: string;
  request: RefitRequest;
  selector: string | null;
  targets: Worker[];
  /** Selected engines left out because they were asleep (no weights in memory). */
  asleep: Worker[];
  result: CoordinatorContext;
  phaseMs: Partial<Record<Phase, number>>;
  startedAt: Date;
  finishedAt: Date;
  view: FleetView;
  group?: { worldSize: number; rankOffsets: Record<string, number> };
  skipped: SkippedEngine[];
  /** Versions read from failed engines after the refit; the view's belief where absent. */
  held?: ReadonlyMap<string, string>;
  /** Engine-milliseconds held (phase-runner.ts). */
  downtimeMs?: number;
}): RefitReport {
  const { result, view } = args;
  const paused = new Set(result.paused); // asked per engine: a 1,000-engine report scans no list
  const engines: EngineReport[] = args.targets.map((w) => {
    const rec = result.engines[w.id] ?? { phases: {} };
    const e = view.engine(w);
    // Ok means refitted: paused, never failed, and the refit was not called off by the quorum.
    const ok = rec.failedIn === undefined && paused.has(w.id) && !result.abortReason;
    const r: EngineReport = {
      worker_id: w.id,
      url: w.url,
      outcome: ok ? 'ok' : 'failed',
      phases: {
        pause: rec.phases.pause ?? null,
        refit: rec.phases.refit ?? null,
        verify: rec.phases.verify ?? null,
        resume: rec.phases.resume ?? null,
      },
      breaker: e.breaker,
      state: e.state,
      // A refitted engine holds the refit's version, whatever the view has heard yet (another
      // replica's engine is seen through its record, which may still be on its way).
      weight_version: ok ? args.request.weight_version : (args.held?.get(w.id) ?? e.version ?? null),
    };
    if (rec.failedIn !== undefined) {
      r.failed_phase = rec.failedIn;
      if (rec.step) r.failed_step = rec.step;
      if (rec.error) r.error = rec.error;
      if (rec.status !== undefined) r.status = rec.status;
      if (rec.message) r.message = rec.message;
    } else if (r.outcome === 'failed') {
      r.error = result.abortReason ?? 'not_refitted';
      r.message =
        result.abortReason === 'quorum_not_met'
          ? `only ${result.paused.length} of the ${result.quorum} engines the quorum needs could be paused; no engine was refitted`
          : result.abortReason === 'gateway_failover'
            ? 'the replica running the refit died before the refit phase; the replica that took it over resumed the engines without refitting them'
            : 'engine was not refitted';
    }
    if (args.group) r.rank_offset = args.group.rankOffsets[w.id];
    return r;
  });
  engines.push(...asleepReports(args.asleep, view));
  const succeeded = engines.filter((e) => e.outcome === 'ok').length;
  const report: RefitReport = {
    id: args.id,
    status: succeeded === engines.length ? 'succeeded' : succeeded === 0 || result.abortReason ? 'failed' : 'partial',
    weight_version: args.request.weight_version,
    source: args.request.source.kind,
    selector: args.selector,
    started_at: args.startedAt.toISOString(),
    finished_at: args.finishedAt.toISOString(),
    duration_ms: args.finishedAt.getTime() - args.startedAt.getTime(),
    phases: args.phaseMs,
    total: engines.length,
    succeeded,
    quorum: result.quorum,
    engines,
    failed: engines.filter((e) => e.outcome === 'failed'),
    skipped: args.skipped,
  };
  if (result.abortReason) report.aborted = result.abortReason;
  if (args.request.strategy?.kind === 'in_flight') report.strategy = 'in_flight';
  if (args.downtimeMs !== undefined) report.downtime_engine_ms = args.downtimeMs;
  if (args.group) report.world_size = args.group.worldSize;
  return report;
}

/** The report of a refit refused when it was taken: every engine failed `plan_refused`, none touched. */
export function refusedReport(q: QueuedRefit, request: RefitRequest, targets: Worker[], why: string, view: FleetView): RefitReport {
  const now = new Date();
  const message = `the refit could not be planned when it was taken, so no engine was touched: ${why}`;
  return buildReport({
    id: q.id,
    request,
    selector: q.selector,
    targets,
    asleep: [],
    result: {
      refitId: q.id,
      targets: targets.map((w) => w.id),
      steps: [],
      verify: false,
      quorum: 0,
      keepPaused: [],
      deadlines: { pauseMs: 0, refitMs: 0, verifyMs: 0, resumeMs: 0 },
      graceMs: 0,
      engines: Object.fromEntries(targets.map((w) => [w.id, { phases: {}, failedIn: 'pause' as const, error: 'plan_refused', message }])),
      paused: [],
      resumed: [],
      stepIndex: 0,
      phase: 'pause',
      pending: [],
    },
    phaseMs: {},
    startedAt: new Date(q.submitted_at),
    finishedAt: now,
    view,
    skipped: q.skipped ?? [],
  });
}

/** 200 only when every engine succeeded (as a fan-out: partial success is never 200). */
export function reportStatus(r: RefitReport): 200 | 207 {
  return r.failed.length === 0 ? 200 : 207;
}

/** Asleep targets in a report: failed in the pause, untouched (their memory is released). */
export function asleepReports(asleep: readonly Worker[], view: FleetView): EngineReport[] {
  return asleep.map((w) => {
    const e = view.engine(w);
    return {
      worker_id: w.id,
      url: w.url,
      outcome: 'failed',
      failed_phase: 'pause',
      error: 'engine_asleep',
      message: 'the engine is asleep (its memory is released): wake it up, then refit it',
      phases: { pause: null, refit: null, verify: null, resume: null },
      breaker: e.breaker,
      state: e.state,
      weight_version: e.version ?? null,
    };
  });
}
