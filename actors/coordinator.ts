// The coordinator actor: one refit, as a transaction over many engines.
// pausing → refitting (one or more steps) → verifying → resuming → done, with a deadline per
// phase that names the engines that stalled, a quorum gate after the pause, and a guaranteed
// resume: every path out of every phase goes through `resuming`. Pure: legs run in the injected
// `runPhase` actor; this machine only decides who takes part in what and records outcomes, and
// emits what it decides without an answer (legs cut by a deadline, an aborted transfer).

import { assign, enqueueActions, fromCallback, setup, type ActorRefFrom, type SnapshotFrom } from 'xstate';
import type { EngineRefitRecord, Phase, RefitAbortReason } from '../src/wire/refit-phase.ts';

export interface LegResult {
  ok: boolean;
  /** rlgate/SMG error code when !ok: upstream_error, upstream_timeout, upstream_unreachable, ... */
  error?: string;
  status?: number;
  message?: string;
  latencyMs: number;
}

export interface RefitStepPlan {
  /** Label for reports (`update_weights_from_disk`, `chunk 2/3`, ...). */
  name: string;
  /**
   * `remaining`: only engines that have not failed yet take part (the normal case).
   * `joined`: every engine that passed the pause, failed or not (cleanup such as destroying a
   * weight-update group must reach engines whose transfer failed).
   */
  runOn: 'remaining' | 'joined';
  /**
   * A collective step (joining the weight-update group, a broadcast chunk): every engine takes
   * part or none can finish, so the first engine that fails it ends the step for all.
   */
  collective?: boolean;
}

export interface CoordinatorInput {
  refitId: string;
  targets: string[];
  steps: RefitStepPlan[];
  verify: boolean;
  /** Engines that must pass the pause for the refit to go ahead (1..targets.length). */
  quorum: number;
  /** Engines that were paused before the refit: they are refitted but left paused. */
  keepPaused: string[];
  deadlines: { pauseMs: number; refitMs: number; verifyMs: number; resumeMs: number };
  /**
   * Once this long has passed in the pause and the quorum is met, engines still pausing are cut
   * from the refit (and quarantined by the caller): one hung engine does not hold the others
   * paused for the whole pause deadline.
   */
  graceMs: number;
  /**
   * A refit taken over from a replica that died: where it goes on and what its journal recorded.
   * Nothing recorded as done is sent again (see `Recovered`).
   */
  recovered?: Recovered;
}

/**
 * Where a taken-over refit goes on. `verifying` and `resuming` skip engines whose verify or resume
 * is recorded; `cleanup` runs the cleanup step (destroying the weight-update group) on the engines
 * that passed the pause, then resumes.
 */
export interface Recovered {
  /** Where a taken-over refit goes on; `pausing` starts it over (nothing was loaded yet). */
  at: 'pausing' | 'verifying' | 'resuming' | 'cleanup';
  engines: Record<string, EngineRefitRecord>;
  paused: string[];
  resumed: string[];
  stepIndex: number;
  abortReason?: CoordinatorContext['abortReason'];
}

export interface CoordinatorContext extends CoordinatorInput {
  engines: Record<string, EngineRefitRecord>;
  /** Engines that passed the pause. */
  paused: string[];
  /** Engines whose resume answered 2xx: they owe nothing, whatever else failed. */
  resumed: string[];
  stepIndex: number;
  /** The running phase, and its legs (or its step's) that have not answered yet. */
  phase: Phase;
  pending: string[];
  /** Why the refit stopped short of its refit phase, if it did. */
  abortReason?: RefitAbortReason;
}

export type CoordinatorEvent =
  | { type: 'leg.done'; phase: Phase; workerId: string; result: LegResult }
  /** Legs that answered together (one turn of the event loop), recorded as one `leg.done` each, in order. */
  | { type: 'legs.done'; phase: Phase; legs: Array<{ workerId: string; result: LegResult }> }
  | { type: 'phase.done' };

/** A leg the machine judged without its answer: the verdict the report gives it. */
export interface CutLeg {
  workerId: string;
  error: string;
  message?: string;
}

