// The refit coordinator machine on its own: phase deadlines, the quorum gate, the pause grace
// period, the cleanup of an abandoned distributed transfer, the guaranteed resume, verify
// failures, taken-over refits (`recovered`) and the result's lists. The machine is the real one;
// only its injected side effect, `runPhase`, is a scripted stand-in that answers each leg after
// its `latencyMs` on XState's simulated clock, and says `phase.done` once every leg answered
// (as the runner does). Time only moves when a test moves it, from one due timer to the next.

import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, SimulatedClock, toPromise } from 'xstate';
import {
  coordinatorMachine,
  type CoordinatorContext,
  type CoordinatorEmitted,
  type CoordinatorEvent,
  type CoordinatorInput,
  type LegResult,
  type PhaseInput,
  type RefitStepPlan,
} from '../../actors/coordinator.ts';
import { quorumOf } from '../../src/refit/verdicts.ts';
import type { RefitRequest } from '../../src/wire/refit-request.ts';
import type { Phase } from '../../src/wire/refit-phase.ts';

const TARGETS = ['e1', 'e2', 'e3'];
const DEADLINES = { pauseMs: 1_000, refitMs: 3_000, verifyMs: 1_000, resumeMs: 1_000 };
const GRACE_MS = 500;

const DISK: RefitStepPlan[] = [{ name: 'update_weights_from_disk', runOn: 'remaining' }];
const CHUNK_1 = 'update_weights_from_distributed 1/2';
const CHUNK_2 = 'update_weights_from_distributed 2/2';
const DESTROY = 'destroy_weights_update_group';
// The shape plan.ts gives a two-chunk NCCL refit (its own table tests cover the names).
const DISTRIBUTED: RefitStepPlan[] = [
  { name: 'init_weights_update_group', runOn: 'remaining', collective: true },
  { name: CHUNK_1, runOn: 'remaining', collective: true },
  { name: CHUNK_2, runOn: 'remaining', collective: true },
  { name: DESTROY, runOn: 'joined' },
];
const KEEP_GROUP = DISTRIBUTED.slice(0, -1);

/** A leg's scripted answer, sent `latencyMs` after its phase starts; `hang` never answers. */
type Leg = LegResult | 'hang';

/** One invocation of `runPhase`: what the machine asked for, and when (simulated ms). */
interface Call {
  phase: Phase;
  stepIndex: number;
  step?: string;
  targets: string[];
  at: number;
}

/** Per invocation, the answers of the engines that do not simply succeed after 10 ms. */
type Script = (call: Call) => Record<string, Leg | undefined> | undefined;

/** XState's simulated clock, able to jump straight to its next due timer. */
class SteppedClock extends SimulatedClock {
  private readonly due = new Map<number, number>();

  override setTimeout(fn: (...args: unknown[]) => void, timeout: number): number {
    const id: number = super.setTimeout(() => {
      this.due.delete(id);
      fn();
    }, timeout);
    this.due.set(id, this.now() + timeout);
    return id;
  }

  override clearTimeout(id: number): void {
    this.due.delete(id);
    super.clearTimeout(id);
  }

  /** Fires every timer due up to `until`, in time order, and leaves the clock there. */
  runUntil(until: number): void {
    for (;;) {
      const next = Math.min(...this.due.values());
      if (!(next <= until)) break;
      this.set(Math.max(next, this.now()));
    }
    if (until > this.now()) this.set(until);
  }

  /** The time of the next due timer, if any. */
  nextDue(): number | undefined {
    return this.due.size > 0 ? Math.min(...this.due.values()) : undefined;
  }
}

const ok = (latencyMs = 10): LegResult => ({ ok: true, status: 200, latencyMs });
const fail = (error: string, more: Partial<LegResult> = {}): LegResult => ({ ok: false, error, latencyMs: 10, ...more });

