// An engine that dies and comes back: the actor goes unreachable (liveness probes), back through
// registering, and — because a restarted engine reports its own weights — the gateway stops
// claiming the version the engine held before it died.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

async function until<T>(what: string, probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: last ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('engine restart', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ probeIntervalSecs: 1, probeFailureThreshold: 1, retryIntervalSecs: 1 });
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('goes unreachable when it dies; back unversioned, below the fleet version, it is quarantined until a refit brings it up', async () => {
    const r = await t.http('POST', '/v1/rl/refits', { body: { weight_version: '5', source: { kind: 'disk', model_path: '/m' } } });
    expect(r.status).toBe(200);
    const row = () => t.http('GET', `/v1/rl/workers/${id}`).then((a) => a.json as { state: string; health: string; weight_version: string | null });
    expect((await row()).weight_version).toBe('5');

    await sim.kill();
    const down = await until('unreachable', row, (w) => w.state === 'unreachable');
    expect(down.health).toBe('not_ready');
    expect((await t.http('POST', '/generate', { body: { text: 'x' } })).status).toBe(503);

    await sim.restart();
    const back = await until('serving again', row, (w) => w.state === 'serving');
    expect(back.health).toBe('ready');
    expect(back.weight_version).toBeNull();
    // It came back without the fleet's weights: no traffic until a refit brings it up.
    expect(back).toMatchObject({ quarantined: true, quarantine_reason: 'behind_fleet' });
    expect((await t.http('POST', '/generate', { body: { text: 'x', sampling_params: { max_new_tokens: 1 } } })).status).toBe(503);
    const up = await t.http('POST', '/v1/rl/refits', { body: { weight_version: '6', source: { kind: 'disk', model_path: '/m' } } });
    expect(up.status).toBe(200);
    expect(await row()).toMatchObject({ quarantined: false, weight_version: '6' });
    expect((await t.http('POST', '/generate', { body: { text: 'x', sampling_params: { max_new_tokens: 1 } } })).status).toBe(200);
  });
});

describe('engine key change', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ probeIntervalSecs: 1, probeFailureThreshold: 1, retryIntervalSecs: 1 });
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('probes keep using the current client after the api key changes (no flapping)', async () => {
    expect((await t.http('PATCH', `/workers/${id}`, { body: { api_key: 'new-key' } })).status).toBe(200);
    await t.waitReady(1);
    const states = new Set<string>();
    const until = Date.now() + 3_500; // several probe periods
    while (Date.now() < until) {
      states.add((await t.http('GET', `/v1/rl/workers/${id}`)).json.state);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect([...states]).toEqual(['serving']);
  });
});
