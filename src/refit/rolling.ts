// A rolling refit, run by whichever replica holds its journal: the targets in waves of at most
// `max_unavailable`, one after another. Each wave is drained first (the journal names its engines
// `draining`, so every replica's router sends them nothing new while another engine can take it,
// and the engines' own `/v1/loads` say when their running requests are done, or the drain
// timeout passes), then refit as a refit of its own (the `all` transaction: pause in the
// strategy's mode, load, verify, resume, with its journal, report, deadlines and quarantine),
// whose events are also sent on the parent's stream. The next wave starts once the last one's
// report is in; more failed engines than `max_failed` stop the waves and leave the rest on their
// version. A replica that takes the parent over goes on from its journal: the wave whose refit
// exists is taken over or read back, never run twice (waves.ts, runner.ts).

import type { JsonBucket } from '../bus/buckets.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { RefitJournal, RolloutJournal, WaveRecord } from '../wire/refit-journal.ts';
import type { EngineReport, RefitReport, SkippedEngine } from '../wire/refit-report.ts';
import type { RefitRequest } from '../wire/refit-request.ts';
import type { ControlOutcome } from '../wire/control-call.ts';
import type { Phase } from '../wire/refit-phase.ts';
import { retryWrite, type JournalWriter } from './journal.ts';
import type { RefitPublisher } from './publisher.ts';
import { DEFAULT_DRAIN_TIMEOUT_MS, mayGoOn, planWaves, waveRefitId } from './waves.ts';

/** How often a draining wave's engines are asked for their running requests. */
const DRAIN_POLL_MS = 100;
/**
 * A drain lasts this long at least: every replica's router learns of it through the journal's
 * watch, a few milliseconds behind, and a request one of them routes meanwhile must be counted.
 */
const DRAIN_MIN_MS = 100;
/** How long one `/v1/loads` read may take. */
const LOADS_READ_MS = 2_000;
/** How often a wave whose refit another replica holds is looked at again. */
const WAVE_WAIT_MS = 250;

export interface RollingDeps {
  bucket: JsonBucket<RefitJournal>;
  legs: LegRunner;
  events: RefitPublisher;
  log: Logger;
  /** This replica's requests in flight on an engine: the drain's fallback when the engine cannot say. */
  localLoad: (workerId: string) => number;
  /** The report rows of asleep targets (report.ts). */
  asleepReports: (asleep: Worker[]) => EngineReport[];
}

/** Runs (or goes on with, or waits for) one wave's refit; its report, or null once the parent is fenced. */
export type WaveRun = (q: QueuedRefit) => Promise<RefitReport | null>;

/** The request each wave runs: the parent's, as an `all` refit paused in the strategy's mode. */
export function waveRequest(req: RefitRequest, id: string): RefitRequest {
  const { strategy, refit_id: _id, dry_run: _dry, selector: _sel, ...rest } = req;
  return { ...rest, refit_id: id, pause_mode: strategy?.kind === 'rolling' ? (strategy.pause_mode ?? 'abort') : req.pause_mode };
}

export class RollingRefit {
  constructor(private readonly deps: RollingDeps) {}

