// The engine machine on its own: its lifecycle (discovery, probes, control writes, re-registration),
// its command queue (FIFO, cancel, stale answers, `pausing` and `refitting`), its data-plane
// breaker, quarantine and version writes. The machine is the real one; only its two injected
// side effects are stand-ins: `discover`, a promise the test settles when it says, and
// `probeTicker`, whose reports the test sends. Time is XState's simulated clock: it only moves
// when a test moves it.

import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, fromPromise, SimulatedClock, type InputFrom } from 'xstate';
import {
  breakerOf,
  engineMachine,
  lifecycleOf,
  type CommandOp,
  type EngineCommand,
  type EngineEmitted,
  type EngineEvent,
  type EngineInput,
} from '../../actors/engine.ts';

const INPUT: EngineInput = {
  workerId: 'w1',
  url: 'http://127.0.0.1:30000',
  seedVersion: '7',
  probeIntervalMs: 1_000,
  probeFailureThreshold: 3,
  retryIntervalMs: 5_000,
  breakerThreshold: 3,
  breakerCooldownMs: 10_000,
};

/** One invocation of `discover`, settled by the test. */
interface Discovery {
  workerId: string;
  resolve(): void;
  reject(err: unknown): void;
}

/** What the machine gives its probe ticker, as the machine declares it (these tests read `intervalMs` and `quiet`). */
type ProbeInput = InputFrom<NonNullable<NonNullable<Parameters<typeof engineMachine.provide>[0]['actors']>['probeTicker']>>;

/** One invocation of `probeTicker`: the test reports through `send`; `stopped` once the machine stopped it. */
interface Ticker {
  input: ProbeInput;
  send(event: EngineEvent): void;
  stopped: boolean;
}

/** Lets a settled discovery promise reach the machine (its answer is delivered asynchronously). */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

const cmd = (token: string, op: CommandOp = 'other'): EngineCommand => ({ token, op, payload: { path: token } });

function start(over: Partial<EngineInput> = {}) {
  const clock = new SimulatedClock();
  const discoveries: Discovery[] = [];
  const tickers: Ticker[] = [];
  const discover = fromPromise<void, { workerId: string }>(
    ({ input }) => new Promise<void>((resolve, reject) => discoveries.push({ workerId: input.workerId, resolve, reject })),
  );
  const probeTicker = fromCallback<EngineEvent, ProbeInput>(({ input, sendBack }) => {
    const ticker: Ticker = { input, send: sendBack, stopped: false };
    tickers.push(ticker);
    return () => {
      ticker.stopped = true;
    };
  });
  const actor = createActor(engineMachine.provide({ actors: { discover, probeTicker } }), { clock, input: { ...INPUT, ...over } });
  const emitted: EngineEmitted[] = [];
  actor.on('command.run', (e) => emitted.push(e));
  actor.on('command.abort', (e) => emitted.push(e));
  actor.on('command.done', (e) => emitted.push(e));
  actor.start();

  const snap = () => actor.getSnapshot();
  const h = {
    actor,
    clock,
    discoveries,
    tickers,
    emitted,
    snap,
    ctx: () => snap().context,
    lifecycle: () => lifecycleOf(snap()),
    breaker: () => breakerOf(snap()),
    send: (event: EngineEvent) => actor.send(event),
    /** The probe tickers the machine is running now. */
    running: () => tickers.filter((t) => !t.stopped),
    /** The one running ticker (fails the test when there is not exactly one). */
    ticker: () => {
      const live = tickers.filter((t) => !t.stopped);
      expect(live).toHaveLength(1);
      return live[0]!;
    },
    /** Settles the latest discovery with success and lets its answer in. */
    discovered: async () => {
      discoveries.at(-1)!.resolve();
      await flush();
    },
    failDiscovery: async (err: unknown) => {
      discoveries.at(-1)!.reject(err);
      await flush();
    },
    /** The tokens of the emitted events of one type, in order. */
    tokens: (type: EngineEmitted['type']) => emitted.filter((e) => e.type === type).map((e) => ('command' in e ? e.command.token : e.token)),
    enqueue: (...commands: EngineCommand[]) => commands.forEach((command) => actor.send({ type: 'cmd.enqueue', command })),
    result: (token: string, result: { outcome: unknown; control?: 'active' | 'paused' | 'asleep'; version?: string } | { error: string } = { outcome: 'ok' }) =>
      actor.send({ type: 'cmd.result', token, result }),
  };
  return h;
}

