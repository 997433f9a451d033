// The coordinator's `runPhase` for one refit: each refit step is journaled before its calls go
// out (the other phases as theirs go: `durableBefore`), its legs run through `LegRunner.runLegs`
// (in-process for this replica's engines, over NATS to the others' owners), and the answers come
// back to the coordinator (`legs.done`, those of one turn together) and to watchers as `leg`
// events. A call refused before it left is sent again; an answer lost with the replica that made
// the call is recovered (the engine read, the call sent again where that is safe:
// leg-recovery.ts). It never decides a phase's outcome: the coordinator does, and what it cuts
// without an answer comes back here (`cut`) to be published.

import { fromCallback } from 'xstate';
import type { CoordinatorEvent, CutLeg, LegResult, PhaseInput } from '../../actors/coordinator.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import { callKey, fresh } from './calls.ts';
import { answersDurable, durableBefore, retryWrite, type JournalWriter } from './journal.ts';
import type { LegCalls } from './leg-calls.ts';
import { answerLost, lostAnswerVerdict, notMade, repeatable, setsVersion, versionMismatch } from './leg-recovery.ts';
import type { RefitPlan } from './plan.ts';
import type { RefitPublisher } from './publisher.ts';
import { legResult } from './verdicts.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { Phase } from '../wire/refit-phase.ts';

/** The refit whose phases run here. */
export interface PhaseRefit {
  id: string;
  plan: RefitPlan;
  /** Every call of every phase, by `callKey` (calls.ts). */
  calls: Map<string, ControlCall>;
  /** The engines that take part (asleep ones left out). */
  targets: Worker[];
  writer: JournalWriter;
  /** The weight version the refit brings. */
  version: string;
  /** How long reading an engine's version may take after a lost answer (the verify deadline). */
  readMs: number;
  /** Taken over from a replica that died (its journal tells what may be in doubt). */
  recovered: boolean;
}

/** One invocation of `runPhase`: a phase, or one refit step, on its targets. */
interface Run {
  input: PhaseInput;
  sendBack: (event: CoordinatorEvent) => void;
  /** Aborted when the coordinator leaves the phase: nothing of it is heard after that. */
  abort: AbortController;
  /** Legs whose result the coordinator was sent. */
  answered: Set<string>;
  /** Legs sent again, or whose engine is read, after their first outcome. */
  recovering: Array<Promise<void>>;
  step: string | null;
  startedAt: number;
  /** A prepared call with its deadline counted from when this phase sent it. */
  stamp: (call: ControlCall) => ControlCall;
  /** Answers not yet handed to the coordinator: those of one turn go as one `legs.done`. */
  batch: Array<{ workerId: string; result: LegResult }>;
  /** A collective step's answers go one by one: the first failure ends the step for all. */
  oneByOne: boolean;
}

export class PhaseRunner {
  /** The coordinator's `runPhase` implementation. */
  readonly runPhase;
  /** Each phase's wall time, for the report. */
  readonly phaseMs: Partial<Record<Phase, number>> = {};
  /** Engines loaded again during the version check: one whose check still fails is quarantined. */
  readonly reloaded = new Set<string>();
  /** Per engine: when its pause was sent and when its resume was answered (ms since the epoch). */
  private readonly paused = new Map<string, { from?: number; to?: number }>();
  private readonly phaseStarted = new Map<Phase, number>();
  /** When each phase (and refit step) was sent (`phase|stepIndex`): a cut leg's time counts from it. */
  private readonly phaseSent = new Map<string, number>();
  private readonly byId: Map<string, Worker>;
  /**
   * Loads sent by a runner that died, whose answers are lost: the version check after the
   * takeover finds out which landed, and one that did not is loaded again (leg-recovery.ts).
   */
  private readonly doubtful: Set<string>;
  private readonly doubtfulStep: number;

  constructor(
    private readonly deps: { legs: LegRunner; calls: LegCalls; events: RefitPublisher; log: Logger },
    private readonly refit: PhaseRefit,
  ) {
    const { plan, writer } = refit;
    const j = writer.journal;
    this.byId = new Map(refit.targets.map((w) => [w.id, w]));
    this.doubtful = new Set(refit.recovered && j.phase === 'refit' && plan.verify && repeatable(plan.steps, j.step_index) ? j.pending : []);
    this.doubtfulStep = j.step_index;
    this.runPhase = fromCallback<CoordinatorEvent, PhaseInput>(({ input, sendBack }) => this.start(input, sendBack));
  }