function start(over: Partial<CoordinatorInput> = {}, script: Script = () => undefined) {
  const clock = new SteppedClock();
  const calls: Call[] = [];
  const input: CoordinatorInput = {
    refitId: 'r1',
    targets: TARGETS,
    steps: DISK,
    verify: true,
    quorum: 1,
    keepPaused: [],
    deadlines: DEADLINES,
    graceMs: GRACE_MS,
    ...over,
  };
  const runPhase = fromCallback<CoordinatorEvent, PhaseInput>(({ input: p, sendBack }) => {
    const call: Call = { phase: p.phase, stepIndex: p.stepIndex, targets: [...p.targets], at: clock.now() };
    if (p.phase === 'refit') call.step = input.steps[p.stepIndex]?.name;
    calls.push(call);
    const legs = script(call) ?? {};
    const timers: number[] = [];
    let left = p.targets.length;
    if (left === 0) timers.push(clock.setTimeout(() => sendBack({ type: 'phase.done' }), 0));
    for (const id of p.targets) {
      const leg = legs[id] ?? ok();
      if (leg === 'hang') continue;
      timers.push(
        clock.setTimeout(() => {
          sendBack({ type: 'leg.done', phase: p.phase, workerId: id, result: leg });
          if (--left === 0) sendBack({ type: 'phase.done' });
        }, leg.latencyMs),
      );
    }
    // Leaving the phase stops its runner, which cancels the legs still out (as the runner does).
    return () => timers.forEach((t) => clock.clearTimeout(t));
  });
  const actor = createActor(coordinatorMachine.provide({ actors: { runPhase } }), { clock, input });
  const result = toPromise(actor);
  actor.start();
  const advance = (ms: number) => clock.runUntil(clock.now() + ms);
  /** Moves time from timer to timer until the machine is done (at most 20 s of simulated time). */
  const finish = async (): Promise<CoordinatorContext> => {
    for (let next = clock.nextDue(); actor.getSnapshot().status === 'active' && next !== undefined && next <= 20_000; next = clock.nextDue())
      clock.runUntil(next);
    expect(actor.getSnapshot().status).toBe('done');
    return result;
  };
  const of = (phase: Phase, step?: string) => calls.filter((c) => c.phase === phase && (step === undefined || c.step === step));
  return { actor, clock, calls, of, advance, finish };
}

const sorted = (ids: string[]) => [...ids].sort();

describe('coordinator: a refit where every engine answers', () => {
  it('runs pause, the refit step, verify and resume on every target, and records each engine', async () => {
    const h = start();
    const r = await h.finish();
    expect(h.calls.map((c) => [c.phase, c.step ?? null, c.targets])).toEqual([
      ['pause', null, TARGETS],
      ['refit', 'update_weights_from_disk', TARGETS],
      ['verify', null, TARGETS],
      ['resume', null, TARGETS],
    ]);
    expect(r.abortReason).toBeUndefined();
    expect(sorted(r.paused)).toEqual(TARGETS);
    expect(sorted(r.resumed)).toEqual(TARGETS);
    expect(r.pending).toEqual([]);
    for (const id of TARGETS) expect(r.engines[id]).toEqual({ phases: { pause: 10, refit: 10, verify: 10, resume: 10 } });
  });

  it('sums the refit time over the steps of a multi-step refit', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 });
    const r = await h.finish();
    expect(h.of('refit').map((c) => c.step)).toEqual(DISTRIBUTED.map((s) => s.name));
    expect(r.engines.e1!.phases.refit).toBe(40);
  });

  it('lists paused and resumed engines in the order their legs answered, and only those that answered 2xx', async () => {
    const h = start({}, (c) =>
      c.phase === 'pause'
        ? { e1: ok(30), e2: fail('upstream_unreachable'), e3: ok(20) }
        : c.phase === 'resume'
          ? { e1: ok(30), e2: ok(10), e3: fail('upstream_error', { status: 503 }) }
          : undefined,
    );
    const r = await h.finish();
    expect(r.paused).toEqual(['e3', 'e1']);
    expect(r.resumed).toEqual(['e2', 'e1']);
    expect(r.engines.e3).toMatchObject({ failedIn: 'resume', error: 'upstream_error', status: 503 });
  });

  it('skips verify when the request turned it off', async () => {
    const h = start({ verify: false });
    await h.finish();
    expect(h.calls.map((c) => c.phase)).toEqual(['pause', 'refit', 'resume']);
  });
});