/** An engine whose first discovery succeeded: `serving`, with one loud probe ticker. */
async function serving(over: Partial<EngineInput> = {}) {
  const h = start(over);
  await h.discovered();
  expect(h.lifecycle()).toBe('serving');
  return h;
}

const failed = (error = 'connect ECONNREFUSED'): EngineEvent => ({ type: 'probe.failed', error });

describe('engine: registering and discovery', () => {
  it('starts in registering, discovering its own worker, with no probe and no command running', () => {
    const h = start();
    expect(h.lifecycle()).toBe('registering');
    expect(h.discoveries.map((d) => d.workerId)).toEqual(['w1']);
    expect(h.tickers).toEqual([]);
    expect(h.snap().value).toMatchObject({ commands: 'idle', breaker: 'closed' });
  });

  it('seeds the version from the registration (source registration), or none when unversioned', () => {
    expect(start().ctx()).toMatchObject({ version: '7', versionSource: 'registration', control: 'active', controlSource: 'engine', quarantine: null });
    const bare = start({ seedVersion: undefined }).ctx();
    expect(bare.version).toBeUndefined();
    expect(bare.versionSource).toBeUndefined();
  });

  it('goes online after discovery and rests in serving, probed loudly every probe interval', async () => {
    const h = await serving();
    expect(h.snap().value).toMatchObject({ lifecycle: { online: 'serving' } });
    expect(h.ticker().input).toMatchObject({ intervalMs: 1_000, quiet: false });
  });

  it('a failed discovery makes it unreachable with the error, unprobed, until the retry interval sends it back to registering', async () => {
    const h = start();
    await h.failDiscovery(new Error('no route to host'));
    expect(h.lifecycle()).toBe('unreachable');
    expect(h.ctx().lastError).toBe('Error: no route to host');
    expect(h.running()).toEqual([]);
    h.clock.increment(4_999);
    expect(h.lifecycle()).toBe('unreachable');
    expect(h.discoveries).toHaveLength(1);
    h.clock.increment(1);
    expect(h.lifecycle()).toBe('registering');
    expect(h.discoveries).toHaveLength(2);
    await h.discovered();
    expect(h.lifecycle()).toBe('serving');
    expect(h.ctx().lastError).toBeUndefined();
  });

  it('keeps retrying every retry interval while discovery keeps failing', async () => {
    const h = start({ retryIntervalMs: 2_000 });
    for (let i = 1; i <= 3; i++) {
      await h.failDiscovery(new Error(`refused ${i}`));
      expect(h.lifecycle()).toBe('unreachable');
      expect(h.ctx().lastError).toBe(`Error: refused ${i}`);
      h.clock.increment(2_000);
      expect(h.discoveries).toHaveLength(i + 1);
    }
    expect(h.lifecycle()).toBe('registering');
  });

  it('a control state written while registering or unreachable is where discovery lands', async () => {
    const h = start();
    h.send({ type: 'control.set', control: 'paused' });
    expect(h.lifecycle()).toBe('registering');
    await h.discovered();
    expect(h.lifecycle()).toBe('paused');

    const u = start();
    await u.failDiscovery(new Error('down'));
    u.send({ type: 'control.set', control: 'asleep' });
    expect(u.lifecycle()).toBe('unreachable');
    u.clock.increment(5_000);
    await u.discovered();
    expect(u.lifecycle()).toBe('asleep');
    expect(u.ctx().control).toBe('asleep');
  });
});