  /** Runs the waves from where the journal stands; the parent's report, or null when another replica took it. */
  async run(q: QueuedRefit, targets: Worker[], writer: JournalWriter, fence: AbortSignal, runWave: WaveRun): Promise<RefitReport | null> {
    const j = writer.journal;
    const req = j.request;
    const st = req.strategy!;
    const byId = new Map(targets.map((w) => [w.id, w]));
    const active = targets.filter((w) => !j.asleep.includes(w.id));
    const startedAt = new Date(j.submitted_at);
    let r: RolloutJournal = j.rollout ?? {
      waves: planWaves(
        active.map((w) => w.id),
        st.max_unavailable,
      ),
      wave: 0,
      draining: [],
      drain_started_at: null,
      done: [],
      stopped: null,
    };
    const write = async (next: RolloutJournal) => {
      r = next;
      await retryWrite(
        () => writer.update({ rollout: r, pending: r.draining }),
        () => writer.fenced,
      );
    };
    if (!j.rollout) await write(r);
    if (writer.fenced) return null;
    this.deps.events.publish(q.id, { type: 'rollout', waves: r.waves, wave: r.wave, max_failed: st.max_failed ?? 0 });
    const failedSoFar = () => r.done.reduce((n, w) => n + (w.engines.length - w.succeeded), 0);

    while (r.wave < r.waves.length && r.stopped === null) {
      if (fence.aborted || writer.fenced) return null;
      const failed = failedSoFar();
      if (!mayGoOn(failed, st.max_failed)) {
        await write({ ...r, stopped: `${failed} engine${failed === 1 ? '' : 's'} failed, more than max_failed (${st.max_failed ?? 0})` });
        break;
      }
      const index = r.wave;
      const ids = r.waves[index]!;
      const waveId = waveRefitId(q.id, index);
      const wave = ids.map((id) => byId.get(id)).filter((w): w is Worker => w !== undefined);
      if (r.draining.length === 0) await write({ ...r, draining: ids, drain_started_at: new Date().toISOString() });
      if (writer.fenced) return null;
      this.deps.events.publish(q.id, { type: 'wave', wave: index, waves: r.waves.length, status: 'draining', engines: ids, wave_refit_id: waveId });
      const drainStart = Date.parse(r.drain_started_at ?? new Date().toISOString());
      const timeoutMs = st.drain_timeout_ms ?? DEFAULT_DRAIN_TIMEOUT_MS;
      const { busy: stillRunning, atStart: drained } = await this.drain(wave, drainStart + timeoutMs, fence, waveId);
      const drainMs = Date.now() - drainStart;
      this.deps.events.publish(q.id, {
        type: 'wave',
        wave: index,
        waves: r.waves.length,
        status: 'refitting',
        engines: ids,
        wave_refit_id: waveId,
        drain_ms: drainMs,
        drain_timed_out: stillRunning,
      });
      this.deps.events.forward(waveId, q.id, index);
      const waveStarted = Date.now();
      let report: RefitReport | null;
      try {
        report = await runWave({
          id: waveId,
          request: waveRequest(req, waveId),
          selector: null,
          targets: ids,
          skipped: [],
          origin: q.origin,
          submitted_at: new Date().toISOString(),
          parent: q.id,
        });
      } finally {
        this.deps.events.unforward(waveId);
      }
      if (!report) return null;
      const record: WaveRecord = {
        refit_id: waveId,
        engines: ids,
        status: report.status,
        succeeded: report.succeeded,
        drain_ms: drainMs,
        drain_timed_out: stillRunning,
        drained_requests: drained,
        duration_ms: Date.now() - waveStarted,
      };
      await write({ ...r, wave: index + 1, draining: [], drain_started_at: null, done: [...r.done, record] });
      if (writer.fenced) return null;
      this.deps.events.publish(q.id, {
        type: 'wave',
        wave: index,
        waves: r.waves.length,
        status: 'done',
        engines: ids,
        wave_refit_id: waveId,
        result: report.status,
        succeeded: report.succeeded,
      });
    }
    const reports = await Promise.all(r.done.map((w) => this.waveReport(w.refit_id)));
    return rolloutReport({
      id: q.id,
      request: req,
      selector: q.selector,
      rollout: r,
      reports,
      byId,
      asleep: this.deps.asleepReports(targets.filter((w) => j.asleep.includes(w.id))),
      skipped: q.skipped ?? [],
      startedAt,
    });
  }

  /**
   * Waits until no wave engine runs a request (its own `/v1/loads`; this replica's count of its
   * requests there when the engine cannot say), or `deadline`. The engines still running one then.
   */
  private async drain(wave: Worker[], deadline: number, fence: AbortSignal, refitId: string): Promise<{ busy: string[]; atStart: number }> {
    const earliest = Math.min(deadline, Date.now() + DRAIN_MIN_MS);
    let busy = wave.map((w) => w.id);
    let atStart: number | undefined;
    for (;;) {
      const loads = await Promise.all(wave.map(async (w) => [w.id, await this.running(w, refitId)] as const));
      atStart ??= loads.reduce((n, [, k]) => n + k, 0);
      busy = loads.filter(([, n]) => n > 0).map(([id]) => id);
      if ((busy.length === 0 && Date.now() >= earliest) || Date.now() >= deadline || fence.aborted) return { busy, atStart };
      await new Promise((res) => setTimeout(res, Math.min(DRAIN_POLL_MS, Math.max(0, deadline - Date.now()))));
    }
  }

  /** Requests running or waiting on the engine, as it says (`aggregate.total_reqs` of `/v1/loads`). */
  private async running(w: Worker, refitId: string): Promise<number> {
    const call = this.deps.legs.callFor('v1/loads', {
      method: 'GET',
      rawQuery: '',
      body: null,
      contentType: undefined,
      trace: { 'x-request-id': `refit-${refitId}-drain` },
    });
    const out = await this.deps.legs
      .runLegs([{ worker: w, call: { ...call, timeoutSecs: LOADS_READ_MS / 1000, deadline: Date.now() + LOADS_READ_MS } }], AbortSignal.timeout(LOADS_READ_MS))
      .then((m) => m.get(w.id))
      .catch(() => undefined);
    const n = out && totalRequests(out);
    return n ?? this.deps.localLoad(w.id);
  }