describe('coordinator: phase deadlines', () => {
  it('pause: an engine that never answers is phase_deadline_exceeded at the pause deadline, and the quorum that needed it calls the refit off', async () => {
    const h = start({ quorum: 3 }, (c) => (c.phase === 'pause' ? { e3: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e3).toMatchObject({
      failedIn: 'pause',
      error: 'phase_deadline_exceeded',
      message: 'engine did not finish the pause phase within 1000 ms',
      phases: { pause: 1_000 },
    });
    expect(r.abortReason).toBe('quorum_not_met');
    expect(h.of('refit')).toEqual([]);
    expect(h.of('resume')[0]).toMatchObject({ at: 1_000, targets: TARGETS });
  });

  it('refit: an engine that never answers its load is named with its step at the refit deadline; verify is skipped and everyone is resumed', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? { e2: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e2).toMatchObject({
      failedIn: 'refit',
      step: 'update_weights_from_disk',
      error: 'phase_deadline_exceeded',
      message: 'engine did not finish the refit phase (update_weights_from_disk) within 3000 ms',
      phases: { pause: 10, refit: 3_000 },
    });
    expect(r.engines.e1!.failedIn).toBeUndefined();
    expect(h.of('verify')).toEqual([]);
    // The pause ended at 10 ms; the refit deadline counts from there.
    expect(h.of('resume')[0]).toMatchObject({ at: 3_010, targets: TARGETS });
  });

  it('refit: the deadline covers all steps together, not each step', async () => {
    // Each step takes 900 ms: the fourth would end at 3610 ms, past the 3000 ms refit deadline.
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.phase === 'refit' && c.step !== DESTROY ? { e1: ok(900), e2: ok(900), e3: ok(900) } : undefined,
    );
    const r = await h.finish();
    expect(h.of('refit').map((c) => c.step)).toEqual([...DISTRIBUTED.map((s) => s.name).slice(0, 3), DESTROY]);
    expect(r.engines.e1).toMatchObject({ phases: { refit: 2_710 } });
    expect(r.engines.e1!.failedIn).toBeUndefined();
    const slow = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.phase === 'refit' && c.step !== DESTROY ? { e1: ok(1_100), e2: ok(1_100), e3: ok(1_100) } : undefined,
    );
    const cut = await slow.finish();
    for (const id of TARGETS) expect(cut.engines[id]).toMatchObject({ failedIn: 'refit', step: CHUNK_2, error: 'phase_deadline_exceeded' });
  });

  it('verify: an engine that never answers is phase_deadline_exceeded in verify, and is still resumed', async () => {
    const h = start({}, (c) => (c.phase === 'verify' ? { e1: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e1).toMatchObject({ failedIn: 'verify', error: 'phase_deadline_exceeded', phases: { verify: 1_000 } });
    expect(r.engines.e1!.step).toBeUndefined();
    expect(h.of('resume')[0]).toMatchObject({ at: 1_020, targets: TARGETS });
    expect(r.resumed).toContain('e1');
  });

  it('resume: an engine that never answers is phase_deadline_exceeded in resume and is not in resumed', async () => {
    const h = start({}, (c) => (c.phase === 'resume' ? { e2: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e2).toMatchObject({ failedIn: 'resume', error: 'phase_deadline_exceeded', phases: { resume: 1_000 } });
    expect(sorted(r.resumed)).toEqual(['e1', 'e3']);
    expect(r.pending).toEqual([]);
  });

  it('a leg the runner failed on its own timeout keeps that error (upstream_timeout), not the phase deadline', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? { e2: fail('upstream_timeout', { message: 'timed out after 600s', latencyMs: 600 }) } : undefined));
    const r = await h.finish();
    expect(r.engines.e2).toMatchObject({
      failedIn: 'refit',
      step: 'update_weights_from_disk',
      error: 'upstream_timeout',
      message: 'timed out after 600s',
      phases: { refit: 600 },
    });
    // It answered, so the phase ended when the last leg did, long before the refit deadline.
    expect(h.of('verify')[0]).toMatchObject({ at: 610, targets: ['e1', 'e3'] });
  });

  it('an engine that already failed keeps its first failure when a later deadline names it again', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? { e3: fail('engine_refused', { status: 200 }) } : c.phase === 'resume' ? { e3: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e3).toMatchObject({ failedIn: 'refit', error: 'engine_refused', phases: { resume: 1_000 } });
  });
});