describe('engine: probes', () => {
  it('failures below the threshold keep it serving and are counted; the threshold-th in a row makes it unreachable', async () => {
    const h = await serving();
    const t = h.ticker();
    t.send(failed());
    t.send(failed());
    expect(h.lifecycle()).toBe('serving');
    expect(h.ctx().probeFailures).toBe(2);
    t.send(failed('timed out after 1000 ms'));
    expect(h.lifecycle()).toBe('unreachable');
    expect(h.ctx()).toMatchObject({ lastError: 'timed out after 1000 ms', probeFailures: 0 });
    expect(t.stopped).toBe(true);
    expect(h.running()).toEqual([]);
  });

  it('a probe that answers resets the count: failures must come in a row', async () => {
    const h = await serving();
    const t = h.ticker();
    t.send(failed());
    t.send(failed());
    t.send({ type: 'probe.ok' });
    expect(h.ctx().probeFailures).toBe(0);
    t.send(failed());
    t.send(failed());
    expect(h.lifecycle()).toBe('serving');
  });

  it('a threshold of 1 makes the first failed probe enough', async () => {
    const h = await serving({ probeFailureThreshold: 1 });
    h.ticker().send(failed());
    expect(h.lifecycle()).toBe('unreachable');
  });

  it('an unreachable engine comes back through registering after the retry interval, with a new probe', async () => {
    const h = await serving();
    for (let i = 0; i < 3; i++) h.ticker().send(failed());
    expect(h.lifecycle()).toBe('unreachable');
    h.clock.increment(5_000);
    expect(h.lifecycle()).toBe('registering');
    expect(h.discoveries).toHaveLength(2);
    await h.discovered();
    expect(h.lifecycle()).toBe('serving');
    expect(h.ticker()).toBe(h.tickers.at(-1));
    expect(h.tickers).toHaveLength(2);
  });

  it('paused and asleep engines get a quiet probe, and one that dies while paused is noticed', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused' });
    expect(h.ticker().input).toMatchObject({ intervalMs: 1_000, quiet: true });
    h.send({ type: 'control.set', control: 'asleep' });
    expect(h.ticker().input.quiet).toBe(true);
    h.send({ type: 'control.set', control: 'paused' });
    for (let i = 0; i < 3; i++) h.ticker().send(failed());
    expect(h.lifecycle()).toBe('unreachable');
    expect(h.ctx().control).toBe('paused');
  });
});

describe('engine: control writes and the pause a probe reads', () => {
  it('control.set moves it between serving, paused and asleep, and records the control state', async () => {
    const h = await serving();
    const path: Array<[string, string]> = [];
    for (const control of ['paused', 'asleep', 'active', 'asleep', 'paused', 'active'] as const) {
      h.send({ type: 'control.set', control });
      path.push([control, h.lifecycle()]);
      expect(h.ctx().control).toBe(control);
    }
    expect(path).toEqual([
      ['paused', 'paused'],
      ['asleep', 'asleep'],
      ['active', 'serving'],
      ['asleep', 'asleep'],
      ['paused', 'paused'],
      ['active', 'serving'],
    ]);
  });

  it('records who wrote the control state: an operator (api) or the engine', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused', source: 'api' });
    expect(h.ctx().controlSource).toBe('api');
    h.send({ type: 'control.set', control: 'paused' });
    expect(h.ctx().controlSource).toBe('engine');
  });

  it('a paused engine whose quiet probe reads it admitting requests goes back to serving', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused' });
    h.ticker().send(failed());
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.lifecycle()).toBe('serving');
    expect(h.ctx()).toMatchObject({ control: 'active', controlSource: 'engine', probeFailures: 0 });
    expect(h.ticker().input.quiet).toBe(false);
  });

  it('a probe that reads it still paused, or cannot tell, leaves it paused', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused' });
    h.ticker().send({ type: 'probe.ok', paused: true });
    h.ticker().send({ type: 'probe.ok' });
    expect(h.lifecycle()).toBe('paused');
    expect(h.ctx().control).toBe('paused');
  });

  it("an operator's pause (source api) is kept whatever the probe reads", async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused', source: 'api' });
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.lifecycle()).toBe('paused');
    expect(h.ctx()).toMatchObject({ control: 'paused', controlSource: 'api' });
  });

  it('a paused engine stays paused while a command runs, whatever the probe reads, and follows the probe once it is done', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused' });
    h.enqueue(cmd('flush'));
    expect(h.lifecycle()).toBe('paused');
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.lifecycle()).toBe('paused');
    h.result('flush');
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.lifecycle()).toBe('serving');
  });

  it('an asleep engine is not woken by a probe that reads it admitting requests', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'asleep' });
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.lifecycle()).toBe('asleep');
  });
});

