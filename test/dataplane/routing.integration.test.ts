// Issue 4 item 4 (`--policy least_inflight`, rlgate's routing before bounded_affinity): among the eligible engines the least
// in-flight one is picked (ties round-robin), and a routing key picks by rendezvous hashing,
// ignoring load, so that removing an engine moves only its keys. Where requests went is read
// from the simulators' own request records and the gateway's routed-worker header.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { defaultConfig } from '../../src/gateway/config.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

/** The gateway names the routed engine by URL in this header. */
const QUICK = { text: 'hi', sampling_params: { max_new_tokens: 1 } };
const ROUTED = 'x-smg-routed-worker-id';

async function generates(s: SimProcess): Promise<number> {
  return (await s.requests()).filter((r) => r.path === '/generate').length;
}

/** Waits until `cond` holds; fails with `what` after 10 s. */
async function until(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A streamed POST on its own socket (no agent): destroying `req` closes that socket for sure. */
function openStream(base: string, body: unknown): Promise<{ req: ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/generate`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
    req.on('error', () => {}); // destroyed on purpose at the end
    req.on('response', (res) => {
      res.on('error', () => {}).resume();
      resolve({ req, res });
    });
    req.once('error', reject);
    req.end(JSON.stringify(body));
  });
}

// rlgate's routing before bounded_affinity, kept as `--policy least_inflight`.
const LEAST_INFLIGHT = { routing: { ...defaultConfig().routing, policy: 'least_inflight' } };

describe('least in-flight first (--policy least_inflight)', () => {
  let slow: SimProcess;
  let fast: SimProcess;
  let t: TestGateway;
  const held: ClientRequest[] = [];

  beforeAll(async () => {
    // 20 tokens a second: a 100000-token stream stays open for the whole test, a 1-token answer
    // is quick.
    [slow, fast] = await Promise.all([spawnSglangSim(['--token-rate', '20']), spawnSglangSim(['--token-rate', '20'])]);
    t = await startTestGateway(LEAST_INFLIGHT);
  });
  afterAll(async () => {
    for (const c of held) c.destroy();
    await t?.close();
    await Promise.all([slow, fast].filter(Boolean).map((s) => s.stop()));
  });

  it('3 streams held on A → every new request goes to idle B; once A drains, both serve again', async () => {
    const [a] = await t.register([slow.url]);
    // Headers back = the stream is relayed and counted in flight on A.
    const streams = await Promise.all([0, 1, 2].map(() => openStream(t.url, { text: 'long', stream: true, sampling_params: { max_new_tokens: 30_000 } })));
    for (const st of streams) {
      held.push(st.req);
      expect(st.res.statusCode).toBe(200);
      expect(st.res.headers[ROUTED]).toBe(slow.url);
    }
    expect(t.gw.services.host.load(a!)).toBe(3);
    await t.register([fast.url], { ready: 2 });

    // Round-robin alone would send half of these to A.
    for (let i = 0; i < 8; i++) {
      const r = await t.http('POST', '/generate', { body: QUICK });
      expect(r.status, r.text).toBe(200);
      expect(r.headers[ROUTED]).toBe(fast.url);
    }
    expect(await generates(slow)).toBe(3);
    expect(await generates(fast)).toBe(8);

    // Concurrent requests: B's own in-flight rises, but stays below A's 3 for a burst of 2.
    const burst = await Promise.all([0, 1].map(() => t.http('POST', '/generate', { body: QUICK })));
    for (const r of burst) expect(r.headers[ROUTED]).toBe(fast.url);

    for (const c of held) c.destroy();
    await until('A to drain', () => t.gw.services.host.load(a!) === 0);
    await Promise.all([slow, fast].map((s) => s.clearRequests()));
    // An idle fleet: equal loads, ties broken round-robin, so both engines get requests.
    for (let i = 0; i < 6; i++) {
      const r = await t.http('POST', '/generate', { body: QUICK });
      expect(r.status, r.text).toBe(200);
    }
    expect(await generates(fast)).toBe(3);
    expect(await generates(slow)).toBe(3);
  });
});

describe('routing key: rendezvous hashing over the eligible engines (--policy least_inflight)', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];
  const keys = Array.from({ length: 300 }, (_, i) => `session-${i}`);
  const acquired: string[] = [];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2, 3].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway(LEAST_INFLIGHT);
    ids = await t.register(sims.map((s) => s.url));
  });
  afterEach(() => {
    for (const id of acquired.splice(0)) t.gw.services.host.release(id, 'neutral');
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  const pickFor = (key: string) => t.gw.services.router.pick({ routingKey: key })?.id;

  it('the same key always gets the same engine, and keys spread over all of them', () => {
    const owner = new Map(keys.map((k) => [k, pickFor(k)]));
    for (let round = 0; round < 3; round++) for (const k of keys) expect(pickFor(k)).toBe(owner.get(k));
    expect(new Set(owner.values())).toEqual(new Set(ids));
  });

  it('a key ignores load: its engine keeps it while busy; keyless requests avoid that engine', () => {
    const key = keys[0]!;
    const owner = pickFor(key)!;
    for (let i = 0; i < 5; i++) {
      t.gw.services.host.acquire(owner);
      acquired.push(owner);
    }
    for (let i = 0; i < 10; i++) {
      expect(pickFor(key)).toBe(owner);
      expect(t.gw.services.router.pick()?.id).not.toBe(owner);
    }
  });

  it('a paused engine is skipped for its keys, which come back to it on continue', async () => {
    const before = new Map(keys.map((k) => [k, pickFor(k)]));
    const victim = ids[1]!;
    const pause = await t.http('POST', `/v1/rl/workers/${victim}/engine/pause_generation`, { body: {} });
    expect(pause.status, pause.text).toBe(200);
    for (const k of keys) {
      const now = pickFor(k);
      if (before.get(k) === victim) expect(now).not.toBe(victim);
      else expect(now).toBe(before.get(k));
    }
    const cont = await t.http('POST', `/v1/rl/workers/${victim}/engine/continue_generation`, { body: {} });
    expect(cont.status, cont.text).toBe(200);
    for (const k of keys) expect(pickFor(k)).toBe(before.get(k));
  });

  it('removing a worker moves only the keys it held', async () => {
    const before = new Map(keys.map((k) => [k, pickFor(k)]));
    const removed = ids[2]!;
    const del = await t.http('DELETE', `/workers/${encodeURIComponent(removed)}`);
    expect(del.status, del.text).toBe(200);
    let moved = 0;
    for (const k of keys) {
      const now = pickFor(k);
      expect(now).toBeDefined();
      if (before.get(k) === removed) {
        moved++;
        expect(now).not.toBe(removed);
      } else expect(now).toBe(before.get(k));
    }
    expect(moved).toBeGreaterThan(0);
  });
});

describe('X-SMG-Routing-Key through the gateway', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('sends every request with the same key to the same engine', async () => {
    const seen = new Map<string, Set<string>>();
    for (const key of ['session-a', 'session-b', 'session-c', 'session-d']) {
      for (let i = 0; i < 5; i++) {
        const r = await t.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 1 } }, headers: { 'x-smg-routing-key': key } });
        expect(r.status).toBe(200);
        const set = seen.get(key) ?? new Set<string>();
        set.add(String(r.headers['x-smg-routed-worker-id']));
        seen.set(key, set);
      }
    }
    for (const [key, workers] of seen) expect(workers.size, key).toBe(1);
  });
});
