// One connection per engine: an HTTP engine's control calls go over the connection its probes
// keep open, not over a second one (at 10,000 engines, two sockets each went past the host's
// open-file limit). Judged on the engine's side: the simulator records the client port of every
// request, and requests from one port came over one connection.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('one connection per HTTP engine', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ probeIntervalSecs: 1, rl: { controlTimeoutSecs: 20 } });
    await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('control calls reuse the connection the probes use', async () => {
    const [row] = (await t.http('GET', '/v1/rl/workers')).json.workers;
    await sim.clearRequests();
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 400));
      expect((await t.http('POST', `/v1/rl/workers/${row.id}/engine/flush_cache`, { body: {} })).status).toBe(200);
    }
    const seen = await sim.requests();
    const probePorts = new Set(seen.filter((q) => q.path === '/health').map((q) => q.remotePort));
    const controlPorts = seen.filter((q) => q.path === '/flush_cache').map((q) => q.remotePort);
    expect(probePorts.size, 'probes seen').toBeGreaterThan(0);
    expect(controlPorts).toHaveLength(5);
    // A probe may be in flight when a call goes out (a second connection then opens), but the
    // calls must ride the probes' connection, not one of their own.
    expect(
      controlPorts.filter((p) => probePorts.has(p)).length,
      `control ports ${controlPorts.join(',')}, probe ports ${[...probePorts].join(',')}`,
    ).toBeGreaterThan(0);
  });

  it('a control call that holds the connection for several probe intervals does not make the engine unreachable', async () => {
    const [row] = (await t.http('GET', '/v1/rl/workers')).json.workers;
    // 8 s on the connection: a probe queued behind it would time out after one interval (1 s),
    // every 2 s or so: past the failure threshold of 3.
    await sim.setFaults({ route: 'flush_cache', delayMs: 8_000, times: 1 });
    const states = new Set<string>();
    let done = false;
    const call = t.http('POST', `/v1/rl/workers/${row.id}/engine/flush_cache`, { body: {} }).finally(() => (done = true));
    while (!done) {
      states.add((await t.http('GET', `/v1/rl/workers/${row.id}`)).json.state);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect((await call).status).toBe(200);
    expect([...states]).toEqual(['serving']);
  });
});