describe('engine: re-registration', () => {
  it('registration.changed sends a serving engine back to registering: its probe stops and discovery runs again', async () => {
    const h = await serving();
    const t = h.ticker();
    h.send({ type: 'registration.changed', seedVersion: '7', versionChanged: false });
    expect(h.lifecycle()).toBe('registering');
    expect(t.stopped).toBe(true);
    expect(h.discoveries).toHaveLength(2);
    await h.discovered();
    expect(h.lifecycle()).toBe('serving');
  });

  it('re-seeds the version (source registration) only when the registration changed it', async () => {
    const h = await serving();
    h.send({ type: 'version.set', version: '9', source: 'passthrough' });
    h.send({ type: 'registration.changed', seedVersion: '3', versionChanged: false });
    expect(h.ctx()).toMatchObject({ version: '9', versionSource: 'passthrough' });
    h.send({ type: 'registration.changed', seedVersion: '3', versionChanged: true });
    expect(h.ctx()).toMatchObject({ version: '3', versionSource: 'registration' });
    h.send({ type: 'registration.changed', seedVersion: undefined, versionChanged: true });
    expect(h.ctx().version).toBeUndefined();
    expect(h.ctx().versionSource).toBeUndefined();
  });

  it('from unreachable: registers at once, and the retry timer it left no longer fires', async () => {
    const h = start();
    await h.failDiscovery(new Error('down'));
    h.clock.increment(1_000);
    h.send({ type: 'registration.changed', versionChanged: false });
    expect(h.lifecycle()).toBe('registering');
    expect(h.discoveries).toHaveLength(2);
    h.clock.increment(10_000);
    expect(h.discoveries).toHaveLength(2);
  });

  it('while registering: discovery starts over, and the answer of the one it left is ignored', async () => {
    const h = start();
    const first = h.discoveries[0]!;
    h.send({ type: 'registration.changed', versionChanged: false });
    expect(h.discoveries).toHaveLength(2);
    first.resolve();
    await flush();
    expect(h.lifecycle()).toBe('registering');
    await h.discovered();
    expect(h.lifecycle()).toBe('serving');
  });

  it('keeps the control state, the quarantine and the breaker across a re-registration', async () => {
    const h = await serving({ breakerThreshold: 1 });
    h.send({ type: 'quarantine.set', reason: 'behind_fleet' });
    h.send({ type: 'dp.failure' });
    h.send({ type: 'control.set', control: 'paused' });
    h.send({ type: 'registration.changed', versionChanged: false });
    await h.discovered();
    expect(h.lifecycle()).toBe('paused');
    expect(h.ctx().quarantine).toBe('behind_fleet');
    expect(h.breaker()).toBe('open');
  });
});