/**
 * What the machine decides on its own, emitted for whoever runs it (`actor.on(type, ...)`), the
 * moment it decides: the runner publishes these legs, whose answers will never be heard. `legs`
 * holds the phase's legs still out whose engine the decision (or an earlier one in the same
 * phase) failed; `stepIndex` is the one `runPhase` was given.
 */
export type CoordinatorEmitted =
  /** A deadline, or the pause's grace period, ended the phase before these legs answered. */
  | { type: 'legs.cut'; phase: Phase; stepIndex: number; legs: CutLeg[] }
  /** A collective step broke (or its deadline cut it): the transfer is abandoned, and these legs with it. */
  | { type: 'transfer.aborted'; stepIndex: number; legs: CutLeg[] };

export interface PhaseInput {
  refitId: string;
  phase: Phase;
  stepIndex: number;
  targets: string[];
}

export const coordinatorMachine = setup({
  types: {
    context: {} as CoordinatorContext,
    events: {} as CoordinatorEvent,
    input: {} as CoordinatorInput,
    output: {} as CoordinatorContext,
    emitted: {} as CoordinatorEmitted,
  },
  actors: {
    runPhase: fromCallback<CoordinatorEvent, PhaseInput>(() => {
      throw new Error("coordinator: implementation 'runPhase' was not provided");
    }),
  },
  guards: {
    quorumMet: ({ context }) => context.paused.length >= context.quorum && context.paused.length > 0,
    moreSteps: ({ context }) => context.stepIndex + 1 < context.steps.length,
    cleanupPending: ({ context }) => context.steps.at(-1)?.runOn === 'joined' && context.stepIndex < context.steps.length - 1,
    verifyWanted: ({ context }) => context.verify && verifyTargets(context).length > 0,
    recoverAt: ({ context }, at: Recovered['at']) => context.recovered?.at === at,
    collectiveBroken: ({ context, event }) =>
      event.type === 'leg.done' &&
      event.phase === context.phase &&
      !event.result.ok &&
      context.steps[context.stepIndex]?.collective === true &&
      context.pending.includes(event.workerId),
  },
  delays: {
    pauseDeadline: ({ context }) => context.deadlines.pauseMs,
    pauseGrace: ({ context }) => Math.min(context.graceMs, context.deadlines.pauseMs),
    refitDeadline: ({ context }) => context.deadlines.refitMs,
    verifyDeadline: ({ context }) => context.deadlines.verifyMs,
    resumeDeadline: ({ context }) => context.deadlines.resumeMs,
  },
  actions: {
    startPhase: assign((_, p: { phase: Phase; targets: string[] }) => ({ phase: p.phase, pending: p.targets })),
    recordLeg: assign(({ context, event }) => (event.type === 'leg.done' ? recordAnswers(context, event.phase, [event]) : {})),
    // A burst of answers costs one copy of the records, not one per answer (a 1,000-engine phase).
    recordLegs: assign(({ context, event }) => (event.type === 'legs.done' ? recordAnswers(context, event.phase, event.legs) : {})),
    // A collective step one engine failed cannot complete for anyone, nor can the steps after it:
    // every engine still in the transfer holds part of the weights and is failed with it.
    abortTransfer: enqueueActions(({ context, enqueue }) => {
      const engines = { ...context.engines };
      const step = context.steps[context.stepIndex]?.name;
      for (const id of survivors(context)) {
        const prev = engines[id] ?? { phases: {} };
        engines[id] = {
          ...prev,
          failedIn: 'refit',
          step,
          error: 'transfer_aborted',
          message: `another engine failed ${step ?? 'the transfer'}, so the collective could not complete: the transfer was abandoned and the group torn down`,
        };
      }
      enqueue.assign({ engines, pending: [] });
      enqueue.emit({ type: 'transfer.aborted', stepIndex: context.stepIndex, legs: cutLegs(engines, context.pending, 'refit') });
    }),
    // A deadline names every engine that had not answered: it stalled in this phase.
    markStalled: enqueueActions(({ context, enqueue }, params: { phase: Phase; deadlineMs: number; error?: string }) => {
      const engines = { ...context.engines };
      const step = params.phase === 'refit' ? context.steps[context.stepIndex]?.name : undefined;
      for (const id of context.pending) {
        const prev = engines[id] ?? { phases: {} };
        engines[id] = {
          ...prev,
          phases: { ...prev.phases, [params.phase]: (prev.phases[params.phase] ?? 0) + params.deadlineMs },
          ...(prev.failedIn === undefined
            ? {
                failedIn: params.phase,
                step,
                error: params.error ?? 'phase_deadline_exceeded',
                message:
                  params.error === 'cut_after_grace'
                    ? `engine had not paused after the ${params.deadlineMs} ms grace period while the quorum had: cut from the refit`
                    : `engine did not finish the ${params.phase} phase${step ? ` (${step})` : ''} within ${params.deadlineMs} ms`,
              }
            : {}),
        };
      }
      enqueue.assign({ engines, pending: [] });
      const legs = cutLegs(engines, context.pending, params.phase);
      if (legs.length > 0) enqueue.emit({ type: 'legs.cut', phase: params.phase, stepIndex: params.phase === 'refit' ? context.stepIndex : 0, legs });
    }),
    // The cleanup step given up at its deadline: its legs still out keep the failure their engine
    // already has (the transfer's), and are cut with it.
    cutCleanup: enqueueActions(({ context, enqueue }) => {
      const legs = cutLegs(context.engines, context.pending, 'refit');
      if (legs.length > 0) enqueue.emit({ type: 'legs.cut', phase: 'refit', stepIndex: context.stepIndex, legs });
    }),
  },
}).createMachine({
  id: 'coordinator',
  initial: 'boot',
  context: ({ input }) => ({
    ...input,
    engines: input.recovered?.engines ?? Object.fromEntries(input.targets.map((id) => [id, { phases: {} }])),
    paused: input.recovered?.paused ?? [],
    resumed: input.recovered?.resumed ?? [],
    stepIndex: input.recovered?.stepIndex ?? 0,
    phase: 'pause',
    pending: [],
    abortReason: input.recovered?.abortReason,
  }),
  states: {
    // A new refit starts with the pause; a taken-over one goes on where its journal says.
    boot: {
      always: [
        { guard: { type: 'recoverAt', params: 'verifying' }, target: 'afterRefit' },
        { guard: { type: 'recoverAt', params: 'cleanup' }, target: 'cleanup' },
        { guard: { type: 'recoverAt', params: 'resuming' }, target: 'resuming' },
        { target: 'pausing' },
      ],
    },
    pausing: {
      initial: 'withinGrace',
      states: {
        withinGrace: { after: { pauseGrace: 'pastGrace' } },
        // Checked again after every answer: the quorum may be met later than the grace period.
        pastGrace: {
          always: {
            guard: 'quorumMet',
            target: '#coordinator.gate',
            actions: { type: 'markStalled', params: ({ context }) => ({ phase: 'pause' as const, deadlineMs: context.graceMs, error: 'cut_after_grace' }) },
          },
        },
      },
      entry: { type: 'startPhase', params: ({ context }) => ({ phase: 'pause' as const, targets: context.targets }) },
      invoke: {
        src: 'runPhase',
        input: ({ context }) => ({ refitId: context.refitId, phase: 'pause' as const, stepIndex: 0, targets: context.targets }),
      },
      on: {
        'leg.done': { actions: 'recordLeg' },
        'legs.done': { actions: 'recordLegs' },
        'phase.done': 'gate',
      },
      after: {
        pauseDeadline: {
          target: 'gate',
          actions: { type: 'markStalled', params: ({ context }) => ({ phase: 'pause' as const, deadlineMs: context.deadlines.pauseMs }) },
        },
      },
    },
    gate: {
      always: [
        { guard: 'quorumMet', target: 'refitting' },
        {
          target: 'resuming',
          actions: assign(({ context }) => ({
            abortReason: context.paused.length === 0 ? ('no_target_paused' as const) : ('quorum_not_met' as const),
          })),
        },
      ],
    },
    refitting: {
      initial: 'step',
      after: {
        // Cut in a collective step, the transfer cannot complete for anyone: the engines that
        // answered this step hold part of the weights too (transfer_aborted, like a broken one).
        refitDeadline: [
          {
            guard: ({ context }) => context.steps[context.stepIndex]?.collective === true,
            target: 'cleanup',
            actions: [{ type: 'markStalled', params: ({ context }) => ({ phase: 'refit' as const, deadlineMs: context.deadlines.refitMs }) }, 'abortTransfer'],
          },
          {
            target: 'cleanup',
            actions: { type: 'markStalled', params: ({ context }) => ({ phase: 'refit' as const, deadlineMs: context.deadlines.refitMs }) },
          },
        ],
      },
      states: {
        step: {
          entry: { type: 'startPhase', params: ({ context }) => ({ phase: 'refit' as const, targets: stepTargets(context) }) },
          invoke: {
            src: 'runPhase',
            input: ({ context }) => ({
              refitId: context.refitId,
              phase: 'refit' as const,
              stepIndex: context.stepIndex,
              targets: stepTargets(context),
            }),
          },
          on: {
            // One engine out of a collective step: the others can never finish it. They are cut
            // now (not at the refit deadline), the group is torn down, everyone is resumed.
            'leg.done': [
              {
                guard: 'collectiveBroken',
                target: '#coordinator.cleanup',
                actions: ['recordLeg', 'abortTransfer'],
              },
              { actions: 'recordLeg' },
            ],
            // Answers of a step that is not collective (a collective step's come one by one).
            'legs.done': { actions: 'recordLegs' },
            'phase.done': [
              { guard: 'moreSteps', target: 'step', reenter: true, actions: assign({ stepIndex: ({ context }) => context.stepIndex + 1 }) },
              { target: '#coordinator.afterRefit' },
            ],
          },
        },
      },
    },
    // A refit cut short by its deadline still runs its cleanup step (destroying the weight-update
    // group), under the resume deadline, before everyone is resumed.
    cleanup: {
      always: [
        {
          guard: 'cleanupPending',
          target: 'cleaningUp',
          actions: assign({ stepIndex: ({ context }) => context.steps.length - 1 }),
        },
        { target: 'resuming' },
      ],
    },
    cleaningUp: {
      entry: { type: 'startPhase', params: ({ context }) => ({ phase: 'refit' as const, targets: context.paused }) },
      invoke: {
        src: 'runPhase',
        input: ({ context }) => ({ refitId: context.refitId, phase: 'refit' as const, stepIndex: context.stepIndex, targets: context.paused }),
      },
      on: {
        'leg.done': { actions: 'recordLeg' },
        'legs.done': { actions: 'recordLegs' },
        'phase.done': 'resuming',
      },
      after: { resumeDeadline: { target: 'resuming', actions: 'cutCleanup' } },
    },
    afterRefit: {
      always: [{ guard: 'verifyWanted', target: 'verifying' }, { target: 'resuming' }],
    },
    verifying: {
      entry: { type: 'startPhase', params: ({ context }) => ({ phase: 'verify' as const, targets: verifyTargets(context) }) },
      invoke: {
        src: 'runPhase',
        input: ({ context }) => ({ refitId: context.refitId, phase: 'verify' as const, stepIndex: 0, targets: verifyTargets(context) }),
      },
      on: {
        'leg.done': { actions: 'recordLeg' },
        'legs.done': { actions: 'recordLegs' },
        'phase.done': 'resuming',
      },
      after: {
        verifyDeadline: {
          target: 'resuming',
          actions: { type: 'markStalled', params: ({ context }) => ({ phase: 'verify' as const, deadlineMs: context.deadlines.verifyMs }) },
        },
      },
    },
    // Every target the refit paused is resumed, whether its pause answered or not: a pause that
    // timed out may still have landed. Engines paused before the refit stay paused.
    resuming: {
      entry: { type: 'startPhase', params: ({ context }) => ({ phase: 'resume' as const, targets: resumeTargets(context) }) },
      invoke: {
        src: 'runPhase',
        input: ({ context }) => ({ refitId: context.refitId, phase: 'resume' as const, stepIndex: 0, targets: resumeTargets(context) }),
      },
      on: {
        'leg.done': { actions: 'recordLeg' },
        'legs.done': { actions: 'recordLegs' },
        'phase.done': 'done',
      },
      after: {
        resumeDeadline: {
          target: 'done',
          actions: { type: 'markStalled', params: ({ context }) => ({ phase: 'resume' as const, deadlineMs: context.deadlines.resumeMs }) },
        },
      },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context,
});

/**
 * The records after these answers of `phase`: each engine's time in the phase, its first failure,
 * who passed the pause, who was resumed. Late answers from a phase already left (its runner was
 * stopped), or from an engine not pending, are ignored.
 */
function recordAnswers(context: CoordinatorContext, phase: Phase, legs: ReadonlyArray<{ workerId: string; result: LegResult }>): Partial<CoordinatorContext> {
  if (phase !== context.phase) return {};
  const pending = legs.length === 1 ? undefined : new Set(context.pending);
  const step = phase === 'refit' ? context.steps[context.stepIndex]?.name : undefined;
  let engines: Record<string, EngineRefitRecord> | undefined;
  const answered = new Set<string>();
  const paused: string[] = [];
  const resumed: string[] = [];
  for (const { workerId, result } of legs) {
    if (answered.has(workerId) || !(pending ? pending.has(workerId) : context.pending.includes(workerId))) continue;
    answered.add(workerId);
    engines ??= { ...context.engines };
    const prev = engines[workerId] ?? { phases: {} };
    const rec: EngineRefitRecord = { ...prev, phases: { ...prev.phases, [phase]: (prev.phases[phase] ?? 0) + result.latencyMs } };
    if (!result.ok && rec.failedIn === undefined) {
      Object.assign(rec, { failedIn: phase, step, error: result.error, status: result.status, message: result.message });
    }
    engines[workerId] = rec;
    if (phase === 'pause' && result.ok) paused.push(workerId);
    if (phase === 'resume' && result.ok) resumed.push(workerId);
  }
  if (!engines) return {};
  return {
    engines,
    pending: context.pending.filter((id) => !answered.has(id)),
    paused: paused.length ? [...context.paused, ...paused] : context.paused,
    resumed: resumed.length ? [...context.resumed, ...resumed] : context.resumed,
  };
}

/** Of these legs, those whose engine failed in `phase`, with that failure: the verdict a cut leg is given. */
function cutLegs(engines: Record<string, EngineRefitRecord>, ids: readonly string[], phase: Phase): CutLeg[] {
  const out: CutLeg[] = [];
  for (const id of ids) {
    const rec = engines[id];
    if (rec?.failedIn === phase && rec.error !== undefined)
      out.push({ workerId: id, error: rec.error, ...(rec.message !== undefined ? { message: rec.message } : {}) });
  }
  return out;
}

/** Engines that passed the pause and have not failed since. */
export function survivors(context: CoordinatorContext): string[] {
  return context.paused.filter((id) => context.engines[id]?.failedIn === undefined);
}

/** Every target the refit may have paused and has not resumed yet (its resume is recorded). */
function resumeTargets(context: CoordinatorContext): string[] {
  const skip = new Set([...context.keepPaused, ...context.resumed]);
  return context.targets.filter((id) => !skip.has(id));
}

/** Survivors whose version was not checked yet (all of them, but after a takeover). */
function verifyTargets(context: CoordinatorContext): string[] {
  return survivors(context).filter((id) => context.engines[id]?.phases.verify === undefined);
}

function stepTargets(context: CoordinatorContext): string[] {
  const step = context.steps[context.stepIndex];
  return step?.runOn === 'joined' ? context.paused : survivors(context);
}

export type CoordinatorActor = ActorRefFrom<typeof coordinatorMachine>;
export type CoordinatorSnapshot = SnapshotFrom<typeof coordinatorMachine>;
