// The engine actor: the single writer of one engine's state, and the one place its commands are
// serialised (no pause/update reordering). Three parallel regions: lifecycle (registering →
// online{serving|paused|asleep|refitting} ⇄ unreachable), commands (one at a time, FIFO) and the
// data-plane breaker (closed/open/halfOpen). Pure: every side effect is injected through setup.

import { assign, emit, enqueueActions, fromCallback, fromPromise, raise, setup, type ActorRefFrom, type SnapshotFrom } from 'xstate';

export type ControlState = 'active' | 'paused' | 'asleep';
export type VersionSource = 'registration' | 'passthrough' | 'api';
/**
 * What a command does to the lifecycle while it runs: `refit` makes the engine `refitting`,
 * `pause` makes it `pausing` (out of routing from the moment the pause is sent, not from its
 * answer), `other` leaves it alone.
 */
export type CommandOp = 'refit' | 'pause' | 'other';

export interface EngineCommand {
  /** Correlates the emitted `command.done` with whoever queued the command. */
  token: string;
  op: CommandOp;
  /** Opaque to the machine: the host that runs it knows what it is. */
  payload: unknown;
}

/**
 * What running a command taught us about the engine (computed by the injected runner). Control
 * calls never count as health results: a failed one says nothing about liveness,
 * which is the probes' business.
 */
export interface CommandResult {
  outcome: unknown;
  control?: ControlState;
  version?: string;
}

export interface EngineInput {
  workerId: string;
  url: string;
  /** Version seeded from the registration label; undefined = unversioned. */
  seedVersion?: string;
  probeIntervalMs: number;
  probeFailureThreshold: number;
  retryIntervalMs: number;
  breakerThreshold: number;
  breakerCooldownMs: number;
}

export interface EngineContext extends EngineInput {
  control: ControlState;
  version: string | undefined;
  versionSource: VersionSource | undefined;
  queue: EngineCommand[];
  current: EngineCommand | undefined;
  breakerFailures: number;
  probeFailures: number;
  lastError: string | undefined;
  /**
   * Why the engine is held out of routing whatever the version policy, or null: it failed during
   * a refit step (it may hold partial weights), failed its version check, or came back below the
   * fleet's version. Only a refit that brings it to the fleet version and verifies it clears it.
   */
  quarantine: string | null;
  /** Who set the control state: an operator's API write is kept; an observed one follows the engine. */
  controlSource: 'api' | 'engine';
}

export type EngineEvent =
  | { type: 'cmd.enqueue'; command: EngineCommand }
  /** The host finished running the command it was told to run. */
  | { type: 'cmd.result'; token: string; result: CommandResult | { error: string } }
  /** The caller went away: drop the command if queued, abort it if running. */
  | { type: 'cmd.cancel'; token: string }
  | { type: 'version.set'; version: string | undefined; source: VersionSource }
  /** `api`: an operator's write to the gateway's table, which no observation overrides. */
  | { type: 'control.set'; control: ControlState; source?: 'api' }
  | { type: 'quarantine.set'; reason: string }
  | { type: 'quarantine.clear' }
  | { type: 'registration.changed'; seedVersion?: string; versionChanged: boolean }
  /** `paused`: what a quiet probe read of the engine's pause state, when its wire can tell. */
  | { type: 'probe.ok'; paused?: boolean }
  | { type: 'probe.failed'; error: string }
  | { type: 'dp.success' }
  | { type: 'dp.failure' }
  // raised internally, between regions
  | { type: 'cmd.started'; op: CommandOp }
  | { type: 'cmd.finished' };

export type EngineEmitted =
  /** Run this command now (the host owns the I/O); answer with `cmd.result`. */
  | { type: 'command.run'; command: EngineCommand }
  /** Stop the running command: its caller went away. */
  | { type: 'command.abort'; token: string }
  /** The command's answer, for whoever queued it. */
  | { type: 'command.done'; token: string; result: CommandResult | { error: string } };

