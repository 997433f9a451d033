// Runs the refits of the durable queue: takes one message, writes (or, after a takeover, reads)
// its journal, starts one coordinator actor with `runPhase` wired to the control plane (legs
// through NATS to the engines' owners), journals each phase before its calls go out and each
// answer as it comes, records the resumes owed, and ends with exactly one report: written to the
// journal, published on `rl.refit.<id>.report`, then the message is acked. A replica that dies
// mid-refit stops extending the message; another takes it and goes on from the journal.

import { createActor, fromCallback, toPromise } from 'xstate';
import type { JsMsg } from '@nats-io/jetstream';
import { coordinatorMachine, type CoordinatorEvent, type CutLeg, type LegResult, type Phase, type PhaseInput, type Recovered } from '../../actors/coordinator.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { RefitQueue } from '../bus/refit-queue.ts';
import type { ControlCall, ControlOutcome } from '../engines/control-call.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Registry } from '../fleet/registry.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { JournalFenced, JournalWriter, recoveryOf, type RefitJournal } from './journal.ts';
import { callKey, fresh, prepareCalls } from './calls.ts';
import { planRefit, type RefitPlan } from './plan.ts';
import type { QueuedRefit } from './queue-message.ts';
import { readQueuedRefit, takeVerdict } from './queue-verdict.ts';
import { answerLost, lostAnswerVerdict, notMade, repeatable, reportedVersion, setsVersion, versionMismatch } from './leg-recovery.ts';
import { buildReport, type RefitReport } from './report.ts';
import type { RefitRequest } from './request.ts';
import type { RefitJournals } from './journals.ts';
import type { RefitPublisher } from './publisher.ts';
import type { ResumesOwed } from './resumes-owed.ts';
import { legResult, quarantineAfter, quorumOf } from './verdicts.ts';

export interface RefitDefaults {
  pauseMs: number;
  refitMs: number;
  verifyMs: number;
  resumeMs: number;
}

const RETRY_MS = 250;
/** How long the pause may hold the quorum's engines waiting for the others, by default. */
export const DEFAULT_GRACE_MS = 10_000;
/** How long the report waits on reading a failed engine's version. */
const READ_BACK_MS = 2_000;

export class RefitRunner {
  private readonly running = new Set<Promise<void>>();
  /** Refits this process runs now (a restarted replica with the same id runs none of its old ones). */
  private readonly active = new Set<string>();
  private closing = false;

  constructor(
    private readonly deps: {
      replicaId: string;
      queue: RefitQueue;
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
    },
  ) {}

  async start(): Promise<void> {
    await this.deps.queue.consume((msg) => {
      const p = this.handle(msg).catch((err: unknown) => {
        this.deps.log.error({ err }, 'refit runner failed');
        msg.nak(1_000);
      });
      this.running.add(p);
      void p.finally(() => this.running.delete(p));
    });
  }

  /** Takes no new refit and waits for the running ones (each still resumes what it paused). */
  async drain(): Promise<void> {
    this.closing = true;
    this.deps.queue.close();
    await Promise.allSettled([...this.running]);
  }