describe('coordinator: quorum', () => {
  const disk: RefitRequest = { weight_version: '8', source: { kind: 'disk', model_path: '/models/m' } };
  const distributed: RefitRequest = {
    weight_version: '8',
    source: { kind: 'distributed', master_address: '127.0.0.1', master_port: 29500, chunks: [{ names: ['w'], dtypes: ['bfloat16'], shapes: [[2]] }] },
  };

  // The runner's quorum (decision 24): disk needs 1, distributed needs every target, else the larger field.
  it.each([
    ['disk, no quorum', disk, 3, 1],
    ['distributed, no quorum', distributed, 3, 3],
    ['min_engines 2', { ...disk, quorum: { min_engines: 2 } }, 3, 2],
    ['min_engines over the targets is capped', { ...disk, quorum: { min_engines: 10 } }, 3, 3],
    ['min_fraction 0.5 of 3 rounds up', { ...disk, quorum: { min_fraction: 0.5 } }, 3, 2],
    ['min_fraction 1', { ...disk, quorum: { min_fraction: 1 } }, 4, 4],
    ['the larger of the two', { ...disk, quorum: { min_engines: 1, min_fraction: 0.75 } }, 4, 3],
    ['a lower quorum on a distributed refit', { ...distributed, quorum: { min_engines: 1 } }, 3, 1],
  ] as const)('quorumOf: %s → %i of %i', (_name, req, n, want) => {
    expect(quorumOf(req as RefitRequest, n)).toBe(want);
  });

  it('disk (quorum 1): the refit goes ahead on the one engine that paused, and every target is resumed', async () => {
    const quorum = quorumOf(disk, 3);
    const h = start({ quorum }, (c) => (c.phase === 'pause' ? { e1: fail('upstream_unreachable'), e2: fail('upstream_error', { status: 500 }) } : undefined));
    const r = await h.finish();
    expect(r.abortReason).toBeUndefined();
    expect(h.of('refit')[0]!.targets).toEqual(['e3']);
    expect(h.of('verify')[0]!.targets).toEqual(['e3']);
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
    expect(r.engines.e1).toMatchObject({ failedIn: 'pause', error: 'upstream_unreachable' });
    expect(r.engines.e2).toMatchObject({ failedIn: 'pause', error: 'upstream_error', status: 500 });
  });

  it('distributed (every target): one engine that cannot pause calls the refit off as quorum_not_met, and the paused ones are resumed', async () => {
    const quorum = quorumOf(distributed, 3);
    const h = start({ quorum, steps: DISTRIBUTED }, (c) => (c.phase === 'pause' ? { e2: fail('upstream_unreachable') } : undefined));
    const r = await h.finish();
    expect(r.abortReason).toBe('quorum_not_met');
    expect(h.calls.map((c) => c.phase)).toEqual(['pause', 'resume']);
    expect(sorted(r.paused)).toEqual(['e1', 'e3']);
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
    expect(sorted(r.resumed)).toEqual(TARGETS);
    // Nothing but the pause failure is recorded: the report says why the others failed.
    expect(r.engines.e1!.failedIn).toBeUndefined();
  });

  it('no engine paused: no_target_paused, even with quorum 1, and everyone is still resumed', async () => {
    const h = start({}, (c) => (c.phase === 'pause' ? Object.fromEntries(TARGETS.map((id) => [id, fail('upstream_unreachable')])) : undefined));
    const r = await h.finish();
    expect(r.abortReason).toBe('no_target_paused');
    expect(r.paused).toEqual([]);
    expect(h.calls.map((c) => c.phase)).toEqual(['pause', 'resume']);
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
  });
});

describe('coordinator: the pause grace period', () => {
  it('past the grace with the quorum paused, engines still pausing are cut (cut_after_grace) and the refit goes on without them', async () => {
    const h = start({ quorum: 2 }, (c) => (c.phase === 'pause' ? { e3: 'hang' } : undefined));
    const r = await h.finish();
    expect(r.engines.e3).toMatchObject({
      failedIn: 'pause',
      error: 'cut_after_grace',
      message: 'engine had not paused after the 500 ms grace period while the quorum had: cut from the refit',
      phases: { pause: 500 },
    });
    expect(h.of('refit')[0]).toMatchObject({ at: 500, targets: ['e1', 'e2'] });
    expect(r.abortReason).toBeUndefined();
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
  });

  it('within the grace the quorum does not cut anyone: a slower engine that pauses in time takes part', async () => {
    const h = start({ quorum: 1 }, (c) => (c.phase === 'pause' ? { e3: ok(400) } : undefined));
    const r = await h.finish();
    expect(h.of('refit')[0]).toMatchObject({ at: 400, targets: TARGETS });
    expect(r.engines.e3!.failedIn).toBeUndefined();
  });

  it('a quorum met after the grace cuts the others at that answer, not at the pause deadline', async () => {
    const h = start({ quorum: 2 }, (c) => (c.phase === 'pause' ? { e2: ok(700), e3: 'hang' } : undefined));
    const r = await h.finish();
    expect(h.of('refit')[0]).toMatchObject({ at: 700, targets: ['e1', 'e2'] });
    expect(r.engines.e3).toMatchObject({ failedIn: 'pause', error: 'cut_after_grace' });
    expect(r.engines.e2!.failedIn).toBeUndefined();
  });

  it('a quorum never met is not cut: the pause deadline names the stalled engines and calls the refit off', async () => {
    const h = start({ quorum: 2 }, (c) => (c.phase === 'pause' ? { e2: 'hang', e3: 'hang' } : undefined));
    const r = await h.finish();
    for (const id of ['e2', 'e3']) expect(r.engines[id]).toMatchObject({ failedIn: 'pause', error: 'phase_deadline_exceeded' });
    expect(r.abortReason).toBe('quorum_not_met');
  });
});

