// How many legs of one fan-out run at once (docs/rl-control-plane.md, "Fan-out concurrency"):
// a call that moves no weights goes to every engine at once by default; a request may hold it to
// its own figure with `x-rlgate-fanout-concurrency`, and a bad figure is a 400 that calls no
// engine. Judged on what the engines saw: each simulator answers after a fixed delay and records
// when each call arrived, so calls sent one at a time arrive at least that delay apart, and calls
// sent together all arrive before the first answer could have come back.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const DELAY_MS = 1_500;

describe('fan-out concurrency', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  const arrivals = async (path: string) => {
    const times: number[] = [];
    for (const s of sims) for (const r of await s.requests()) if (r.path === path) times.push(Date.parse(r.time));
    return times.sort((a, b) => a - b);
  };

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({});
    await t.register(sims.map((s) => s.url));
  });
  beforeEach(async () => {
    for (const s of sims) {
      await s.clearRequests();
      await s.setFaults({ route: 'flush_cache', delayMs: DELAY_MS });
    }
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('by default a call that moves no weights reaches every engine before the first answers', async () => {
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { body: {} });
    expect(res.status, res.text).toBe(200);
    const times = await arrivals('/flush_cache');
    expect(times).toHaveLength(3);
    expect(times.at(-1)! - times[0]!, `arrivals ${times.map((x) => x - times[0]!).join(', ')} ms`).toBeLessThan(DELAY_MS);
  });

  it('a request that asks for one at a time gets one at a time', async () => {
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { body: {}, headers: { 'x-rlgate-fanout-concurrency': '1' } });
    expect(res.status, res.text).toBe(200);
    expect(res.json.succeeded).toBe(3);
    const times = await arrivals('/flush_cache');
    expect(times).toHaveLength(3);
    // Each call leaves only once the one before has answered, which takes the delay.
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!, `arrival ${i}`).toBeGreaterThanOrEqual(DELAY_MS - 50);
  });

  it.each(['0', '-1', '1.5', 'x', '65537', ''])('x-rlgate-fanout-concurrency: %j is a 400 that calls no engine', async (value) => {
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { body: {}, headers: { 'x-rlgate-fanout-concurrency': value } });
    expect(res.status).toBe(400);
    expect(res.json.error).toBe('invalid_request');
    expect(res.json.message).toContain('x-rlgate-fanout-concurrency');
    expect(await arrivals('/flush_cache')).toEqual([]);
  });
});