export const engineMachine = setup({
  types: {
    context: {} as EngineContext,
    events: {} as EngineEvent,
    input: {} as EngineInput,
    emitted: {} as EngineEmitted,
  },
  actors: {
    // Defaults throw: the wiring in src/fleet/ must provide real implementations.
    discover: fromMissing<{ workerId: string }, void>('discover'),
    probeTicker: fromMissingCallback('probeTicker'),
  },
  guards: {
    isPaused: ({ context }) => context.control === 'paused',
    isAsleep: ({ context }) => context.control === 'asleep',
    drained: ({ context }) => context.current === undefined,
    cancelsCurrent: ({ context, event }) => event.type === 'cmd.cancel' && context.current?.token === event.token,
    resultOfCurrent: ({ context, event }) => event.type === 'cmd.result' && context.current?.token === event.token,
    isRefitOp: ({ event }) => event.type === 'cmd.started' && event.op === 'refit',
    isPauseOp: ({ event }) => event.type === 'cmd.started' && event.op === 'pause',
    probeThresholdReached: ({ context }) => context.probeFailures + 1 >= context.probeFailureThreshold,
    // A planned pause or refit suspends the breaker: failures then say nothing about health.
    unplanned: ({ context }) => context.control === 'active' && (context.current?.op ?? 'other') === 'other',
    breakerTrips: ({ context }) =>
      context.control === 'active' && (context.current?.op ?? 'other') === 'other' && context.breakerFailures + 1 >= context.breakerThreshold,
  },
  delays: {
    retryInterval: ({ context }) => context.retryIntervalMs,
    breakerCooldown: ({ context }) => context.breakerCooldownMs,
  },
  actions: {
    setControl: assign(({ event }) => (event.type === 'control.set' ? { control: event.control, controlSource: event.source ?? ('engine' as const) } : {})),
    start: enqueueActions(({ enqueue }, command: EngineCommand) => {
      enqueue.assign({ current: command });
      enqueue.emit({ type: 'command.run', command });
      if (command.op !== 'other') enqueue.raise({ type: 'cmd.started', op: command.op });
    }),
    // Ends the current command and starts the next. What the command taught us travels as the
    // same events an API write would send, so the lifecycle region re-resolves its resting
    // state exactly as it does for those.
    finish: enqueueActions(({ context, enqueue }, result: Partial<CommandResult>) => {
      if (result.version !== undefined) enqueue.raise({ type: 'version.set', version: result.version, source: 'passthrough' });
      if (result.control !== undefined) enqueue.raise({ type: 'control.set', control: result.control });
      if (context.current && context.current.op !== 'other') enqueue.raise({ type: 'cmd.finished' });
      const [next, ...rest] = context.queue;
      enqueue.assign({ current: next, queue: rest });
      if (next) {
        enqueue.emit({ type: 'command.run', command: next });
        if (next.op !== 'other') enqueue.raise({ type: 'cmd.started', op: next.op });
      }
    }),
  },
}).createMachine({
  id: 'engine',
  type: 'parallel',
  context: ({ input }) => ({
    ...input,
    control: 'active',
    version: input.seedVersion,
    versionSource: input.seedVersion !== undefined ? 'registration' : undefined,
    queue: [],
    current: undefined,
    breakerFailures: 0,
    probeFailures: 0,
    lastError: undefined,
    quarantine: null,
    controlSource: 'engine',
  }),
  on: {
    'quarantine.set': { actions: assign({ quarantine: ({ event }) => event.reason }) },
    'quarantine.clear': { actions: assign({ quarantine: null }) },
    'version.set': {
      actions: assign(({ event }) => ({ version: event.version, versionSource: event.version === undefined ? undefined : event.source })),
    },
  },
  states: {
    lifecycle: {
      initial: 'registering',
      on: {
        'registration.changed': {
          target: '.registering',
          actions: assign(({ context, event }) =>
            event.versionChanged
              ? { version: event.seedVersion, versionSource: event.seedVersion === undefined ? undefined : ('registration' as const) }
              : { version: context.version, versionSource: context.versionSource },
          ),
        },
      },
      states: {
        registering: {
          invoke: {
            src: 'discover',
            input: ({ context }) => ({ workerId: context.workerId }),
            onDone: { target: 'online', actions: assign({ lastError: undefined, probeFailures: 0 }) },
            onError: { target: 'unreachable', actions: assign({ lastError: ({ event }) => String(event.error) }) },
          },
          on: { 'control.set': { actions: 'setControl' } },
        },
        online: {
          initial: 'resolving',
          on: {
            // Every resting state reacts alike: a refit command makes the engine `refitting`,
            // a control write re-resolves the resting state (refitting overrides it below).
            'cmd.started': [
              { guard: 'isRefitOp', target: '.refitting' },
              { guard: 'isPauseOp', target: '.pausing' },
            ],
            'control.set': { target: '.resolving', actions: 'setControl' },
            // A probe that finds nothing new changes nothing: no new snapshot (the fleet's
            // engines are probed thousands of times a minute).
            'probe.ok': { guard: ({ context }) => context.probeFailures > 0, actions: assign({ probeFailures: 0 }) },
            'probe.failed': [
              {
                guard: 'probeThresholdReached',
                target: 'unreachable',
                actions: assign({ lastError: ({ event }) => event.error, probeFailures: 0 }),
              },
              { actions: assign({ probeFailures: ({ context }) => context.probeFailures + 1 }) },
            ],
          },
          states: {
            // Transient: picks the resting state that matches the control state.
            resolving: {
              always: [
                // A pause or refit still running (the engine was rediscovered meanwhile) keeps
                // the engine out of routing until it ends.
                { guard: ({ context }) => context.current?.op === 'refit', target: 'refitting' },
                { guard: ({ context }) => context.current?.op === 'pause', target: 'pausing' },
                { guard: 'isPaused', target: 'paused' },
                { guard: 'isAsleep', target: 'asleep' },
                { target: 'serving' },
              ],
            },
            // Liveness is probed in every resting state, so an engine that dies (and comes back)
            // while paused is noticed. A paused or asleep engine gets a quiet probe: SGLang's
            // /health runs a generation, which it would hold. Never while a command changes it.
            serving: {
              invoke: { src: 'probeTicker', input: ({ context }) => ({ workerId: context.workerId, intervalMs: context.probeIntervalMs, quiet: false }) },
            },
            paused: {
              invoke: { src: 'probeTicker', input: ({ context }) => ({ workerId: context.workerId, intervalMs: context.probeIntervalMs, quiet: true }) },
              // The engine admits requests again (resumed out of band, or restarted): it serves.
              on: {
                'probe.ok': {
                  guard: ({ event, context }) => event.paused === false && context.current === undefined && context.controlSource !== 'api',
                  target: 'resolving',
                  actions: assign({ control: 'active' as const, controlSource: 'engine' as const, probeFailures: 0 }),
                },
              },
            },
            asleep: {
              invoke: { src: 'probeTicker', input: ({ context }) => ({ workerId: context.workerId, intervalMs: context.probeIntervalMs, quiet: true }) },
            },
            // A pause is on its way to the engine: no new request may be routed to it. Its
            // answer's control.set (or, if it failed, cmd.finished) decides where it rests.
            pausing: {
              on: {
                'cmd.finished': 'resolving',
                // Recorded, applied when the pause ends: no write may route to an engine mid-pause.
                'control.set': { actions: 'setControl' },
              },
            },
            refitting: {
              on: {
                'cmd.finished': 'resolving',
                'control.set': { actions: 'setControl' },
              },
            },
          },
        },
        unreachable: {
          after: { retryInterval: 'registering' },
          on: {
            'control.set': { actions: 'setControl' },
          },
        },
      },
    },

    // One command at a time, FIFO. The machine decides what runs when; the host runs it (the
    // emitted `command.run`) and reports back with `cmd.result`. No actor is spawned per command:
    // this region is on the fan-out hot path.
    commands: {
      initial: 'idle',
      on: {
        'cmd.cancel': {
          actions: enqueueActions(({ context, event, enqueue }) => {
            if (!context.queue.some((c) => c.token === event.token)) return;
            enqueue.assign({ queue: context.queue.filter((c) => c.token !== event.token) });
            enqueue.emit({ type: 'command.done', token: event.token, result: { error: 'cancelled' } });
          }),
        },
      },
      states: {
        idle: {
          on: {
            'cmd.enqueue': { target: 'busy', actions: { type: 'start', params: ({ event }) => event.command } },
          },
        },
        busy: {
          on: {
            'cmd.enqueue': { actions: assign({ queue: ({ context, event }) => [...context.queue, event.command] }) },
            'cmd.result': {
              guard: 'resultOfCurrent',
              target: 'settle',
              actions: [
                emit(({ event }) => ({ type: 'command.done' as const, token: event.token, result: event.result })),
                { type: 'finish', params: ({ event }) => ('error' in event.result ? {} : event.result) },
              ],
            },
            // The host aborts the running call (its signal, hence the HTTP call) on command.abort.
            'cmd.cancel': {
              guard: 'cancelsCurrent',
              target: 'settle',
              actions: [
                emit(({ event }) => ({ type: 'command.abort' as const, token: event.token })),
                emit(({ event }) => ({ type: 'command.done' as const, token: event.token, result: { error: 'cancelled' } })),
                { type: 'finish', params: {} },
              ],
            },
          },
        },
        // Transient: busy again if `finish` started the next command, idle otherwise.
        settle: {
          always: [{ guard: 'drained', target: 'idle' }, { target: 'busy' }],
        },
      },
    },

    breaker: {
      initial: 'closed',
      states: {
        closed: {
          on: {
            'dp.success': { actions: assign({ breakerFailures: 0 }) },
            'dp.failure': [
              { guard: 'breakerTrips', target: 'open', actions: assign({ breakerFailures: 0 }) },
              { guard: 'unplanned', actions: assign({ breakerFailures: ({ context }) => context.breakerFailures + 1 }) },
            ],
          },
        },
        open: {
          after: { breakerCooldown: 'halfOpen' },
        },
        halfOpen: {
          on: {
            'dp.success': 'closed',
            'dp.failure': { guard: 'unplanned', target: 'open' },
          },
        },
      },
    },
  },
});

export type EngineActor = ActorRefFrom<typeof engineMachine>;
export type EngineSnapshot = SnapshotFrom<typeof engineMachine>;

/** Flat lifecycle name for events and rows: registering, serving, paused, asleep, refitting, unreachable. */
export function lifecycleOf(snapshot: EngineSnapshot): string {
  const value = snapshot.value as { lifecycle: string | { online: string } };
  const lc = value.lifecycle;
  return typeof lc === 'string' ? lc : lc.online;
}

export function breakerOf(snapshot: EngineSnapshot): 'closed' | 'open' | 'half_open' {
  const b = (snapshot.value as { breaker: string }).breaker;
  return b === 'halfOpen' ? 'half_open' : (b as 'closed' | 'open');
}

// --- default implementations that fail loudly when the wiring forgot to provide one ---

function fromMissing<I, O>(name: string) {
  return fromPromise<O, I>(async () => {
    throw new Error(`engine actor: implementation '${name}' was not provided`);
  });
}

function fromMissingCallback(name: string) {
  return fromCallback<EngineEvent, { workerId: string; intervalMs: number; quiet: boolean }>(() => {
    throw new Error(`engine actor: implementation '${name}' was not provided`);
  });
}