describe('coordinator: a distributed transfer that breaks', () => {
  it('an engine that fails a broadcast chunk ends it for all (transfer_aborted), the group is destroyed on every paused engine, then all are resumed', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.step === CHUNK_1 ? { e1: ok(10), e2: fail('upstream_error', { status: 500, latencyMs: 20 }), e3: 'hang' } : undefined,
    );
    const r = await h.finish();
    expect(r.engines.e2).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'upstream_error', status: 500 });
    for (const id of ['e1', 'e3']) {
      expect(r.engines[id]).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'transfer_aborted' });
      expect(r.engines[id]!.message).toContain(CHUNK_1);
    }
    expect(h.of('refit', CHUNK_2)).toEqual([]);
    expect(h.of('verify')).toEqual([]);
    // Cleanup at once (20 ms into the chunk), not at the refit deadline.
    expect(h.of('refit', DESTROY)).toEqual([{ phase: 'refit', stepIndex: 3, step: DESTROY, targets: ['e1', 'e2', 'e3'], at: 40 }]);
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
  });

  it('a failure to join the group ends the transfer the same way', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.stepIndex === 0 && c.phase === 'refit' ? { e3: fail('upstream_unreachable') } : undefined));
    const r = await h.finish();
    expect(r.engines.e3).toMatchObject({ failedIn: 'refit', step: 'init_weights_update_group', error: 'upstream_unreachable' });
    expect(r.engines.e1).toMatchObject({ failedIn: 'refit', step: 'init_weights_update_group', error: 'transfer_aborted' });
    expect(h.of('refit').map((c) => c.step)).toEqual(['init_weights_update_group', DESTROY]);
  });

  it('with keep_group there is no cleanup step: a broken transfer goes straight to the resume', async () => {
    const h = start({ steps: KEEP_GROUP, quorum: 3 }, (c) => (c.step === CHUNK_2 ? { e1: fail('upstream_error', { status: 500 }) } : undefined));
    const r = await h.finish();
    expect(h.of('refit').map((c) => c.step)).toEqual(KEEP_GROUP.map((s) => s.name));
    expect(r.engines.e2).toMatchObject({ error: 'transfer_aborted', step: CHUNK_2 });
    expect(h.calls.at(-1)!.phase).toBe('resume');
  });

  it('the refit deadline in mid-transfer still destroys the group on every paused engine, under the resume deadline, before the resume', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_1 ? { e1: 'hang', e2: 'hang', e3: 'hang' } : undefined));
    const r = await h.finish();
    for (const id of TARGETS) expect(r.engines[id]).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'phase_deadline_exceeded' });
    expect(h.of('refit', DESTROY)[0]).toMatchObject({ at: 3_010, targets: ['e1', 'e2', 'e3'] });
    expect(h.of('resume')[0]).toMatchObject({ at: 3_020, targets: TARGETS });
  });

  it('the refit deadline in mid-transfer fails every engine still in the transfer, not only those that had not answered the chunk', async () => {
    // e1 and e3 answered chunk 1/2; e2 never does. Nobody gets chunk 2/2 (the one with the version).
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_1 ? { e2: 'hang' } : undefined));
    const r = await h.finish();
    expect(h.of('refit', CHUNK_2)).toEqual([]);
    expect(r.engines.e2).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'phase_deadline_exceeded' });
    // The others hold part of the weights and cannot complete the collective.
    for (const id of ['e1', 'e3']) expect(r.engines[id]).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'transfer_aborted' });
  });

  it('a late failure from a phase already left does not abandon a collective step', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_1 ? { e2: 'hang' } : undefined));
    h.advance(35); // pause, init, then e1 and e3 answered chunk 1 (10 ms each)
    h.actor.send({ type: 'leg.done', phase: 'pause', workerId: 'e2', result: fail('upstream_error', { status: 500 }) });
    expect(h.actor.getSnapshot().value).toEqual({ refitting: 'step' });
    expect(h.actor.getSnapshot().context.engines.e1!.failedIn).toBeUndefined();
  });

  it('a cleanup that hangs is given up at the resume deadline, and the resume still goes out', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.step === CHUNK_1 ? { e2: fail('upstream_error', { status: 500 }) } : c.step === DESTROY ? { e1: 'hang' } : undefined,
    );
    await h.finish();
    const destroy = h.of('refit', DESTROY)[0]!;
    expect(h.of('resume')[0]).toMatchObject({ at: destroy.at + DEADLINES.resumeMs, targets: TARGETS });
  });

  it('the destroy step reaches engines whose transfer failed (runOn joined), and verify only the others', async () => {
    // A non-collective failure cannot happen in a transfer; a failed destroy is the one that can.
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === DESTROY ? { e3: fail('upstream_error', { status: 400 }) } : undefined));
    const r = await h.finish();
    expect(r.engines.e3).toMatchObject({ failedIn: 'refit', step: DESTROY, error: 'upstream_error' });
    expect(h.of('verify')[0]!.targets).toEqual(['e1', 'e2']);
  });

  it('an answer from an engine no longer pending in a collective step does not break the transfer', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_1 ? { e2: 'hang' } : undefined));
    h.advance(35); // pause, init, then e1 and e3 answered chunk 1 (10 ms each)
    expect(h.actor.getSnapshot().context.pending).toEqual(['e2']);
    h.actor.send({ type: 'leg.done', phase: 'refit', workerId: 'e1', result: fail('upstream_error', { status: 500 }) });
    const c = h.actor.getSnapshot().context;
    expect(h.actor.getSnapshot().value).toEqual({ refitting: 'step' });
    expect(c.pending).toEqual(['e2']);
    expect(c.engines.e1!.failedIn).toBeUndefined();
  });
});