  private async handle(msg: JsMsg): Promise<void> {
    const read = readQueuedRefit(msg.data, msg.headers?.get('Nats-Msg-Id') || undefined);
    if (!read.ok) {
      // Handing it back would bring it back for the stream's whole max age: drop it, say so. (No
      // reason in the term: nats-server 2.9 ignores a `+TERM <reason>`, and redelivers.)
      this.deps.log.warn({ reason: read.reason, subject: msg.subject, seq: msg.seq }, 'dropped a refit queue message that is not a refit this gateway queued');
      return msg.term();
    }
    const q = read.refit;
    if (this.closing) return msg.nak();
    // Held while it runs: a replica that dies stops extending it, and another takes it.
    const keep = setInterval(() => msg.working(), Math.max(200, Math.floor(this.deps.queue.ackWaitMs / 3)));
    try {
      const existing = await this.deps.bucket.get(q.id);
      if (existing?.value.status === 'done') return msg.ack();
      // A refit whose runner lives: a second message for it (a resubmission) is dropped; its own
      // message handed back (the runner missed extending it, e.g. in a bus outage) is looked at
      // again shortly: the runner acks it when it finishes, or its heartbeat goes stale.
      const holder = existing?.value.holder;
      if (existing && (this.active.has(q.id) || (holder !== this.deps.replicaId && (await this.deps.alive(holder!))))) {
        return msg.info.deliveryCount > 1 ? msg.nak(RETRY_MS * 4) : msg.term();
      }
      const take = takeVerdict(q, { takeover: Boolean(existing), clash: await this.deps.journals.clashes(q.id, q.targets), known: (id) => this.deps.registry.get(id) !== undefined });
      if (take.take === 'later') return msg.nak(RETRY_MS * 4); // its turn comes when the other refit is over
      let writer: JournalWriter;
      let recovered: Recovered | undefined;
      let actorStop: () => void = () => {};
      const onFenced = () => actorStop();
      const targets = q.targets.map((id) => this.deps.registry.get(id) ?? removedWorker(id));
      if (!existing) {
        const j = this.newJournal(q, targets, await this.controlsNow(targets));
        const revision = await this.deps.bucket.create(q.id, j).catch(() => null);
        if (revision === null) return msg.nak(RETRY_MS); // another replica started it just now
        writer = new JournalWriter(this.deps.bucket, j, revision, onFenced);
      } else {
        const j = existing.value;
        const from = j.holder;
        j.takeovers = [...(j.takeovers ?? []), { from: j.holder, to: this.deps.replicaId, at: new Date().toISOString(), phase: j.phase, step_index: j.step_index }];
        this.deps.log.warn({ refit_id: q.id, from: j.holder, phase: j.phase, step_index: j.step_index }, 'taking over a refit whose replica stopped');
        this.deps.events.publish(q.id, { type: 'takeover', from: j.holder, to: this.deps.replicaId, phase: j.phase, step_index: j.step_index });
        j.holder = this.deps.replicaId;
        const revision = await this.deps.bucket.update(q.id, j, existing.revision).catch(() => null);
        if (revision === null) return msg.nak(RETRY_MS);
        writer = new JournalWriter(this.deps.bucket, j, revision, onFenced);
        const plan = this.planOrNull(j, targets);
        if (plan) recovered = recoveryOf(j, plan.steps, plan.verify !== null);
        // The dead replica may have owned engines too: their calls wait for the new owner.
        // (A replica restarted under its own id owns its engines again at once: nobody to wait for.)
        await this.deps.ownersSettled(q.targets, from === this.deps.replicaId ? '' : from, 3 * this.deps.queue.ackWaitMs);
      }
      // The fleet may have changed since the refit was accepted (a distributed refit's world size
      // no longer matches): it is refused whole, nothing is paused, and the trainer hears why.
      const refusal = take.take === 'refuse' ? take.reason : this.planRefusal(writer.journal, targets);
      if (refusal && !recovered) {
        this.deps.log.warn({ refit_id: q.id, reason: refusal }, 'refused a queued refit when it was taken; no engine was touched');
        await this.finish(writer, this.refusedReport(q, writer.journal, targets, refusal));
        return msg.ack();
      }
      this.active.add(q.id);
      this.deps.metrics.refitStarted();
      try {
        const report = await this.execute(q, targets, writer, recovered, (stop) => (actorStop = stop));
        if (!report) return; // fenced: the replica that holds the refit now finishes it
        await this.finish(writer, report);
        msg.ack();
      } finally {
        this.active.delete(q.id);
        this.deps.metrics.refitEnded();
      }
    } finally {
      clearInterval(keep);
    }
  }

