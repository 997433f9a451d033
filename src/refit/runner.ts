// Runs one queued refit, as the queue worker hands it (worker.ts), and returns what becomes of
// its message. It leaves a refit whose runner lives alone, claims the journal (claim.ts: created,
// or taken over from a dead runner), refuses whole what cannot run, records the resumes owed,
// runs one coordinator actor with the phase runner's `runPhase` (phase-runner.ts), journals each
// answer, settles the debts, applies the quarantine the result calls for (verdicts.ts), and ends
// with exactly one report: written to the journal, then published. It never touches the queue
// message itself: the worker acks, hands back or drops it as the verdict says.

import { StillOurs } from './still-ours.ts';
import { createActor, toPromise } from 'xstate';
import { coordinatorMachine } from '../../actors/coordinator.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Registry } from '../fleet/registry.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { prepareCalls } from './calls.ts';
import { RefitClaim, type Claimed } from './claim.ts';
import { retryWrite, type JournalWriter } from './journal.ts';
import type { RefitJournals } from './journals.ts';
import { LegCalls } from './leg-calls.ts';
import { PhaseRunner } from './phase-runner.ts';
import { planRefit } from './plan.ts';
import type { RefitPublisher } from './publisher.ts';
import { takeVerdict } from './queue-verdict.ts';
import { asleepReports, buildReport, refusedReport } from './report.ts';
import { RollingRefit } from './rolling.ts';
import type { ResumesOwed } from './resumes-owed.ts';
import { quarantineAfter, quorumOf } from './verdicts.ts';
import type { Delivery, RefitTaker, Verdict } from './worker.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';
import type { RefitReport } from '../wire/refit-report.ts';
import { deadlinesOf, type RefitDefaults } from './deadlines.ts';

const RETRY_MS = 250;
/** How long the pause may hold the quorum's engines waiting for the others, by default. */
export const DEFAULT_GRACE_MS = 10_000;
const ACK: Verdict = { settle: 'ack' };

/** Failures that mean the engine gave no answer in time: reading its version would wait as long. */
const UNANSWERED = new Set(['phase_deadline_exceeded', 'upstream_timeout', 'cut_after_grace']);

export class RefitRunner implements RefitTaker {
  /** Refits this process runs now (a restarted replica with the same id runs none of its old ones). */
  private readonly active = new Set<string>();
  private readonly claim: RefitClaim;
  private readonly rolling: RollingRefit;
  /** Per running refit: whether this replica still holds it (see execute), asked before each call made for it. */
  private readonly stillOurs = new Map<string, () => Promise<boolean | undefined>>();

  constructor(
    private readonly deps: {
      replicaId: string;
      /** This replica's lease fence: after each lapse, a refit it runs is confirmed before more is sent. */
      fence?: { readonly lapses: number };
      /** The `refits` bucket: this runner's journals are created and written there, by compare-and-set. */
      bucket: JsonBucket<RefitJournal>;
      /** The refit read model: whether another refit holds an engine (`clashes`). */
      journals: RefitJournals;
      events: RefitPublisher;
      registry: Registry;
      view: FleetView;
      legs: LegRunner;
      metrics: Metrics;
      log: Logger;
      deadlines: RefitDefaults;
      owed: ResumesOwed;
      /** The refit queue's ack wait: a takeover waits at most three for the dead replica's engines. */
      ackWaitMs: number;
      /**
       * Resolves when every engine has a live owner other than `dead` (or the time is up): a
       * refit taken over from a replica that also owned engines waits for their new owner.
       */
      ownersSettled: (ids: string[], dead: string, timeoutMs: number) => Promise<void>;
      /** Is this replica's heartbeat fresh (read again when it looks stale)? A live holder keeps its refit. */
      alive: (replica: string) => Promise<boolean>;
      /** Holds an engine out of routing (reason), or lets it back (null); its owner applies it. */
      quarantine: (workerId: string, reason: string | null) => void;
      /** An engine's control and who paused it, as its shared record says now (read afresh), or undefined. */
      recordedControl: (workerId: string) => Promise<{ control: string; pausedBy: string | undefined } | undefined>;
      /** Who paused a paused engine, as this replica knows it now (engine-host.ts). */
      pausedBy: (workerId: string) => string | undefined;
      /** This replica's requests in flight on an engine (a rolling refit's drain, when the engine cannot say). */
      localLoad: (workerId: string) => number;
    },
  ) {
    const { replicaId, bucket, view, owed, events, log, ownersSettled, recordedControl, pausedBy } = deps;
    this.claim = new RefitClaim({ replicaId, bucket, view, owed, events, log, settleMs: 3 * deps.ackWaitMs, ownersSettled, recordedControl, pausedBy });
    this.rolling = new RollingRefit({ bucket, legs: deps.legs, events, log, localLoad: deps.localLoad, asleepReports: (ws) => asleepReports(ws, view) });
  }