describe('engine: commands', () => {
  it('runs queued commands one at a time in the order they came: the next only after the current one answered', async () => {
    const h = await serving();
    h.enqueue(cmd('a'), cmd('b'), cmd('c'));
    expect(h.tokens('command.run')).toEqual(['a']);
    expect(h.ctx().current?.token).toBe('a');
    expect(h.ctx().queue.map((c) => c.token)).toEqual(['b', 'c']);
    h.result('a', { outcome: 'A' });
    expect(h.tokens('command.run')).toEqual(['a', 'b']);
    h.result('b', { outcome: 'B' });
    h.result('c', { outcome: 'C' });
    expect(h.emitted).toEqual([
      { type: 'command.run', command: cmd('a') },
      { type: 'command.done', token: 'a', result: { outcome: 'A' } },
      { type: 'command.run', command: cmd('b') },
      { type: 'command.done', token: 'b', result: { outcome: 'B' } },
      { type: 'command.run', command: cmd('c') },
      { type: 'command.done', token: 'c', result: { outcome: 'C' } },
    ]);
    expect(h.snap().value).toMatchObject({ commands: 'idle' });
    expect(h.ctx().current).toBeUndefined();
    expect(h.ctx().queue).toEqual([]);
  });

  it('a command enqueued after the queue drained runs at once', async () => {
    const h = await serving();
    h.enqueue(cmd('a'));
    h.result('a');
    h.enqueue(cmd('b'));
    expect(h.tokens('command.run')).toEqual(['a', 'b']);
    expect(h.snap().value).toMatchObject({ commands: 'busy' });
  });

  it('a failed command answers with its error and the next one starts', async () => {
    const h = await serving();
    h.enqueue(cmd('a'), cmd('b'));
    h.result('a', { error: 'upstream_unreachable' });
    expect(h.emitted.slice(1)).toEqual([
      { type: 'command.done', token: 'a', result: { error: 'upstream_unreachable' } },
      { type: 'command.run', command: cmd('b') },
    ]);
    expect(h.lifecycle()).toBe('serving');
  });

  it('cancelling a queued command drops it and answers it cancelled; the running one goes on', async () => {
    const h = await serving();
    h.enqueue(cmd('a'), cmd('b'), cmd('c'));
    h.send({ type: 'cmd.cancel', token: 'b' });
    expect(h.emitted.slice(1)).toEqual([{ type: 'command.done', token: 'b', result: { error: 'cancelled' } }]);
    expect(h.ctx().queue.map((c) => c.token)).toEqual(['c']);
    expect(h.ctx().current?.token).toBe('a');
    h.result('a');
    h.result('c');
    expect(h.tokens('command.run')).toEqual(['a', 'c']);
    expect(h.tokens('command.abort')).toEqual([]);
  });

  it('cancelling the running command aborts it, answers it cancelled and starts the next', async () => {
    const h = await serving();
    h.enqueue(cmd('a'), cmd('b'));
    h.send({ type: 'cmd.cancel', token: 'a' });
    expect(h.emitted).toEqual([
      { type: 'command.run', command: cmd('a') },
      { type: 'command.abort', token: 'a' },
      { type: 'command.done', token: 'a', result: { error: 'cancelled' } },
      { type: 'command.run', command: cmd('b') },
    ]);
    expect(h.ctx().current?.token).toBe('b');
    // The aborted call's own answer, arriving late, is nobody's.
    h.result('a', { outcome: 'late' });
    expect(h.tokens('command.done')).toEqual(['a']);
    expect(h.ctx().current?.token).toBe('b');
  });

  it('cancelling the only running command leaves the queue idle', async () => {
    const h = await serving();
    h.enqueue(cmd('a'));
    h.send({ type: 'cmd.cancel', token: 'a' });
    expect(h.snap().value).toMatchObject({ commands: 'idle' });
    expect(h.ctx().current).toBeUndefined();
  });

  it('cancelling a token it does not hold does nothing', async () => {
    const h = await serving();
    h.send({ type: 'cmd.cancel', token: 'nobody' });
    h.enqueue(cmd('a'));
    h.send({ type: 'cmd.cancel', token: 'nobody' });
    expect(h.emitted).toEqual([{ type: 'command.run', command: cmd('a') }]);
    expect(h.ctx().current?.token).toBe('a');
  });

  it('a result for a token that is not the running one is ignored', async () => {
    const h = await serving();
    h.enqueue(cmd('a'), cmd('b'));
    h.result('b', { outcome: 'early', version: '99' });
    h.result('zzz', { outcome: 'stray' });
    expect(h.emitted).toEqual([{ type: 'command.run', command: cmd('a') }]);
    expect(h.ctx()).toMatchObject({ current: cmd('a'), queue: [cmd('b')], version: '7' });
    h.result('a');
    expect(h.tokens('command.run')).toEqual(['a', 'b']);
  });

  it('a refit command makes the engine refitting while it runs, unprobed, and it rests where its control state says after', async () => {
    const h = await serving();
    const t = h.ticker();
    h.enqueue(cmd('load', 'refit'));
    expect(h.lifecycle()).toBe('refitting');
    expect(t.stopped).toBe(true);
    expect(h.running()).toEqual([]);
    h.result('load', { outcome: 'ok', version: '8' });
    expect(h.lifecycle()).toBe('serving');
    expect(h.ctx()).toMatchObject({ version: '8', versionSource: 'passthrough' });
    expect(h.ticker().input.quiet).toBe(false);
  });

  it('a control write during a refit is recorded and applied when the refit ends, not before', async () => {
    const h = await serving();
    h.enqueue(cmd('load', 'refit'));
    h.send({ type: 'control.set', control: 'paused' });
    expect(h.lifecycle()).toBe('refitting');
    expect(h.ctx().control).toBe('paused');
    h.result('load', { error: 'upstream_error' });
    expect(h.lifecycle()).toBe('paused');
  });

  it('a pause command makes the engine pausing from the moment it is sent; its answer makes it paused', async () => {
    const h = await serving();
    h.enqueue(cmd('pause', 'pause'));
    expect(h.lifecycle()).toBe('pausing');
    expect(h.running()).toEqual([]);
    h.result('pause', { outcome: 'ok', control: 'paused' });
    expect(h.lifecycle()).toBe('paused');
    expect(h.ctx()).toMatchObject({ control: 'paused', controlSource: 'engine' });
    expect(h.ticker().input.quiet).toBe(true);
  });

  it('a pause that fails sends the engine back to serving', async () => {
    const h = await serving();
    h.enqueue(cmd('pause', 'pause'));
    h.result('pause', { error: 'upstream_unreachable' });
    expect(h.lifecycle()).toBe('serving');
    expect(h.ctx().control).toBe('active');
  });

  it('cancelling a running pause or refit ends pausing or refitting as a failed one would', async () => {
    for (const op of ['pause', 'refit'] as const) {
      const h = await serving();
      h.enqueue(cmd('x', op), cmd('next'));
      h.send({ type: 'cmd.cancel', token: 'x' });
      expect(h.lifecycle()).toBe('serving');
      expect(h.tokens('command.run')).toEqual(['x', 'next']);
    }
  });

  it('a refit transaction on one engine: pausing, then refitting straight from the pause, then paused until the resume', async () => {
    const h = await serving();
    h.enqueue(cmd('pause', 'pause'), cmd('load', 'refit'), cmd('resume'));
    const seen = [h.lifecycle()];
    h.result('pause', { outcome: 'ok', control: 'paused' });
    seen.push(h.lifecycle());
    h.result('load', { outcome: 'ok', version: '8' });
    seen.push(h.lifecycle());
    h.result('resume', { outcome: 'ok', control: 'active' });
    seen.push(h.lifecycle());
    expect(seen).toEqual(['pausing', 'refitting', 'paused', 'serving']);
    expect(h.tokens('command.run')).toEqual(['pause', 'load', 'resume']);
    expect(h.ctx()).toMatchObject({ version: '8', versionSource: 'passthrough', control: 'active' });
  });

  it('what a result teaches reaches the context: version (source passthrough) and control (source engine)', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'asleep', source: 'api' });
    h.enqueue(cmd('wake'));
    h.result('wake', { outcome: 'ok', control: 'active', version: '12' });
    expect(h.ctx()).toMatchObject({ version: '12', versionSource: 'passthrough', control: 'active', controlSource: 'engine' });
    expect(h.lifecycle()).toBe('serving');
  });

  it('a result without control or version changes neither', async () => {
    const h = await serving();
    h.enqueue(cmd('flush'));
    h.result('flush', { outcome: 'ok' });
    expect(h.ctx()).toMatchObject({ version: '7', versionSource: 'registration', control: 'active' });
  });

  it('a command while registering runs and answers, and leaves the lifecycle alone', async () => {
    const h = start();
    h.enqueue(cmd('load', 'refit'));
    expect(h.tokens('command.run')).toEqual(['load']);
    expect(h.lifecycle()).toBe('registering');
    h.result('load', { outcome: 'ok', version: '8' });
    expect(h.tokens('command.done')).toEqual(['load']);
    expect(h.ctx().version).toBe('8');
    await h.discovered();
    expect(h.lifecycle()).toBe('serving');
  });
});

