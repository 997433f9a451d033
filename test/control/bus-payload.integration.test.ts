// Control calls cross NATS: a fan-out body travels once per replica (not once per engine), and a
// body the bus cannot carry is refused up front with 413 instead of failing every leg.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('control bodies over the bus', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2, 3, 4].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
    for (const s of sims) await s.setFaults({ route: 'echo_route', status: 200, body: { success: true } });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('fans a 2 MB body out to five engines, each receiving it byte for byte', async () => {
    const body = JSON.stringify({ blob: 'x'.repeat(2 * 1024 * 1024) });
    for (const s of sims) await s.clearRequests();
    const r = await t.http('POST', '/v1/rl/engine/echo_route?selector=worker_type%3Dregular', { raw: body, headers: { 'content-type': 'application/json' } });
    expect(r.status).toBe(200);
    expect(r.json.succeeded).toBe(5);
    for (const s of sims) {
      const seen = (await s.requests()).filter((q) => q.path === '/echo_route');
      expect(seen).toHaveLength(1);
      expect(seen[0]!.bodyBytes).toBe(Buffer.byteLength(body));
    }
  });

  it('refuses a body the bus cannot carry with 413, calling no engine', async () => {
    const body = JSON.stringify({ blob: 'x'.repeat(7 * 1024 * 1024) });
    for (const s of sims) await s.clearRequests();
    const fan = await t.http('POST', '/v1/rl/engine/echo_route?selector=worker_type%3Dregular', { raw: body, headers: { 'content-type': 'application/json' } });
    expect(fan.status).toBe(413);
    expect(fan.json.error).toBe('payload_too_large');
    expect(fan.json.limit).toEqual(expect.any(Number));
    const id = (await t.http('GET', '/v1/rl/workers')).json.workers[0].id;
    const one = await t.http('POST', `/v1/rl/workers/${id}/engine/echo_route`, { raw: body, headers: { 'content-type': 'application/json' } });
    expect(one.status).toBe(413);
    for (const s of sims) expect((await s.requests()).filter((q) => q.path === '/echo_route')).toHaveLength(0);
  });
});