  /** Runs the queued refit (or goes on with it), unless it is over or another runner holds it. */
  async take(q: QueuedRefit, delivery: Delivery): Promise<Verdict> {
    const existing = await this.deps.bucket.get(q.id);
    if (existing?.value.status === 'done') return ACK;
    // A refit whose runner lives: a second message for it (a resubmission) is dropped; its own
    // message handed back (the runner missed extending it, e.g. in a bus outage) is looked at
    // again shortly: the runner acks it when it finishes, or its heartbeat goes stale.
    const holder = existing?.value.holder;
    if (existing && (this.active.has(q.id) || (holder !== this.deps.replicaId && (await this.deps.alive(holder!))))) {
      return delivery.count > 1 ? { settle: 'retry', afterMs: RETRY_MS * 4 } : { settle: 'drop', reason: 'a second submission of a refit whose runner lives' };
    }
    const take = takeVerdict(q, {
      takeover: Boolean(existing),
      clash: await this.deps.journals.clashes(q.id, q.targets, q.parent),
      known: (id) => this.deps.registry.get(id) !== undefined,
    });
    if (take.take === 'later') return { settle: 'retry', afterMs: RETRY_MS * 4 }; // its turn comes when the other refit is over
    // Aborted when a journal write finds another replica holding the refit: the coordinator stops.
    const fence = new AbortController();
    const onFenced = () => fence.abort();
    const targets = q.targets.map((id) => this.deps.registry.get(id) ?? removedWorker(id));
    const claimed: Claimed | null = existing ? await this.claim.takeOver(q, existing, targets, onFenced) : await this.claim.create(q, targets, onFenced);
    if (!claimed) return { settle: 'retry', afterMs: RETRY_MS }; // another replica took it just now
    const { writer, recovered } = claimed;
    // The fleet may have changed since the refit was accepted (a distributed refit's world size
    // no longer matches): it is refused whole, nothing is paused, and the trainer hears why.
    const refusal = take.take === 'refuse' ? take.reason : this.planRefusal(writer.journal, targets);
    if (refusal && !recovered) {
      this.deps.log.warn({ refit_id: q.id, reason: refusal }, 'refused a queued refit when it was taken; no engine was touched');
      await this.finish(writer, refusedReport(q, writer.journal.request, targets, refusal, this.deps.view));
      return ACK;
    }
    this.active.add(q.id);
    this.deps.metrics.refitStarted();
    try {
      const report =
        claimed.writer.journal.request.strategy?.kind === 'rolling'
          ? await this.rolling.run(q, targets, claimed.writer, fence.signal, (wave) => this.runWave(wave, delivery, fence.signal))
          : await this.execute(q, targets, claimed, delivery.draining, fence.signal);
      if (!report) return { settle: 'leave', reason: 'another replica holds the refit now and finishes it' };
      await this.finish(writer, report);
      return ACK;
    } finally {
      this.active.delete(q.id);
      this.stillOurs.delete(q.id);
      this.deps.metrics.refitEnded();
    }
  }

