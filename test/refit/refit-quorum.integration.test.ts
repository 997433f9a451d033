// The quorum gate: a refit that cannot pause enough engines refits none of them, reports every
// engine as failed with the reason, and still resumes the ones it paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('refit quorum', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('calls the refit off when fewer engines than the quorum could be paused', async () => {
    await sims[0]!.setFaults({ route: 'pause_generation', status: 500, body: { success: false }, times: 1 });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '8', source: { kind: 'disk', model_path: '/m/8' }, quorum: { min_engines: 2 } },
    });
    expect(r.status).toBe(207);
    expect(r.json.status).toBe('failed');
    expect(r.json.aborted).toBe('quorum_not_met');
    expect(r.json.succeeded).toBe(0);
    const byUrl = Object.fromEntries(r.json.engines.map((e: { url: string }) => [e.url, e]));
    expect(byUrl[sims[0]!.url].error).toBe('upstream_error');
    expect(byUrl[sims[0]!.url].failed_phase).toBe('pause');
    expect(byUrl[sims[1]!.url].outcome).toBe('failed');
    expect(byUrl[sims[1]!.url].error).toBe('quorum_not_met');
    for (const s of sims) {
      const st = await s.state();
      expect(st.weightVersion).toBe('default');
      expect(st.paused).toBeNull();
      expect((await s.requests()).some((q) => q.path === '/update_weights_from_disk')).toBe(false);
    }
  });

  it('goes ahead when the quorum is met, and reports the engine that could not be paused', async () => {
    await sims[0]!.setFaults({ route: 'pause_generation', status: 500, body: { success: false }, times: 1 });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '9', source: { kind: 'disk', model_path: '/m/9' }, quorum: { min_fraction: 0.5 } },
    });
    expect(r.status).toBe(207);
    expect(r.json.status).toBe('partial');
    expect(r.json.failed.map((f: { url: string }) => f.url)).toEqual([sims[0]!.url]);
    expect((await sims[1]!.state()).weightVersion).toBe('9');
    expect((await sims[0]!.state()).weightVersion).toBe('default');
  });
});