describe('coordinator: the guaranteed resume', () => {
  // Every path out of every phase goes through resuming; e3 is the engine that fails.
  const scenarios: Array<[string, Partial<CoordinatorInput>, Script]> = [
    ['nothing fails', {}, () => undefined],
    ['a pause fails', {}, (c) => (c.phase === 'pause' ? { e3: fail('upstream_unreachable') } : undefined)],
    ['the quorum is not met', { quorum: 3 }, (c) => (c.phase === 'pause' ? { e3: fail('upstream_unreachable') } : undefined)],
    [
      'no target pauses',
      {},
      (c) => (c.phase === 'pause' ? { e1: fail('upstream_unreachable'), e2: fail('upstream_unreachable'), e3: fail('upstream_unreachable') } : undefined),
    ],
    ['the pause deadline passes', { quorum: 3 }, (c) => (c.phase === 'pause' ? { e3: 'hang' } : undefined)],
    ['an engine is cut after the grace', { quorum: 2 }, (c) => (c.phase === 'pause' ? { e3: 'hang' } : undefined)],
    ['a load fails', {}, (c) => (c.phase === 'refit' ? { e3: fail('upstream_error', { status: 500 }) } : undefined)],
    ['the refit deadline passes', {}, (c) => (c.phase === 'refit' ? { e3: 'hang' } : undefined)],
    ['a transfer is abandoned', { steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_2 ? { e3: fail('upstream_error', { status: 500 }) } : undefined)],
    ['verify fails', {}, (c) => (c.phase === 'verify' ? { e3: fail('verify_failed', { status: 200 }) } : undefined)],
    ['the verify deadline passes', {}, (c) => (c.phase === 'verify' ? { e3: 'hang' } : undefined)],
  ];

  it.each(scenarios)('%s: every target is resumed', async (_name, over, script) => {
    const h = start(over, script);
    const r = await h.finish();
    expect(h.of('resume')).toHaveLength(1);
    expect(h.calls.at(-1)!.phase).toBe('resume');
    expect(h.of('resume')[0]!.targets).toEqual(TARGETS);
    expect(sorted(r.resumed)).toEqual(TARGETS);
  });

  it.each(scenarios)('%s: an engine paused before the refit (keepPaused) is left paused', async (_name, over, script) => {
    const h = start({ ...over, keepPaused: ['e2'] }, script);
    const r = await h.finish();
    expect(h.of('resume')[0]!.targets).toEqual(['e1', 'e3']);
    expect(r.resumed).not.toContain('e2');
  });

  it('a keepPaused engine is still paused for and refitted with the others', async () => {
    const h = start({ keepPaused: ['e2'] });
    const r = await h.finish();
    expect(h.of('pause')[0]!.targets).toEqual(TARGETS);
    expect(h.of('refit')[0]!.targets).toEqual(TARGETS);
    expect(r.engines.e2!.failedIn).toBeUndefined();
    expect(r.paused).toContain('e2');
  });

  it('with every target kept paused the resume phase reaches no engine and the machine still ends', async () => {
    const h = start({ keepPaused: TARGETS });
    const r = await h.finish();
    expect(h.of('resume')[0]!.targets).toEqual([]);
    expect(r.resumed).toEqual([]);
  });
});

describe('coordinator: verify', () => {
  it('an engine that reports another version fails verify_failed in verify, keeps its status and message, and is resumed', async () => {
    const message = 'engine reports weight_version "7", expected "8"';
    const h = start({}, (c) => (c.phase === 'verify' ? { e2: fail('verify_failed', { status: 200, message }) } : undefined));
    const r = await h.finish();
    expect(r.engines.e2).toMatchObject({ failedIn: 'verify', error: 'verify_failed', status: 200, message, phases: { verify: 10 } });
    expect(r.engines.e2!.step).toBeUndefined();
    expect(r.engines.e1!.failedIn).toBeUndefined();
    expect(r.resumed).toContain('e2');
  });

  it('only engines that passed every step are verified', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? { e3: fail('upstream_error', { status: 500 }) } : undefined));
    await h.finish();
    expect(h.of('verify')[0]!.targets).toEqual(['e1', 'e2']);
  });

  it('with no engine left after the refit, verify is skipped', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? Object.fromEntries(TARGETS.map((id) => [id, fail('upstream_error', { status: 500 })])) : undefined));
    await h.finish();
    expect(h.calls.map((c) => c.phase)).toEqual(['pause', 'refit', 'resume']);
  });

  it('an answer from a phase already left is ignored', async () => {
    const h = start({}, (c) => (c.phase === 'verify' ? { e1: 'hang' } : undefined));
    h.advance(35); // pause, refit and e2, e3's verify answered
    h.actor.send({ type: 'leg.done', phase: 'refit', workerId: 'e1', result: fail('upstream_error', { status: 500 }) });
    expect(h.actor.getSnapshot().context.engines.e1!.failedIn).toBeUndefined();
    expect(h.actor.getSnapshot().context.pending).toEqual(['e1']);
  });
});