  /**
   * One wave of a rolling refit this replica runs: taken as any queued refit is (created, taken
   * over from a dead runner, or left to a live one), until its journal holds its report.
   */
  private async runWave(q: QueuedRefit, delivery: Delivery, parentFence: AbortSignal): Promise<RefitReport | null> {
    for (;;) {
      if (parentFence.aborted) return null;
      await this.take(q, delivery);
      const got = await this.deps.bucket.get(q.id).catch(() => null);
      if (got?.value.report) return got.value.report;
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }

  /** Why the refit cannot be planned (and its calls built) over these engines now, or null. */
  private planRefusal(j: RefitJournal, targets: Worker[]): string | null {
    const active = targets.filter((w) => !j.asleep.includes(w.id));
    try {
      prepareCalls(this.deps.legs, planRefit(j.request, active), active, j.id);
      return null;
    } catch (err) {
      return (err as Error).message;
    }
  }

  /** Runs (or goes on with) the transaction; null when another replica took the refit meanwhile. */
  private async execute(q: QueuedRefit, all: Worker[], { writer, recovered }: Claimed, draining: AbortSignal, fence: AbortSignal): Promise<RefitReport | null> {
    const j = writer.journal;
    const req = j.request;
    const id = q.id;
    const targets = all.filter((w) => !j.asleep.includes(w.id));
    const asleep = all.filter((w) => j.asleep.includes(w.id));
    // Whether this replica still holds the refit, read afresh after each lapse of its lease (the
    // journal's revision moved: another replica took it). Undefined while it cannot be read.
    const ours = new StillOurs({ lapses: () => this.deps.fence?.lapses ?? 0, fenced: () => writer.fenced, confirm: () => writer.confirm() });
    this.stillOurs.set(id, async () => ours.ask());
    const plan = planRefit(req, targets);
    const calls = prepareCalls(this.deps.legs, plan, targets, id);
    const startedAt = new Date();
    const d = deadlinesOf(this.deps.deadlines, req.deadlines_ms);
    const quorum = quorumOf(req, targets.length);

    // The debts are recorded before anything is paused (and re-recorded under this replica after
    // a takeover), so that a pause this refit cannot undo is paid by the engine's owner.
    const owing = targets.filter((w) => !j.keep_paused.includes(w.id) && !(recovered?.resumed ?? []).includes(w.id)).map((w) => w.id);
    await retryWrite(
      () => this.deps.owed.owe(owing, id),
      () => writer.fenced,
    );
    if (writer.fenced) return null;
    this.deps.log.info(
      {
        refit_id: id,
        origin: q.origin,
        weight_version: req.weight_version,
        source: req.source.kind,
        targets: targets.length,
        quorum,
        recovered: recovered?.at ?? null,
      },
      recovered ? 'refit taken over' : 'refit started',
    );
    this.deps.events.publish(id, {
      type: 'started',
      replica: this.deps.replicaId,
      targets: targets.map((w) => w.id),
      quorum,
      steps: plan.steps.map((st) => st.name),
      verify: plan.verify !== null,
      recovered: recovered?.at ?? null,
    });

    const legCalls = new LegCalls({ legs: this.deps.legs, draining, stillOurs: (refitId) => this.stillOurs.get(refitId)?.() });
    const phases = new PhaseRunner(
      { legs: this.deps.legs, calls: legCalls, events: this.deps.events, log: this.deps.log },
      { id, plan, calls, targets, writer, version: req.weight_version, readMs: d.verifyMs, recovered: recovered !== undefined },
    );
    const actor = createActor(coordinatorMachine.provide({ actors: { runPhase: phases.runPhase } }), {
      systemId: `refit:${id}`,
      input: {
        refitId: id,
        targets: targets.map((w) => w.id),
        steps: plan.steps,
        verify: plan.verify !== null,
        quorum,
        keepPaused: j.keep_paused,
        deadlines: { pauseMs: d.pauseMs, refitMs: d.refitMs, verifyMs: d.verifyMs, resumeMs: d.resumeMs },
        graceMs: req.grace_ms ?? DEFAULT_GRACE_MS,
        recovered,
      },
    });
    // What the coordinator decides without an answer reaches watchers as it decides.
    actor.on('legs.cut', (e) => phases.cut(e.phase, e.stepIndex, e.legs));
    actor.on('transfer.aborted', (e) => phases.cut('refit', e.stepIndex, e.legs));
    // A refit step's answers are journaled as they come (writes in one burst travel together);
    // the other phases' answers travel with the next write: a takeover pauses, checks or resumes
    // again whatever they say (journal.ts, `durableBefore`, `answersDurable`).
    actor.subscribe((snap) => {
      const c = snap.context;
      if (writer.fenced) return;
      const patch = { engines: c.engines, paused: c.paused, resumed: c.resumed, pending: c.pending, abort_reason: c.abortReason };
      if (c.phase === 'refit') writer.update(patch).catch(() => {});
      else writer.stage(patch);
    });
    const fenced = new Promise<null>((resolve) => {
      fence.addEventListener(
        'abort',
        () => {
          actor.stop();
          resolve(null);
        },
        { once: true },
      );
    });
    actor.start();
    // A stopped actor never settles its promise: the fence resolves the race instead.
    const result = await Promise.race([toPromise(actor).catch(() => null), fenced]);
    if (fence.aborted || !result) {
      this.deps.log.warn({ refit_id: id }, 'another replica took this refit over; it finishes it');
      return null;
    }
    await Promise.all(owing.map((wid) => this.deps.owed.settle(wid, result.resumed.includes(wid), id)));
    // Quarantined, or let out, as the result says (verdicts.ts).
    const verdicts = quarantineAfter(
      result,
      targets.map((w) => w.id),
      { verify: plan.verify !== null, reloaded: phases.reloaded },
    );
    for (const [wid, reason] of verdicts) this.deps.quarantine(wid, reason);
    // An engine that failed once its weights were touched is reported with the version it says it
    // holds now, read from it: this replica's view may be stale (another replica's engine, a load
    // whose answer was lost, a transfer abandoned half-way).
    // An engine that did not answer in time (hung, or cut by a deadline) is not asked again: it
    // would only hold the report up.
    const touched = targets.filter((w) => {
      const rec = result.engines[w.id];
      return (rec?.failedIn === 'refit' || rec?.failedIn === 'verify') && !UNANSWERED.has(rec.error ?? '');
    });
    const held = await legCalls.readVersions(touched, id);
    return buildReport({
      id,
      request: req,
      selector: q.selector,
      targets,
      asleep,
      result,
      held,
      phaseMs: phases.phaseMs,
      startedAt: recovered ? new Date(j.submitted_at) : startedAt,
      finishedAt: new Date(),
      view: this.deps.view,
      group: plan.group,
      skipped: q.skipped ?? [],
      downtimeMs: phases.downtimeMs(),
    });
  }

  /** The report goes to the journal first (the one place a trainer can always read it), then out. */
  private async finish(writer: JournalWriter, report: RefitReport): Promise<void> {
    await retryWrite(
      () => writer.update({ status: 'done', report, pending: [] }),
      () => writer.fenced,
    );
    if (writer.fenced) return;
    this.deps.journals.written(writer.journal, writer.written);
    // A rolling refit's waves are refits of their own, counted as they finished.
    this.deps.metrics.refit(report.status, report.phases, report.strategy === 'rolling' ? 0 : (report.downtime_engine_ms ?? 0));
    this.deps.events.report(report);
    this.deps.log.info(
      { refit_id: report.id, status: report.status, succeeded: report.succeeded, total: report.total, duration_ms: report.duration_ms },
      'refit finished',
    );
  }
}

/** A target removed from the registry after the refit was accepted: its legs fail as unreachable. */
function removedWorker(id: string): Worker {
  return {
    id,
    url: id,
    baseUrl: id,
    dpAware: false,
    dpRank: null,
    connectionMode: 'http',
    engine: 'unknown',
    workerType: 'regular',
    modelId: 'unknown',
    apiKey: null,
    httpPool: null,
    callerLabels: {},
    discoveredLabels: {},
    owner: '',
    registeredAt: 0,
  };
}
