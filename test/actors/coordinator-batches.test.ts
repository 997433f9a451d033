// The coordinator hears a phase's answers one by one (`leg.done`) or a burst at once (`legs.done`,
// what the phase runner sends for the answers of one turn): either way the refit comes out the
// same, and a late or repeated answer counts once. `runPhase` is a stand-in that answers every leg
// at once, synchronously, in one of the two forms; time never moves (XState's simulated clock).

import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import { coordinatorMachine, type CoordinatorEvent, type LegResult, type PhaseInput, type RefitStepPlan } from '../../actors/coordinator.ts';
import type { Phase } from '../../src/wire/refit-phase.ts';

const TARGETS = ['e1', 'e2', 'e3', 'e4'];
const DISK: RefitStepPlan[] = [{ name: 'update_weights_from_disk', runOn: 'remaining' }];
const ok = (latencyMs: number): LegResult => ({ ok: true, status: 200, latencyMs });
const failed: LegResult = { ok: false, error: 'upstream_error', status: 500, message: 'boom', latencyMs: 3 };

/** e2 fails its load, e4 fails its resume; every other leg succeeds. */
function answer(phase: Phase, id: string): LegResult {
  if (phase === 'refit' && id === 'e2') return failed;
  if (phase === 'resume' && id === 'e4') return failed;
  return ok(TARGETS.indexOf(id) + 1);
}

type Legs = Array<{ workerId: string; result: LegResult }>;

/** `before` is sent ahead of the phase's own answers; `burst` may change the burst sent together. */
function run(
  form: 'one by one' | 'together',
  opts: { before?: (phase: Phase, send: (e: CoordinatorEvent) => void) => void; burst?: (legs: Legs) => Legs } = {},
) {
  const runPhase = fromCallback<CoordinatorEvent, PhaseInput>(({ input: p, sendBack }) => {
    const legs = p.targets.map((workerId) => ({ workerId, result: answer(p.phase, workerId) }));
    opts.before?.(p.phase, sendBack);
    if (form === 'together') sendBack({ type: 'legs.done', phase: p.phase, legs: opts.burst?.(legs) ?? legs });
    else for (const l of legs) sendBack({ type: 'leg.done', phase: p.phase, ...l });
    sendBack({ type: 'phase.done' });
  });
  const actor = createActor(coordinatorMachine.provide({ actors: { runPhase } }), {
    clock: new SimulatedClock(), // the deadlines never fire: every leg answers at once
    input: {
      refitId: 'r1',
      targets: TARGETS,
      steps: DISK,
      verify: true,
      quorum: 1,
      keepPaused: [],
      deadlines: { pauseMs: 60_000, refitMs: 60_000, verifyMs: 60_000, resumeMs: 60_000 },
      graceMs: 60_000,
    },
  });
  actor.start();
  const snap = actor.getSnapshot();
  expect(snap.status).toBe('done');
  const { engines, paused, resumed, pending } = snap.context;
  actor.stop();
  return { engines, paused, resumed, pending };
}

describe('coordinator: answers one by one or together', () => {
  it('records the same engines, pauses and resumes either way', () => {
    const one = run('one by one');
    const together = run('together');
    expect(together).toEqual(one);
    expect(together.paused).toEqual(TARGETS);
    expect(together.resumed).toEqual(['e1', 'e2', 'e3']);
    expect(together.engines.e2).toMatchObject({ failedIn: 'refit', error: 'upstream_error', status: 500 });
    expect(together.engines.e4).toMatchObject({ failedIn: 'resume', error: 'upstream_error' });
    expect(together.engines.e1?.phases).toEqual({ pause: 1, refit: 1, verify: 1, resume: 1 });
    // The failed load leaves e2 out of the version check.
    expect(together.engines.e2?.phases.verify).toBeUndefined();
  });

  it('counts an answer once: a repeat later in the same burst changes nothing', () => {
    const repeated = run('together', { burst: (legs) => [...legs, { workerId: 'e1', result: failed }, { workerId: 'e3', result: ok(100) }] });
    expect(repeated).toEqual(run('one by one'));
  });

  it("ignores a burst of another phase's answers", () => {
    const stray = run('together', {
      before: (phase, send) => {
        if (phase === 'verify') send({ type: 'legs.done', phase: 'pause', legs: [{ workerId: 'e3', result: failed }] });
      },
    });
    expect(stray).toEqual(run('one by one'));
  });
});
