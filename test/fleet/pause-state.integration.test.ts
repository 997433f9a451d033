// The engine's pause state is read from the engine, not assumed: an engine paused through the
// gateway and then resumed behind its back (a direct continue_generation, or a restart between two
// probes) is seen serving again by the quiet probe that runs while it is paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('the pause state read from the engine', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ probeIntervalSecs: 1, retryIntervalSecs: 1 });
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  const row = async () => (await t.http('GET', `/v1/rl/workers/${id}`)).json as { state: string; control: string };
  const eventually = async (what: string, ok: (r: { state: string; control: string }) => boolean) => {
    const deadline = Date.now() + 8_000;
    for (;;) {
      const r = await row();
      if (ok(r)) return r;
      if (Date.now() > deadline) throw new Error(`${what}: still ${JSON.stringify(r)}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  };

  it("a pause undone behind the gateway's back is noticed, and the engine serves again", async () => {
    const p = await t.http('POST', `/v1/rl/workers/${id}/engine/pause_generation`, { body: {} });
    expect(p.status, p.text).toBe(200);
    await eventually('paused in the gateway', (r) => r.state === 'paused' && r.control === 'paused');
    expect((await sim.state()).paused).not.toBeNull();
    const direct = await request(`${sim.url}/continue_generation`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    await direct.body.dump();
    expect((await sim.state()).paused).toBeNull();
    await eventually('serving again', (r) => r.state === 'serving' && r.control === 'active');
    const gen = await t.http('POST', '/generate', { body: { input_ids: [1], sampling_params: { max_new_tokens: 1 } } });
    expect(gen.status).toBe(200);
  });

  it('an engine restarted while paused comes back serving', async () => {
    const p = await t.http('POST', `/v1/rl/workers/${id}/engine/pause_generation`, { body: {} });
    expect(p.status, p.text).toBe(200);
    await eventually('paused in the gateway', (r) => r.control === 'paused');
    await sim.restart();
    await eventually('serving after the restart', (r) => r.state === 'serving' && r.control === 'active');
    expect((await sim.state()).paused).toBeNull();
  });
});