describe('engine: the data-plane breaker', () => {
  it('opens at the threshold-th consecutive failure, not before', async () => {
    const h = await serving();
    h.send({ type: 'dp.failure' });
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('closed');
    expect(h.ctx().breakerFailures).toBe(2);
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('open');
    expect(h.ctx().breakerFailures).toBe(0);
  });

  it('a success resets the count: failures must come in a row', async () => {
    const h = await serving();
    h.send({ type: 'dp.failure' });
    h.send({ type: 'dp.failure' });
    h.send({ type: 'dp.success' });
    expect(h.ctx().breakerFailures).toBe(0);
    h.send({ type: 'dp.failure' });
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('closed');
  });

  it('open turns half open after the cooldown; a success there closes it', async () => {
    const h = await serving();
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    h.clock.increment(9_999);
    expect(h.breaker()).toBe('open');
    h.clock.increment(1);
    expect(h.breaker()).toBe('half_open');
    h.send({ type: 'dp.success' });
    expect(h.breaker()).toBe('closed');
    // Closed again with a fresh count.
    h.send({ type: 'dp.failure' });
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('closed');
  });

  it('a failure while half open opens it again, for another full cooldown', async () => {
    const h = await serving();
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    h.clock.increment(10_000);
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('open');
    h.clock.increment(9_999);
    expect(h.breaker()).toBe('open');
    h.clock.increment(1);
    expect(h.breaker()).toBe('half_open');
  });

  it('traffic while open neither closes it nor restarts its cooldown', async () => {
    const h = await serving();
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    h.clock.increment(5_000);
    h.send({ type: 'dp.success' });
    expect(h.breaker()).toBe('open');
    h.send({ type: 'dp.failure' });
    h.clock.increment(5_000);
    expect(h.breaker()).toBe('half_open');
  });

  it('failures while the engine is not active say nothing: a planned pause cannot trip it', async () => {
    for (const control of ['paused', 'asleep'] as const) {
      const h = await serving();
      h.send({ type: 'control.set', control });
      for (let i = 0; i < 5; i++) h.send({ type: 'dp.failure' });
      expect(h.breaker()).toBe('closed');
      expect(h.ctx().breakerFailures).toBe(0);
    }
  });

  it('failures while a pause or refit command runs say nothing; while another command runs they count', async () => {
    for (const op of ['pause', 'refit'] as const) {
      const h = await serving();
      h.enqueue(cmd('x', op));
      for (let i = 0; i < 5; i++) h.send({ type: 'dp.failure' });
      expect(h.breaker()).toBe('closed');
      expect(h.ctx().breakerFailures).toBe(0);
    }
    const h = await serving();
    h.enqueue(cmd('flush'));
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('open');
  });

  it('a count begun while active is not completed during a planned pause or refit, and goes on after it', async () => {
    for (const plan of ['paused', 'pause', 'refit'] as const) {
      const h = await serving();
      h.send({ type: 'dp.failure' });
      h.send({ type: 'dp.failure' });
      if (plan === 'paused') h.send({ type: 'control.set', control: 'paused' });
      else h.enqueue(cmd('x', plan));
      h.send({ type: 'dp.failure' });
      expect(h.breaker()).toBe('closed');
      expect(h.ctx().breakerFailures).toBe(2);
      if (plan === 'paused') h.send({ type: 'control.set', control: 'active' });
      else h.result('x', { error: 'upstream_error' });
      h.send({ type: 'dp.failure' });
      expect(h.breaker()).toBe('open');
    }
  });

  it('a failure while half open and paused leaves it half open', async () => {
    const h = await serving();
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    h.clock.increment(10_000);
    h.send({ type: 'control.set', control: 'paused' });
    h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('half_open');
  });

  it('the breaker is its own region: probes and control calls never move it, and it never moves the lifecycle', async () => {
    const h = await serving();
    h.enqueue(cmd('a'));
    h.result('a', { error: 'upstream_unreachable' });
    h.ticker().send(failed());
    h.ticker().send(failed());
    expect(h.breaker()).toBe('closed');
    expect(h.ctx().breakerFailures).toBe(0);
    for (let i = 0; i < 3; i++) h.send({ type: 'dp.failure' });
    expect(h.breaker()).toBe('open');
    expect(h.lifecycle()).toBe('serving');
  });
});