describe('coordinator: a refit taken over (recovered)', () => {
  it('at pausing: runs the whole refit from the pause, on every target', async () => {
    const h = start({ recovered: { at: 'pausing', engines: {}, paused: [], resumed: [], stepIndex: 0 } });
    const r = await h.finish();
    expect(h.calls.map((c) => [c.phase, c.targets])).toEqual([
      ['pause', TARGETS],
      ['refit', TARGETS],
      ['verify', TARGETS],
      ['resume', TARGETS],
    ]);
    expect(r.abortReason).toBeUndefined();
    expect(r.paused).toEqual(TARGETS);
  });

  it('at resuming: resumes only what its journal has not recorded resumed, keeps the abort reason, and sends nothing else', async () => {
    const h = start({
      recovered: {
        at: 'resuming',
        engines: {
          e1: { phases: { pause: 10, resume: 10 } },
          e2: { phases: { pause: 10 } },
          e3: { failedIn: 'pause', error: 'gateway_failover', phases: {} },
        },
        paused: ['e1', 'e2'],
        resumed: ['e1'],
        stepIndex: 0,
        abortReason: 'gateway_failover',
      },
    });
    const r = await h.finish();
    expect(h.calls.map((c) => [c.phase, c.targets])).toEqual([['resume', ['e2', 'e3']]]);
    expect(r.resumed).toEqual(['e1', 'e2', 'e3']);
    expect(r.paused).toEqual(['e1', 'e2']);
    expect(r.abortReason).toBe('gateway_failover');
    expect(r.engines.e3).toMatchObject({ failedIn: 'pause', error: 'gateway_failover' });
    expect(r.engines.e1!.phases.resume).toBe(10);
  });

  it('at resuming: an engine the refit found paused stays paused', async () => {
    const h = start({
      keepPaused: ['e3'],
      recovered: { at: 'resuming', engines: {}, paused: [], resumed: [], stepIndex: 0, abortReason: 'gateway_failover' },
    });
    await h.finish();
    expect(h.calls.map((c) => [c.phase, c.targets])).toEqual([['resume', ['e1', 'e2']]]);
  });

  it('at verifying: verifies the survivors whose verify is not recorded, then resumes everyone', async () => {
    const h = start({
      recovered: {
        at: 'verifying',
        engines: {
          e1: { phases: { pause: 10, refit: 10, verify: 10 } },
          e2: { phases: { pause: 10, refit: 10 } },
          e3: { failedIn: 'refit', step: 'update_weights_from_disk', error: 'upstream_error', status: 500, phases: { pause: 10, refit: 10 } },
        },
        paused: ['e1', 'e2', 'e3'],
        resumed: [],
        stepIndex: 0,
      },
    });
    const r = await h.finish();
    expect(h.calls.map((c) => [c.phase, c.targets])).toEqual([
      ['verify', ['e2']],
      ['resume', TARGETS],
    ]);
    expect(r.engines.e1!.phases.verify).toBe(10);
    expect(r.engines.e2!.phases.verify).toBe(10);
    expect(r.abortReason).toBeUndefined();
  });

  it('at verifying without verify: straight to the resume', async () => {
    const h = start({ verify: false, recovered: { at: 'verifying', engines: {}, paused: TARGETS, resumed: [], stepIndex: 0 } });
    await h.finish();
    expect(h.calls.map((c) => c.phase)).toEqual(['resume']);
  });

  it('at cleanup: destroys the group on every engine that passed the pause, then resumes', async () => {
    const failed = { failedIn: 'refit' as const, step: CHUNK_1, error: 'gateway_failover', phases: { pause: 10, refit: 20 } };
    const h = start({
      steps: DISTRIBUTED,
      quorum: 3,
      recovered: { at: 'cleanup', engines: { e1: failed, e2: failed, e3: failed }, paused: ['e1', 'e2'], resumed: [], stepIndex: 1 },
    });
    const r = await h.finish();
    expect(h.calls.map((c) => [c.phase, c.step ?? null, c.targets])).toEqual([
      ['refit', DESTROY, ['e1', 'e2']],
      ['resume', null, TARGETS],
    ]);
    // The destroy adds its time to the refit phase; the failure recorded before is kept.
    expect(r.engines.e1).toMatchObject({ failedIn: 'refit', step: CHUNK_1, error: 'gateway_failover', phases: { refit: 30 } });
  });

  it('at cleanup with keep_group: nothing to destroy, straight to the resume', async () => {
    const h = start({ steps: KEEP_GROUP, quorum: 3, recovered: { at: 'cleanup', engines: {}, paused: TARGETS, resumed: [], stepIndex: 1 } });
    await h.finish();
    expect(h.calls.map((c) => c.phase)).toEqual(['resume']);
  });
});