  /**
   * Legs the coordinator judged without their answer (a deadline cut them, or a failed
   * collective) get their event with its verdict when it decides, so watchers see what the
   * report will say; an answer that comes later is dropped by the aborted phase.
   */
  cut(phase: Phase, stepIndex: number, legs: CutLeg[]): void {
    const now = Date.now();
    const from = this.phaseSent.get(`${phase}|${stepIndex}`) ?? now;
    const step = phase === 'refit' ? (this.refit.plan.steps[stepIndex]?.name ?? null) : null;
    for (const leg of legs)
      this.publishLeg(leg.workerId, phase, stepIndex, step, { ok: false, error: leg.error, message: leg.message, latencyMs: now - from }, now);
  }

  private start(input: PhaseInput, sendBack: (event: CoordinatorEvent) => void): () => void {
    const { id, plan } = this.refit;
    this.phaseStarted.set(input.phase, this.phaseStarted.get(input.phase) ?? performance.now());
    const step = input.phase === 'refit' ? (plan.steps[input.stepIndex]?.name ?? null) : null;
    const startedAt = Date.now();
    this.phaseSent.set(`${input.phase}|${input.stepIndex}`, startedAt);
    this.deps.events.publish(id, { type: 'phase', phase: input.phase, step, step_index: input.stepIndex, steps: plan.steps.length, targets: input.targets });
    const abort = new AbortController();
    // `stamp` counts from when the phase is sent, once its journal write has landed (send()).
    const oneByOne = input.phase === 'refit' && plan.steps[input.stepIndex]?.collective === true;
    void this.send({ input, sendBack, abort, answered: new Set(), recovering: [], step, startedAt, stamp: (call) => call, batch: [], oneByOne });
    return () => {
      abort.abort();
      this.phaseMs[input.phase] = Math.round(performance.now() - (this.phaseStarted.get(input.phase) ?? performance.now()));
    };
  }

  /** Journals the phase, then sends its legs, and says `phase.done` once every leg is settled. */
  private async send(run: Run): Promise<void> {
    const { input, abort, sendBack } = run;
    const { id, plan, calls, writer } = this.refit;
    // A refit step is in the bucket before any of its calls goes out: a takeover that read an
    // earlier phase would load again. Any other phase's write goes with its calls: a takeover from
    // the journal as it stood before it goes on as it would after (journal.ts, `durableBefore`).
    const patch = { phase: input.phase, step_index: input.stepIndex, pending: input.targets };
    if (durableBefore(input.phase, writer.journal.phase))
      await retryWrite(
        () => writer.update(patch),
        () => writer.fenced || abort.signal.aborted,
      );
    else writer.update(patch).catch(() => {}); // a failed write is carried by the next one
    if (writer.fenced || abort.signal.aborted) return;
    // Engines given the same spec share one call object, so it crosses the bus once per replica.
    // Each call's deadline starts now, when its phase sends it: stamped when the refit was
    // planned, a slow pause and load would eat the resume's budget.
    const sentAt = Date.now();
    const stamped = new Map<ControlCall, ControlCall>();
    run.stamp = (call) => {
      let fresh = stamped.get(call);
      if (!fresh) stamped.set(call, (fresh = { ...call, deadline: sentAt + call.timeoutSecs * 1000 }));
      return fresh;
    };
    const legs = input.targets.map((wid) => ({ worker: this.byId.get(wid)!, call: run.stamp(calls.get(callKey(input.phase, input.stepIndex, wid))!) }));
    // A collective step (joining the group, a broadcast chunk) completes only when every
    // engine is in it: all its legs go at once, whatever the fan-out concurrency.
    const collective = input.phase === 'refit' && plan.steps[input.stepIndex]?.collective === true;
    const concurrency = collective ? legs.length : undefined;
    await this.deps.legs
      .runLegs(legs, abort.signal, (wid, first) => this.first(run, wid, first), concurrency)
      .catch((err: unknown) => {
        // Never leave the coordinator waiting: an unexpected failure fails the phase's legs.
        this.deps.log.error({ err, refit_id: id, phase: input.phase }, 'refit phase failed unexpectedly');
        this.flush(run); // the answers heard so far come first
        const now = Date.now();
        for (const wid of input.targets) {
          const result: LegResult = { ok: false, error: 'internal_error', message: 'the gateway failed to run this phase', latencyMs: 0 };
          sendBack({ type: 'leg.done', phase: input.phase, workerId: wid, result });
          // Watchers see what the coordinator was told, as they see every answer.
          if (!run.answered.has(wid) && !abort.signal.aborted)
            this.publishLeg(wid, input.phase, input.stepIndex, run.step, { ...result, latencyMs: now - run.startedAt }, now);
        }
      });
    // A leg sent again may need its engine read in turn: wait until none is left in flight.
    while (run.recovering.length > 0) await Promise.all(run.recovering.splice(0));
    // A takeover may judge this step's engines by what the journal says of their answers.
    if (input.phase === 'refit' && answersDurable(plan.steps[input.stepIndex], plan.verify !== null))
      await retryWrite(
        () => writer.durable(),
        () => writer.fenced || abort.signal.aborted,
      );
    if (abort.signal.aborted) return;
    this.flush(run);
    sendBack({ type: 'phase.done' });
  }

