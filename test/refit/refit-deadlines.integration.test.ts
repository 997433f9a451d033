// Phase deadlines: an engine that stalls is named by the phase it stalled in, the refit goes on
// for the others, and every engine is resumed — a slow engine never leaves another one paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('refit phase deadlines', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 3 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('names the engine that stalled in the pause and refits the rest', async () => {
    const slow = sims[0]!;
    await slow.setFaults({ route: 'pause_generation', hang: true, times: 1 });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '7', source: { kind: 'disk', model_path: '/m/7' }, deadlines_ms: { pause: 1_500 } },
    });
    expect(r.status).toBe(207);
    expect(r.json.status).toBe('partial');
    expect(r.json.failed).toHaveLength(1);
    const stalled = r.json.failed[0];
    expect(stalled.url).toBe(slow.url);
    expect(stalled.failed_phase).toBe('pause');
    expect(stalled.error).toBe('phase_deadline_exceeded');
    const ok = r.json.engines.filter((e: { outcome: string }) => e.outcome === 'ok');
    expect(ok.map((e: { url: string }) => e.url).sort()).toEqual([sims[1]!.url, sims[2]!.url].sort());
    for (const e of ok) expect(e.weight_version).toBe('7');
    // The fast engines were resumed without waiting for the slow one's pause to time out.
    for (const s of [sims[1]!, sims[2]!]) expect((await s.state()).paused).toBeNull();
    expect((await slow.state()).weightVersion).toBe('default');
  });

  it('every engine ends active, the stalled one included', async () => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ control: string; state: string }>;
      if (rows.every((w) => w.control === 'active' && w.state === 'serving')) break;
      if (Date.now() > deadline) throw new Error(`engines still not serving: ${JSON.stringify(rows.map((w) => [w.state, w.control]))}`);
      await new Promise((res) => setTimeout(res, 50));
    }
    for (const s of sims) expect((await s.state()).paused).toBeNull();
  });
});

describe('call deadlines start when their phase sends them', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 4 } });
    await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it("a slow pause and load do not eat the resume's budget (4 s timeout; 2.5 s + 2 s + 2.5 s)", async () => {
    await sim.setFaults([
      { route: 'pause_generation', delayMs: 2_500, times: 1 },
      { route: 'update_weights_from_disk', delayMs: 2_000, times: 1 },
      { route: 'continue_generation', delayMs: 2_500, times: 1 },
    ]);
    const r = await t.http('POST', '/v1/rl/refits', { body: { weight_version: '3', source: { kind: 'disk', model_path: '/m/3' } } });
    expect(r.json.failed).toEqual([]);
    expect(r.status).toBe(200);
    const s = await sim.state();
    expect(s.paused).toBeNull();
    expect(s.weightVersion).toBe('3');
  }, 20_000);
});