  private planOrNull(j: RefitJournal, targets: Worker[]): RefitPlan | null {
    try {
      return planRefit(j.request, targets.filter((w) => !j.asleep.includes(w.id)));
    } catch {
      return null;
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

  /** The report of a refit refused when it was taken: every engine failed, none touched. */
  private refusedReport(q: QueuedRefit, j: RefitJournal, targets: Worker[], why: string): RefitReport {
    const now = new Date();
    const message = `the refit could not be planned when it was taken, so no engine was touched: ${why}`;
    return buildReport({
      id: q.id,
      request: j.request,
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
      view: this.deps.view,
      skipped: q.skipped ?? [],
    });
  }

  /**
   * Each target's control (active, paused, asleep). An engine this replica owns is read from its
   * actor; another replica's engine from the view, and when the view says paused or asleep, from
   * its shared record read afresh: the view follows the bucket through a watch that can lag behind
   * it after a NATS node dies, and a pause it still shows from a finished refit would be taken for
   * an operator's and kept after this refit.
   */
  private async controlsNow(targets: Worker[]): Promise<Map<string, { control: string; pausedBy: string | undefined }>> {
    const out = new Map<string, { control: string; pausedBy: string | undefined }>();
    await Promise.all(
      targets.map(async (w) => {
        const e = this.deps.view.engine(w);
        let now = { control: e.control as string, pausedBy: this.deps.pausedBy(w.id) };
        if (!e.hosted && now.control !== 'active') now = (await this.deps.recordedControl(w.id).catch(() => undefined)) ?? now;
        out.set(w.id, now);
      }),
    );
    return out;
  }

  private newJournal(q: QueuedRefit, targets: Worker[], controls: Map<string, { control: string; pausedBy: string | undefined }>): RefitJournal {
    const { owed } = this.deps;
    // An asleep engine holds no weights in memory: it is reported, not paused or refitted.
    const asleep = targets.filter((w) => controls.get(w.id)?.control === 'asleep').map((w) => w.id);
    // Engines an operator paused before the refit stay paused after it: the refit resumes only
    // what it paused. A pause an earlier refit made is not an operator's, whether its resume is
    // owed or the record saying `paused` is a step behind the resume: this refit resumes it.
    const operatorPaused = (w: Worker) => {
      const c = controls.get(w.id);
      return c?.control === 'paused' && !c.pausedBy?.startsWith('refit:') && !owed.has(w.id);
    };
    const keepPaused = targets.filter((w) => !asleep.includes(w.id) && operatorPaused(w)).map((w) => w.id);
    return {
      id: q.id,
      status: 'running',
      holder: this.deps.replicaId,
      origin: q.origin,
      submitted_at: q.submitted_at,
      request: q.request,
      selector: q.selector,
      targets: q.targets,
      asleep,
      keep_paused: keepPaused,
      phase: null,
      step_index: 0,
      pending: [],
      engines: {},
      paused: [],
      resumed: [],
      takeovers: [],
    };
  }

  /** Runs (or goes on with) the transaction; null when another replica took the refit meanwhile. */
  private async execute(q: QueuedRefit, all: Worker[], writer: JournalWriter, recovered: Recovered | undefined, onActor: (stop: () => void) => void): Promise<RefitReport | null> {
    const j = writer.journal;
    const req = j.request;
    const id = q.id;
    const targets = all.filter((w) => !j.asleep.includes(w.id));
    const asleep = all.filter((w) => j.asleep.includes(w.id));
    const plan = planRefit(req, targets);
    const calls = prepareCalls(this.deps.legs, plan, targets, id);
    const startedAt = new Date();
    const byId = new Map(targets.map((w) => [w.id, w]));
    const phaseStarted = new Map<Phase, number>();
    const phaseMs: Partial<Record<Phase, number>> = {};
    const d = { ...this.deps.deadlines, ...renameDeadlines(req.deadlines_ms) };
    const quorum = quorumOf(req, targets.length);

    // The debts are recorded before anything is paused (and re-recorded under this replica after
    // a takeover), so that a pause this refit cannot undo is paid by the engine's owner.
    const owing = targets.filter((w) => !j.keep_paused.includes(w.id) && !(recovered?.resumed ?? []).includes(w.id)).map((w) => w.id);
    await retry(() => this.deps.owed.owe(owing, id), () => writer.fenced);
    if (writer.fenced) return null;
    this.deps.log.info({ refit_id: id, origin: q.origin, weight_version: req.weight_version, source: req.source.kind, targets: targets.length, quorum, recovered: recovered?.at ?? null }, recovered ? 'refit taken over' : 'refit started');
    this.deps.events.publish(id, { type: 'started', replica: this.deps.replicaId, targets: targets.map((w) => w.id), quorum, steps: plan.steps.map((st) => st.name), verify: plan.verify !== null, recovered: recovered?.at ?? null });

    // Loads sent by a runner that died, whose answers are lost: the version check after the
    // takeover finds out which landed, and one that did not is loaded again (leg-recovery.ts).
    const doubtful = new Set(recovered && j.phase === 'refit' && plan.verify && repeatable(plan.steps, j.step_index) ? j.pending : []);
    const doubtfulStep = j.step_index;
    /** Engines loaded again during the version check: one whose check still fails is quarantined. */
    const reloaded = new Set<string>();
    /** When each phase (and refit step) was sent (`phase|stepIndex`): a cut leg's time counts from it. */
    const phaseSent = new Map<string, number>();

    const runPhase = fromCallback<CoordinatorEvent, PhaseInput>(({ input, sendBack }) => {
      const abort = new AbortController();
      const answered = new Set<string>();
      const recovering: Array<Promise<void>> = [];
      phaseStarted.set(input.phase, phaseStarted.get(input.phase) ?? performance.now());
      const step = input.phase === 'refit' ? (plan.steps[input.stepIndex]?.name ?? null) : null;
      const phaseStartedAt = Date.now();
      phaseSent.set(`${input.phase}|${input.stepIndex}`, phaseStartedAt);
      this.deps.events.publish(id, { type: 'phase', phase: input.phase, step, step_index: input.stepIndex, steps: plan.steps.length, targets: input.targets });
      // Engines given the same spec share one call object, so it crosses the bus once per replica.
      // Each call's deadline starts now, when its phase sends it: stamped when the refit was
      // planned, a slow pause and load would eat the resume's budget.
      void (async () => {
        // The journal says which engines this phase reaches before any call goes out.
        await retry(() => writer.update({ phase: input.phase, step_index: input.stepIndex, pending: input.targets }), () => writer.fenced || abort.signal.aborted);
        if (writer.fenced || abort.signal.aborted) return;
        const sentAt = Date.now();
        const stamped = new Map<ControlCall, ControlCall>();
        const stamp = (call: ControlCall): ControlCall => {
          let fresh = stamped.get(call);
          if (!fresh) stamped.set(call, (fresh = { ...call, deadline: sentAt + call.timeoutSecs * 1000 }));
          return fresh;
        };
        const legs = input.targets.map((wid) => ({ worker: byId.get(wid)!, call: stamp(calls.get(callKey(input.phase, input.stepIndex, wid))!) }));
        // A collective step (joining the group, a broadcast chunk) completes only when every
        // engine is in it: all its legs go at once, whatever the fan-out concurrency.
        const collective = input.phase === 'refit' && plan.steps[input.stepIndex]?.collective === true;
        const concurrency = collective ? legs.length : undefined;
        // What one leg's outcome comes to: the coordinator hears it, watchers see it.
        const settle = (wid: string, outcome: ControlOutcome): void => {
          if (abort.signal.aborted) return;
          const done = (result: LegResult) => {
            if (abort.signal.aborted) return;
            answered.add(wid);
            sendBack({ type: 'leg.done', phase: input.phase, workerId: wid, result });
            this.publishLeg(id, byId.get(wid)?.url ?? wid, wid, input.phase, input.stepIndex, step, result, Date.now());
          };
          const expected = input.phase === 'refit' ? plan.expect?.(input.stepIndex) : undefined;
          const worker = byId.get(wid)!;
          // A pause, a version check or a resume whose answer was lost (its owner died or lost
          // its lease) is sent again, within the phase's deadline: each leaves the engine as one
          // call would (pausing a paused engine, or resuming a serving one, changes nothing).
          if (input.phase !== 'refit' && answerLost(outcome)) {
            const call = stamp(calls.get(callKey(input.phase, input.stepIndex, wid))!);
            if (Date.now() + 250 < call.deadline) {
              this.deps.log.warn({ refit_id: id, worker_id: wid, phase: input.phase }, 'a call\'s answer was lost with the replica that made it; sending it again');
              recovering.push(
                this.callMade(worker, () => call, call.deadline, abort.signal)
                  .catch((err: unknown): ControlOutcome => ({ kind: 'unreachable', latencyMs: 0, message: String((err as Error)?.message ?? err) }))
                  .then((again) => settle(wid, again)),
              );
              return;
            }
          }
          // The answer was lost with the replica that made the call: read the engine first. A
          // step safe to repeat is sent again if it did not land; a collective step cannot be
          // taken again by one engine (the others wait on it), so it is judged on what it holds.
          if (input.phase === 'refit' && answerLost(outcome)) {
            const load = stamp(calls.get(callKey('refit', input.stepIndex, wid))!);
            const how = { canRepeat: repeatable(plan.steps, input.stepIndex), setsVersion: setsVersion(plan.steps, input.stepIndex) };
            recovering.push(
              this.recoverLostLoad(worker, load, outcome, req.weight_version, expected, d.verifyMs, how, abort.signal)
                .catch((err: unknown) => recoveryFailed(err, outcome.latencyMs))
                .then(done),
            );
            return;
          }
          const result = legResult(input.phase, outcome, req.weight_version, expected);
          if (input.phase === 'verify' && doubtful.has(wid) && versionMismatch(result)) {
            doubtful.delete(wid);
            const load = calls.get(callKey('refit', doubtfulStep, wid))!;
            const check = calls.get(callKey('verify', 0, wid))!;
            reloaded.add(wid);
            recovering.push(
              this.reloadAndVerify(worker, load, check, result, req.weight_version, abort.signal)
                .catch((err: unknown) => recoveryFailed(err, result.latencyMs))
                .then(done),
            );
            return;
          }
          done(result);
        };
        await this.deps.legs
          .runLegs(
            legs,
            abort.signal,
            (wid, first) => {
              // The phase is over (a deadline cut it): the coordinator has judged this leg, and
              // the cleanup below published that verdict; a late answer changes neither.
              if (abort.signal.aborted) return;
              // Refused without being sent while the owner's lease fence was closed (a NATS
              // stall, a replica proving its lease again): sent again until its deadline.
              if (notMade(first)) {
                const call = stamp(calls.get(callKey(input.phase, input.stepIndex, wid))!);
                recovering.push(
                  this.callMade(byId.get(wid)!, () => call, call.deadline, abort.signal)
                    .catch((err: unknown): ControlOutcome => ({ kind: 'unreachable', latencyMs: 0, message: String((err as Error)?.message ?? err) }))
                    .then((outcome) => settle(wid, outcome)),
                );
                return;
              }
              settle(wid, first);
            },
            concurrency,
          )
          .catch((err: unknown) => {
            // Never leave the coordinator waiting: an unexpected failure fails the phase's legs.
            this.deps.log.error({ err, refit_id: id, phase: input.phase }, 'refit phase failed unexpectedly');
            const now = Date.now();
            for (const wid of input.targets) {
              const result: LegResult = { ok: false, error: 'internal_error', message: 'the gateway failed to run this phase', latencyMs: 0 };
              sendBack({ type: 'leg.done', phase: input.phase, workerId: wid, result });
              // Watchers see what the coordinator was told, as they see every answer.
              if (!answered.has(wid) && !abort.signal.aborted) this.publishLeg(id, byId.get(wid)?.url ?? wid, wid, input.phase, input.stepIndex, step, { ...result, latencyMs: now - phaseStartedAt }, now);
            }
          });
        // A leg sent again may need its engine read in turn: wait until none is left in flight.
        while (recovering.length > 0) await Promise.all(recovering.splice(0));
        if (!abort.signal.aborted) sendBack({ type: 'phase.done' });

      })();
      return () => {
        abort.abort();
        phaseMs[input.phase] = Math.round(performance.now() - (phaseStarted.get(input.phase) ?? performance.now()));
      };
    });

    const actor = createActor(coordinatorMachine.provide({ actors: { runPhase } }), {
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
    // Legs the coordinator judged without their answer (a deadline cut them, or a failed
    // collective) get their event with its verdict when it decides, so watchers see what the
    // report will say; an answer that comes later is dropped by the aborted phase.
    const publishCut = (phase: Phase, stepIndex: number, legs: CutLeg[]) => {
      const now = Date.now();
      const from = phaseSent.get(`${phase}|${stepIndex}`) ?? now;
      const step = phase === 'refit' ? (plan.steps[stepIndex]?.name ?? null) : null;
      for (const leg of legs) {
        this.publishLeg(id, byId.get(leg.workerId)?.url ?? leg.workerId, leg.workerId, phase, stepIndex, step, { ok: false, error: leg.error, message: leg.message, latencyMs: now - from }, now);
      }
    };
    actor.on('legs.cut', (e) => publishCut(e.phase, e.stepIndex, e.legs));
    actor.on('transfer.aborted', (e) => publishCut('refit', e.stepIndex, e.legs));
    // Each answer is journaled as it comes (writes in one burst travel together).
    actor.subscribe((snap) => {
      const c = snap.context;
      if (writer.fenced) return;
      writer.update({ engines: c.engines, paused: c.paused, resumed: c.resumed, pending: c.pending, abort_reason: c.abortReason }).catch(() => {});
    });
    let fenced = false;
    let stopped: (v: null) => void = () => {};
    const whenStopped = new Promise<null>((r) => (stopped = r));
    onActor(() => {
      fenced = true;
      actor.stop();
      stopped(null);
    });
    actor.start();
    // A stopped actor never settles its promise: the fence resolves the race instead.
    const result = await Promise.race([toPromise(actor).catch(() => null), whenStopped]);
    if (fenced || !result) {
      this.deps.log.warn({ refit_id: id }, 'another replica took this refit over; it finishes it');
      return null;
    }
    await Promise.all(owing.map((wid) => this.deps.owed.settle(wid, result.resumed.includes(wid), id)));
    // Quarantined, or let out, as the result says (verdicts.ts).
    const verdicts = quarantineAfter(result, targets.map((w) => w.id), { verify: plan.verify !== null, reloaded });
    for (const [wid, reason] of verdicts) this.deps.quarantine(wid, reason);
    // An engine that failed once its weights were touched is reported with the version it says it
    // holds now, read from it: this replica's view may be stale (another replica's engine, a load
    // whose answer was lost, a transfer abandoned half-way).
    const touched = targets.filter((w) => result.engines[w.id]?.failedIn === 'refit' || result.engines[w.id]?.failedIn === 'verify');
    const held = await this.readVersions(touched, id);
    return buildReport({
      id,
      request: req,
      selector: q.selector,
      targets,
      asleep,
      result,
      held,
      phaseMs,
      startedAt: recovered ? new Date(j.submitted_at) : startedAt,
      finishedAt: new Date(),
      view: this.deps.view,
      group: plan.group,
      skipped: q.skipped ?? [],
    });
  }

  /**
   * A load whose answer was lost with the replica that made it (leg-recovery.ts): once the engine
   * has a live owner, its version is read; it landed, or it is sent again when that is safe, or
   * it is reported with what the engine holds.
   */
  private async recoverLostLoad(
    worker: Worker,
    load: ControlCall,
    lost: ControlOutcome,
    target: string,
    expected: ReadonlyArray<number | null> | undefined,
    readMs: number,
    how: { canRepeat: boolean; setsVersion: boolean },
    signal: AbortSignal,
  ): Promise<LegResult> {
    const read = await this.callMade(worker, () => this.versionRead(readMs, load.refitId), load.deadline, signal);
    const verdict = lostAnswerVerdict(lost, read, target, how.canRepeat, how.setsVersion);
    this.deps.log.warn({ refit_id: load.refitId, worker_id: worker.id, verdict: verdict.kind }, 'a load\'s answer was lost with the replica that made the call; the engine was read');
    if (verdict.kind === 'landed') return { ok: true, status: 200, message: 'the answer was lost with the replica that made the call; the engine was read afterwards and holds the target version', latencyMs: lost.latencyMs };
    if (verdict.kind === 'failed') return verdict.result;
    const again = await this.callMade(worker, () => fresh(load), load.deadline, signal);
    return legResult('refit', again, target, expected);
  }

  /**
   * One call, made once the engine can be called: while its owner is being replaced, or its
   * owner's fence is closed (the lease lapsed and is being proven again), a call is not made at
   * all (notMade: fenced, `no_owner`, `not_owner`), and is tried again every 250 ms until the
   * deadline. What was made is the answer, whatever it says.
   */
  private async callMade(worker: Worker, call: () => ControlCall, deadline: number, signal: AbortSignal): Promise<ControlOutcome> {
    for (;;) {
      const out = await this.callOne(worker, call(), signal);
      // A replica shutting down does not wait for a fence to reopen: the refit ends with what it has.
      if (!notMade(out) || signal.aborted || this.closing || Date.now() + 250 >= deadline) return out;
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** A load in doubt after a takeover that did not land (its version check failed): loaded again, checked again. */
  private async reloadAndVerify(worker: Worker, load: ControlCall, check: ControlCall, first: LegResult, target: string, signal: AbortSignal): Promise<LegResult> {
    this.deps.log.warn({ refit_id: load.refitId, worker_id: worker.id }, 'a load in doubt after a takeover had not landed; sending it again');
    const reload = fresh(load);
    const loaded = legResult('refit', await this.callMade(worker, () => reload, reload.deadline, signal), target);
    if (!loaded.ok) return { ...first, message: `${first.message}; the load, in doubt after a takeover, was sent again and failed: ${loaded.message ?? loaded.error}` };
    const recheck = fresh(check);
    return legResult('verify', await this.callMade(worker, () => recheck, recheck.deadline, signal), target);
  }

  private async callOne(worker: Worker, call: ControlCall, signal: AbortSignal): Promise<ControlOutcome> {
    const out = await this.deps.legs.runLegs([{ worker, call }], signal);
    return out.get(worker.id) ?? { kind: 'unreachable', latencyMs: 0, message: `upstream \`${worker.url}\` was not called` };
  }

  /** `GET model_info`: the engine's own word on the version it holds. */
  private versionRead(readMs: number, refitId: string | undefined): ControlCall {
    const call = this.deps.legs.callFor('model_info', { method: 'GET', rawQuery: '', body: null, contentType: undefined, trace: { 'x-request-id': `refit-${refitId ?? 'unknown'}-read` } });
    const timeoutSecs = Math.max(1, Math.ceil(readMs / 1000));
    return { ...call, refitId, timeoutSecs, deadline: Date.now() + timeoutSecs * 1000 };
  }

  /** Each engine's weight version as it reports it now (absent where it cannot be read within 2 s). */
  private async readVersions(workers: readonly Worker[], refitId: string): Promise<Map<string, string>> {
    const held = new Map<string, string>();
    const signal = AbortSignal.timeout(READ_BACK_MS);
    await Promise.all(workers.map(async (w) => {
      const out = await this.callMade(w, () => this.versionRead(READ_BACK_MS, refitId), Date.now() + READ_BACK_MS, signal).catch(() => undefined);
      const v = out && reportedVersion(out);
      if (v !== undefined) held.set(w.id, v);
    }));
    return held;
  }

  /** The report goes to the journal first (the one place a trainer can always read it), then out. */
  private async finish(writer: JournalWriter, report: RefitReport): Promise<void> {
    await retry(() => writer.update({ status: 'done', report, pending: [] }), () => writer.fenced);
    if (writer.fenced) return;
    this.deps.metrics.refit(report.status, report.phases);
    this.deps.events.report(report);
    this.deps.log.info({ refit_id: report.id, status: report.status, succeeded: report.succeeded, total: report.total, duration_ms: report.duration_ms }, 'refit finished');
  }

  /** A `leg` event: what one engine's call in a phase came to, as the report will say it. */
  private publishLeg(id: string, url: string, wid: string, phase: Phase, stepIndex: number, step: string | null, result: LegResult, finished: number): void {
    this.deps.events.publish(id, {
      type: 'leg',
      worker_id: wid,
      url,
      phase,
      step,
      step_index: stepIndex,
      outcome: result.ok ? 'ok' : 'failed',
      ...(result.ok ? {} : { error: result.error }),
      ...(result.status !== undefined ? { status: result.status } : {}),
      ...(result.message !== undefined ? { message: result.message } : {}),
      latency_ms: Math.round(result.latencyMs),
      started_at: new Date(finished - result.latencyMs).toISOString(),
      finished_at: new Date(finished).toISOString(),
    });
  }
}

/** A recovery that threw: the leg fails, the phase goes on. */
function recoveryFailed(err: unknown, latencyMs: number): LegResult {
  return { ok: false, error: 'internal_error', message: `the gateway failed to read the engine after a lost answer: ${String((err as Error)?.message ?? err)}`, latencyMs };
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

/** Retries `fn` until it succeeds or `stop()` says to give up (the bus may be down for a while). */
async function retry(fn: () => Promise<unknown>, stop: () => boolean): Promise<void> {
  for (;;) {
    try {
      await fn();
      return;
    } catch (err) {
      if (err instanceof JournalFenced || stop()) return;
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}

function renameDeadlines(d: RefitRequest['deadlines_ms']): Partial<RefitDefaults> {
  const out: Partial<RefitDefaults> = {};
  if (d?.pause) out.pauseMs = d.pause;
  if (d?.refit) out.refitMs = d.refit;
  if (d?.verify) out.verifyMs = d.verify;
  if (d?.resume) out.resumeMs = d.resume;
  return out;
}