describe('coordinator: what it emits when it judges legs without their answer', () => {
  /** Every event the machine emits, in order, with the simulated time it came at. */
  function emitted(h: ReturnType<typeof start>): Array<CoordinatorEmitted & { at: number }> {
    const seen: Array<CoordinatorEmitted & { at: number }> = [];
    h.actor.on('*', (e) => seen.push({ ...e, at: h.clock.now() }));
    return seen;
  }

  it('nothing when every leg answers', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 });
    const seen = emitted(h);
    await h.finish();
    expect(seen).toEqual([]);
  });

  it('a phase deadline: the legs still out, with the verdict the result records, as the deadline fires', async () => {
    const h = start({}, (c) => (c.phase === 'refit' ? { e2: 'hang' } : undefined));
    const seen = emitted(h);
    const r = await h.finish();
    expect(seen).toEqual([
      {
        type: 'legs.cut',
        phase: 'refit',
        stepIndex: 0,
        legs: [{ workerId: 'e2', error: 'phase_deadline_exceeded', message: r.engines.e2!.message }],
        at: 3_010,
      },
    ]);
  });

  it('the pause grace: the engines cut from the refit, cut_after_grace', async () => {
    const h = start({ quorum: 2 }, (c) => (c.phase === 'pause' ? { e3: 'hang' } : undefined));
    const seen = emitted(h);
    await h.finish();
    expect(seen).toMatchObject([{ type: 'legs.cut', phase: 'pause', stepIndex: 0, legs: [{ workerId: 'e3', error: 'cut_after_grace' }], at: 500 }]);
  });

  it('a broken collective step: the transfer aborted, with the legs still out (not those that answered, nor the one that broke it)', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.step === CHUNK_1 ? { e1: ok(10), e2: fail('upstream_error', { status: 500, latencyMs: 20 }), e3: 'hang' } : undefined,
    );
    const seen = emitted(h);
    const r = await h.finish();
    expect(seen).toEqual([
      { type: 'transfer.aborted', stepIndex: 1, legs: [{ workerId: 'e3', error: 'transfer_aborted', message: r.engines.e3!.message }], at: 40 },
    ]);
  });

  it('the refit deadline in a collective step: the legs it cut, then the aborted transfer with none left out', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) => (c.step === CHUNK_1 ? { e2: 'hang' } : undefined));
    const seen = emitted(h);
    await h.finish();
    expect(seen).toMatchObject([
      { type: 'legs.cut', phase: 'refit', stepIndex: 1, legs: [{ workerId: 'e2', error: 'phase_deadline_exceeded' }] },
      { type: 'transfer.aborted', stepIndex: 1, legs: [] },
    ]);
    expect(seen[0]!.at).toBe(seen[1]!.at);
  });

  it('a cleanup given up at its deadline: its legs still out keep the failure their engine had in the transfer', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3 }, (c) =>
      c.step === CHUNK_1 ? { e2: fail('upstream_error', { status: 500 }) } : c.step === DESTROY ? { e1: 'hang' } : undefined,
    );
    const seen = emitted(h);
    await h.finish();
    expect(seen.map((e) => [e.type, e.stepIndex, e.legs.map((l) => [l.workerId, l.error])])).toEqual([
      // e3's chunk was still out when e2 failed it (both answer after 10 ms, e2 first).
      ['transfer.aborted', 1, [['e3', 'transfer_aborted']]],
      ['legs.cut', 3, [['e1', 'transfer_aborted']]],
    ]);
  });

  it('verify and resume legs are cut with step index 0, as runPhase was given them, even after a takeover', async () => {
    const h = start({ steps: DISTRIBUTED, quorum: 3, recovered: { at: 'verifying', engines: {}, paused: TARGETS, resumed: [], stepIndex: 3 } }, (c) =>
      c.phase !== 'refit' ? { e1: 'hang' } : undefined,
    );
    const seen = emitted(h);
    await h.finish();
    expect(seen.map((e) => [e.type, 'phase' in e ? e.phase : null, e.stepIndex, e.legs.map((l) => l.workerId)])).toEqual([['legs.cut', 'verify', 0, ['e1']]]);
  });
});