  /** A finished wave's report, from its journal (where every replica can read it). */
  private async waveReport(id: string): Promise<RefitReport | undefined> {
    for (let i = 0; i < 20; i++) {
      const got = await this.deps.bucket.get(id).catch(() => null);
      if (got?.value.report) return got.value.report;
      await new Promise((res) => setTimeout(res, WAVE_WAIT_MS));
    }
    return undefined;
  }
}

/** `aggregate.total_reqs` (else the ranks' running + waiting) of a 2xx `/v1/loads` answer; undefined otherwise. */
export function totalRequests(out: ControlOutcome): number | undefined {
  if (out.kind !== 'answer' || out.status < 200 || out.status > 299) return undefined;
  const body = out.body as { aggregate?: { total_reqs?: unknown }; loads?: Array<{ num_running_reqs?: unknown; num_waiting_reqs?: unknown }> } | null;
  if (!body || typeof body !== 'object') return undefined;
  const total = body.aggregate?.total_reqs;
  if (typeof total === 'number' && Number.isFinite(total)) return total;
  if (!Array.isArray(body.loads)) return undefined;
  let n = 0;
  for (const l of body.loads)
    n += (typeof l.num_running_reqs === 'number' ? l.num_running_reqs : 0) + (typeof l.num_waiting_reqs === 'number' ? l.num_waiting_reqs : 0);
  return n;
}

/**
 * The parent's report: every engine as its wave's report has it; engines of waves that never ran
 * are `skipped` with `wave_not_run` (they keep their version); `waves` says what each wave did.
 */
export function rolloutReport(a: {
  id: string;
  request: RefitRequest;
  selector: string | null;
  rollout: RolloutJournal;
  reports: Array<RefitReport | undefined>;
  byId: ReadonlyMap<string, Worker>;
  /** The asleep targets, reported failed as an `all` refit reports them (report.ts). */
  asleep: EngineReport[];
  skipped: SkippedEngine[];
  startedAt: Date;
}): RefitReport {
  const engines: EngineReport[] = [];
  const phases: Partial<Record<Phase, number>> = {};
  a.rollout.done.forEach((w, i) => {
    const rep = a.reports[i];
    for (const id of w.engines) {
      const e = rep?.engines.find((x) => x.worker_id === id);
      engines.push(
        e ?? {
          worker_id: id,
          url: a.byId.get(id)?.url ?? id,
          outcome: 'failed',
          error: 'report_unavailable',
          message: `the report of wave refit \`${w.refit_id}\` could not be read`,
          phases: { pause: null, refit: null, verify: null, resume: null },
          breaker: 'unknown',
          state: 'unknown',
          weight_version: null,
        },
      );
    }
    for (const [p, ms] of Object.entries(rep?.phases ?? {}) as Array<[Phase, number]>) phases[p] = (phases[p] ?? 0) + ms;
  });
  engines.push(...a.asleep);
  const notRun = a.rollout.waves.slice(a.rollout.done.length).flat();
  const skipped: SkippedEngine[] = [
    ...a.skipped,
    ...notRun.map((id) => ({
      worker_id: id,
      url: a.byId.get(id)?.url ?? id,
      reason: 'wave_not_run' as const,
      message: `not refit: ${a.rollout.stopped ?? 'the waves stopped'}; it keeps its version`,
    })),
  ];
  const failed = engines.filter((e) => e.outcome === 'failed');
  const succeeded = engines.length - failed.length;
  const finishedAt = new Date();
  const status: RefitReport['status'] = failed.length === 0 && notRun.length === 0 ? 'succeeded' : succeeded > 0 ? 'partial' : 'failed';
  return {
    id: a.id,
    status,
    weight_version: a.request.weight_version,
    source: a.request.source.kind,
    selector: a.selector,
    started_at: a.startedAt.toISOString(),
    finished_at: finishedAt.toISOString(),
    duration_ms: finishedAt.getTime() - a.startedAt.getTime(),
    phases,
    total: engines.length + notRun.length,
    succeeded,
    quorum: 1,
    ...(a.rollout.stopped ? { aborted: 'max_failed' } : {}),
    downtime_engine_ms: a.reports.reduce((ms, r) => ms + (r?.downtime_engine_ms ?? 0), 0),
    engines,
    failed,
    skipped,
    strategy: 'rolling',
    waves: a.rollout.done.map((w, i) => ({ ...w, index: i })),
  };
}
