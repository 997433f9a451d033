// Property: whatever anyone publishes on the subjects a gateway answers or follows, the gateway
// never answers `internal_error`, stays healthy, runs no engine call it was not asked for in the
// gateway's own shape, and leaves no engine paused. Random JSON (wrong types, huge strings and
// arrays, unicode, deep nesting) and random bytes, over a real nats-server, a real gateway and a
// real simulator; judged on the simulator's own state and request record.

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Bus } from '../../src/bus/connection.ts';
import { encode } from '../../src/bus/codec.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { fuzzParams } from '../fixtures/fuzz.ts';
import { engineCalls, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const subj = subjects('rl');
const decoder = new TextDecoder();

/** JSON of every shape, with the sizes and characters hostile input has. */
const hostileJson = fc.oneof(
  fc.jsonValue({ maxDepth: 6 }),
  fc.string({ unit: 'grapheme', maxLength: 200 }),
  fc.array(fc.integer(), { maxLength: 2_000 }),
  fc.constant('x'.repeat(200_000)),
  fc.dictionary(fc.string({ maxLength: 20 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 20 }),
  // The right keys with the wrong values: closest to a real command, most likely to slip through.
  fc.record({ call: fc.jsonValue({ maxDepth: 3 }), requestId: fc.jsonValue({ maxDepth: 1 }) }),
  fc.record({
    requestId: fc.string(),
    calls: fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
    legs: fc.jsonValue({ maxDepth: 2 }),
    concurrency: fc.jsonValue({ maxDepth: 1 }),
  }),
  fc.record({ weight_version: fc.jsonValue({ maxDepth: 1 }), source: fc.jsonValue({ maxDepth: 2 }), selector: fc.jsonValue({ maxDepth: 1 }) }),
);
const payload = fc.oneof(
  { weight: 8, arbitrary: hostileJson.map((v) => encode(v)) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 512 }).filter((b) => b.length > 0) },
);

interface FeedEvent {
  event: string;
  data: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- assertions read it
}

/**
 * A watcher of GET /v1/rl/events: every event it reads, `snapshot` once the first one came, and
 * `done` with how the stream ended: `closed by the watcher` after close(), `ended by the gateway`,
 * or the error that cut it.
 */
function watchFleet(url: string) {
  const ctrl = new AbortController();
  const events: FeedEvent[] = [];
  let sawSnapshot!: () => void;
  const snapshot = new Promise<void>((r) => (sawSnapshot = r));
  const done: Promise<unknown> = (async () => {
    const res = await fetch(`${url}/v1/rl/events`, { headers: { accept: 'text/event-stream' }, signal: ctrl.signal });
    if (res.status !== 200) return `answered ${res.status}: ${await res.text()}`;
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done: ended } = await reader.read();
      if (ended) return 'ended by the gateway';
      buf += decoder.decode(value, { stream: true });
      for (let cut = buf.indexOf('\n\n'); cut >= 0; cut = buf.indexOf('\n\n')) {
        const lines = buf.slice(0, cut).split('\n');
        buf = buf.slice(cut + 2);
        const data = lines.find((l) => l.startsWith('data: '));
        if (data === undefined) continue; // a comment (keep-alive)
        const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? 'message';
        events.push({ event, data: JSON.parse(data.slice(6)) });
        if (event === 'snapshot') sawSnapshot();
      }
    }
  })().catch((err: unknown) => (ctrl.signal.aborted ? 'closed by the watcher' : err));
  return {
    events,
    snapshot,
    done,
    close: () => {
      ctrl.abort();
      return done;
    },
  };
}

describe('NATS subjects under random payloads', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let bus: Bus;
  let workerId: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    [workerId] = (await t.register([sim.url])) as [string];
    bus = await t.bus();
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('request subjects answer a reply or a request error, never internal_error; nothing reaches the engine; none is left paused', async () => {
    const requestSubjects = () => [subj.engineCmd(workerId), subj.replicaCmd(t.gw.replicaId), subj.replicaOutcomes(t.gw.replicaId), subj.refitRequest()];
    await sim.clearRequests();
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...requestSubjects()), payload, async (subject, data) => {
        const reply = await bus.nc.request(subject, data, { timeout: 10_000 });
        const code = reply.headers?.get('Rlgate-Error');
        if (code) expect(code, `${subject}: ${decoder.decode(reply.data).slice(0, 300)}`).not.toBe('internal_error');
      }),
      fuzzParams('request subjects', requestSubjects().length),
    );
    const calls = await engineCalls(sim);
    expect(calls.map((c) => c.path)).toEqual([]);
    expect((await sim.state()).paused).toBeNull();
    expect((await t.http('GET', '/health')).status).toBe(200);
  });

  it('followed subjects (notices, state events, cancels, refit events) take anything without harm', async () => {
    const followed = () => [subj.engineNotice(workerId), subj.engineState(workerId), subj.replicaCancel(t.gw.replicaId), subj.refitEvents('fuzz-refit')];
    // A live watcher of the fleet feed reads what these carry, from its snapshot on.
    const watcher = watchFleet(t.url);
    await Promise.race([watcher.snapshot, watcher.done.then((end) => Promise.reject(new Error(`the fleet stream ended before its snapshot: ${String(end)}`)))]);
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...followed()), payload, async (subject, data) => {
        bus.nc.publish(subject, data);
      }),
      fuzzParams('followed subjects', followed().length),
    );
    await bus.nc.flush();
    // Still whole: healthy, the engine listed and routable, a refit runs and leaves nothing paused.
    expect((await t.http('GET', '/health')).status).toBe(200);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string }>;
    expect(rows.map((r) => r.url)).toEqual([sim.url]);
    const refit = await t.http('POST', '/v1/rl/refits', {
      body: { refit_id: 'after-fuzz', weight_version: 'after-fuzz', source: { kind: 'disk', model_path: '/m/after-fuzz' } },
    });
    expect(refit.status, refit.text).toBe(200);
    expect((await sim.state()).paused).toBeNull();
    expect((await sim.state()).weightVersion).toBe('after-fuzz');
    // The watcher took every hostile event and still follows the fleet: the refit's report reaches it.
    await until('the refit report on the fleet stream', 10_000, async () =>
      watcher.events.find((e) => e.event === 'refit' && e.data?.refit_id === 'after-fuzz' && e.data.type === 'report'),
    ).catch(async (err: Error) => {
      throw new Error(`${err.message} (the stream: ${String(await Promise.race([watcher.done, 'still open']))})`);
    });
    const report = watcher.events.find((e) => e.event === 'refit' && e.data?.refit_id === 'after-fuzz' && e.data.type === 'report')!;
    expect(report.data.report).toMatchObject({ id: 'after-fuzz', status: 'succeeded' });
    expect(await watcher.close(), 'how the fleet stream ended').toBe('closed by the watcher');
  });
});