  /** Hands the coordinator the answers gathered since the last flush, as one event. */
  private flush(run: Run): void {
    if (run.batch.length === 0 || run.abort.signal.aborted) return;
    run.sendBack({ type: 'legs.done', phase: run.input.phase, legs: run.batch.splice(0) });
  }

  /** A leg's first outcome, as `runLegs` hands it. */
  private first(run: Run, wid: string, first: ControlOutcome): void {
    const { input, abort } = run;
    // The phase is over (a deadline cut it): the coordinator has judged this leg, and `cut`
    // published that verdict; a late answer changes neither.
    if (abort.signal.aborted) return;
    // Refused without being sent while the owner's lease fence was closed (a NATS stall, a
    // replica proving its lease again): sent again until its deadline.
    if (notMade(first)) return this.sendAgain(run, wid, run.stamp(this.refit.calls.get(callKey(input.phase, input.stepIndex, wid))!));
    this.settle(run, wid, first);
  }

  /** What one leg's outcome comes to: the coordinator hears it, watchers see it. */
  private settle(run: Run, wid: string, outcome: ControlOutcome): void {
    const { input, abort } = run;
    const { id, plan, calls, version } = this.refit;
    if (abort.signal.aborted) return;
    const done = (result: LegResult) => this.done(run, wid, result);
    const expected = input.phase === 'refit' ? plan.expect?.(input.stepIndex) : undefined;
    const worker = this.byId.get(wid)!;
    // A pause, a version check or a resume whose answer was lost (its owner died or lost its
    // lease) is sent again, within the phase's deadline: each leaves the engine as one call
    // would (pausing a paused engine, or resuming a serving one, changes nothing).
    if (input.phase !== 'refit' && answerLost(outcome)) {
      const call = run.stamp(calls.get(callKey(input.phase, input.stepIndex, wid))!);
      if (Date.now() + 250 < call.deadline) {
        this.deps.log.warn({ refit_id: id, worker_id: wid, phase: input.phase }, "a call's answer was lost with the replica that made it; sending it again");
        return this.sendAgain(run, wid, call);
      }
    }
    // The answer was lost with the replica that made the call: read the engine first. A step
    // safe to repeat is sent again if it did not land; a collective step cannot be taken again
    // by one engine (the others wait on it), so it is judged on what it holds.
    if (input.phase === 'refit' && answerLost(outcome)) {
      const load = run.stamp(calls.get(callKey('refit', input.stepIndex, wid))!);
      const how = { canRepeat: repeatable(plan.steps, input.stepIndex), setsVersion: setsVersion(plan.steps, input.stepIndex) };
      run.recovering.push(
        this.recoverLostLoad(worker, load, outcome, expected, how, abort.signal)
          .catch((err: unknown) => recoveryFailed(err, outcome.latencyMs))
          .then(done),
      );
      return;
    }
    const result = legResult(input.phase, outcome, version, expected);
    if (input.phase === 'verify' && this.doubtful.has(wid) && versionMismatch(result)) {
      this.doubtful.delete(wid);
      const load = calls.get(callKey('refit', this.doubtfulStep, wid))!;
      const check = calls.get(callKey('verify', 0, wid))!;
      this.reloaded.add(wid);
      run.recovering.push(
        this.reloadAndVerify(worker, load, check, result, abort.signal)
          .catch((err: unknown) => recoveryFailed(err, result.latencyMs))
          .then(done),
      );
      return;
    }
    done(result);
  }