describe('engine: quarantine and version writes', () => {
  it('quarantine.set holds the reason and quarantine.clear lets it out, in any lifecycle state', async () => {
    const h = start();
    h.send({ type: 'quarantine.set', reason: 'behind_fleet' });
    expect(h.ctx().quarantine).toBe('behind_fleet');
    await h.discovered();
    h.send({ type: 'quarantine.set', reason: 'verify_failed' });
    expect(h.ctx().quarantine).toBe('verify_failed');
    h.send({ type: 'quarantine.clear' });
    expect(h.ctx().quarantine).toBeNull();
    expect(h.lifecycle()).toBe('serving');
  });

  it('version.set writes the version with its source; an undefined version has no source', async () => {
    const h = await serving();
    h.send({ type: 'version.set', version: '42', source: 'api' });
    expect(h.ctx()).toMatchObject({ version: '42', versionSource: 'api' });
    h.send({ type: 'version.set', version: '43', source: 'passthrough' });
    expect(h.ctx()).toMatchObject({ version: '43', versionSource: 'passthrough' });
    h.send({ type: 'version.set', version: undefined, source: 'api' });
    expect(h.ctx().version).toBeUndefined();
    expect(h.ctx().versionSource).toBeUndefined();
  });
});

describe('engine: a probe that finds nothing new changes nothing', () => {
  it('serving: probe.ok with no failure counted leaves the very same snapshot', async () => {
    const h = await serving();
    const before = h.snap();
    h.ticker().send({ type: 'probe.ok' });
    expect(h.snap()).toBe(before);
  });

  it('paused and asleep: a quiet probe that reads nothing new leaves the very same snapshot', async () => {
    const h = await serving();
    h.send({ type: 'control.set', control: 'paused' });
    let before = h.snap();
    h.ticker().send({ type: 'probe.ok', paused: true });
    h.ticker().send({ type: 'probe.ok' });
    expect(h.snap()).toBe(before);
    h.send({ type: 'control.set', control: 'asleep' });
    before = h.snap();
    h.ticker().send({ type: 'probe.ok', paused: false });
    expect(h.snap()).toBe(before);
  });

  it('a probe that ends a run of failures does make a new snapshot, with the count reset', async () => {
    const h = await serving();
    h.ticker().send(failed());
    const before = h.snap();
    h.ticker().send({ type: 'probe.ok' });
    expect(h.snap()).not.toBe(before);
    expect(h.ctx().probeFailures).toBe(0);
  });
});

describe('engine: a pause or refit on its way keeps the engine out of routing', () => {
  it('a control write while a pause is on its way leaves the engine pausing: its answer decides where it rests', async () => {
    const h = await serving();
    h.enqueue(cmd('pause', 'pause'));
    h.send({ type: 'control.set', control: 'active', source: 'api' });
    expect(h.lifecycle()).toBe('pausing');
    expect(h.running()).toEqual([]);
  });

  it('a sibling rank reporting paused while a pause is on its way leaves the engine pausing, with no probe started', async () => {
    const h = await serving();
    h.enqueue(cmd('pause', 'pause'));
    h.send({ type: 'control.set', control: 'paused' });
    expect(h.lifecycle()).toBe('pausing');
    expect(h.running()).toEqual([]);
  });

  it('a re-registration during a refit: still refitting after rediscovery while the refit runs', async () => {
    const h = await serving();
    h.enqueue(cmd('load', 'refit'));
    h.send({ type: 'registration.changed', versionChanged: false });
    await h.discovered();
    expect(h.lifecycle()).toBe('refitting');
  });
});