  /** The leg's call sent again (made once it can be), its outcome settled in turn. */
  private sendAgain(run: Run, wid: string, call: ControlCall): void {
    run.recovering.push(
      this.deps.calls
        .made(this.byId.get(wid)!, () => call, call.deadline, run.abort.signal)
        .catch((err: unknown): ControlOutcome => ({ kind: 'unreachable', latencyMs: 0, message: String((err as Error)?.message ?? err) }))
        .then((outcome) => this.settle(run, wid, outcome)),
    );
  }

  private done(run: Run, wid: string, result: LegResult): void {
    if (run.abort.signal.aborted) return;
    run.answered.add(wid);
    if (run.oneByOne) run.sendBack({ type: 'leg.done', phase: run.input.phase, workerId: wid, result });
    else {
      // Answers that land in one turn of the event loop reach the coordinator together.
      if (run.batch.length === 0) setImmediate(() => this.flush(run));
      run.batch.push({ workerId: wid, result });
    }
    this.publishLeg(wid, run.input.phase, run.input.stepIndex, run.step, result, Date.now());
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
    expected: ReadonlyArray<number | null> | undefined,
    how: { canRepeat: boolean; setsVersion: boolean },
    signal: AbortSignal,
  ): Promise<LegResult> {
    const { calls, log } = this.deps;
    const target = this.refit.version;
    const read = await calls.made(worker, () => calls.versionRead(this.refit.readMs, load.refitId), load.deadline, signal);
    const verdict = lostAnswerVerdict(lost, read, target, how.canRepeat, how.setsVersion);
    log.warn(
      { refit_id: load.refitId, worker_id: worker.id, verdict: verdict.kind },
      "a load's answer was lost with the replica that made the call; the engine was read",
    );
    if (verdict.kind === 'landed')
      return {
        ok: true,
        status: 200,
        message: 'the answer was lost with the replica that made the call; the engine was read afterwards and holds the target version',
        latencyMs: lost.latencyMs,
      };
    if (verdict.kind === 'failed') return verdict.result;
    const again = await calls.made(worker, () => fresh(load), load.deadline, signal);
    return legResult('refit', again, target, expected);
  }

  /** A load in doubt after a takeover that did not land (its version check failed): loaded again, checked again. */
  private async reloadAndVerify(worker: Worker, load: ControlCall, check: ControlCall, first: LegResult, signal: AbortSignal): Promise<LegResult> {
    const { calls, log } = this.deps;
    const target = this.refit.version;
    log.warn({ refit_id: load.refitId, worker_id: worker.id }, 'a load in doubt after a takeover had not landed; sending it again');
    const reload = fresh(load);
    const loaded = legResult('refit', await calls.made(worker, () => reload, reload.deadline, signal), target);
    if (!loaded.ok)
      return { ...first, message: `${first.message}; the load, in doubt after a takeover, was sent again and failed: ${loaded.message ?? loaded.error}` };
    const recheck = fresh(check);
    return legResult('verify', await calls.made(worker, () => recheck, recheck.deadline, signal), target);
  }

  /**
   * Engine-milliseconds the engines were held: each engine's pause sent to its resume answered
   * (engines whose pause or resume did not succeed are not counted).
   */
  downtimeMs(): number {
    let ms = 0;
    for (const { from, to } of this.paused.values()) if (from !== undefined && to !== undefined && to >= from) ms += to - from;
    return Math.round(ms);
  }

  /** A `leg` event: what one engine's call in a phase came to, as the report will say it. */
  private publishLeg(wid: string, phase: Phase, stepIndex: number, step: string | null, result: LegResult, finished: number): void {
    if (result.ok && (phase === 'pause' || phase === 'resume')) {
      const w = this.paused.get(wid) ?? {};
      if (phase === 'pause') w.from ??= finished - result.latencyMs;
      else w.to = finished;
      this.paused.set(wid, w);
    }
    this.deps.events.publish(this.refit.id, {
      type: 'leg',
      worker_id: wid,
      url: this.byId.get(wid)?.url ?? wid,
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
  return {
    ok: false,
    error: 'internal_error',
    message: `the gateway failed to read the engine after a lost answer: ${String((err as Error)?.message ?? err)}`,
    latencyMs,
  };
}
