// Refit edge cases from review: a request the bus cannot carry is refused before anything is
// paused; asleep engines are reported, not refitted; engines paused before the refit stay
// paused; a gateway shut down mid-refit still resumes what the refit paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { engineCalls, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const disk = (v: string, path = '/m') => ({ weight_version: v, source: { kind: 'disk', model_path: path } });

describe('refit edge cases', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('refuses a refit whose calls the bus cannot carry before pausing anything', async () => {
    const r = await t.http('POST', '/v1/rl/refits', { body: disk('1', `/${'x'.repeat(7 * 1024 * 1024)}`) });
    expect(r.status).toBe(413);
    expect(r.json.error).toBe('payload_too_large');
    for (const s of sims) {
      expect((await s.state()).paused).toBeNull();
      expect((await s.requests()).some((q) => q.path === '/pause_generation')).toBe(false);
    }
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    expect(rows.every((w: { control: string }) => w.control === 'active')).toBe(true);
  });

  it('reports asleep engines without touching them and leaves operator-paused engines paused', async () => {
    const [asleepId, pausedId] = ids as [string, string, string];
    expect((await t.http('POST', `/v1/rl/workers/${asleepId}/state`, { body: { control: 'asleep' } })).status).toBe(200);
    expect((await t.http('POST', `/v1/rl/workers/${pausedId}/engine/pause_generation`, { body: {} })).status).toBe(200);
    for (const s of sims) await s.clearRequests();

    const r = await t.http('POST', '/v1/rl/refits', { body: disk('2') });
    expect(r.status).toBe(207);
    const byId = Object.fromEntries(r.json.engines.map((e: { worker_id: string }) => [e.worker_id, e]));
    expect(byId[asleepId].outcome).toBe('failed');
    expect(byId[asleepId].error).toBe('engine_asleep');
    expect(byId[pausedId].outcome).toBe('ok');
    expect(byId[ids[2]!].outcome).toBe('ok');
    // The asleep engine got no call of the refit (its probes, every second, go on); the paused one
    // was refitted but not resumed.
    expect(await engineCalls(sims[0]!)).toEqual([]);
    expect((await sims[1]!.requests()).some((q) => q.path === '/continue_generation')).toBe(false);
    expect((await sims[1]!.state()).weightVersion).toBe('2');
    expect((await sims[1]!.state()).paused).not.toBeNull();
    expect((await sims[2]!.state()).paused).toBeNull();
    const rows = Object.fromEntries((await t.http('GET', '/v1/rl/workers')).json.workers.map((w: { id: string }) => [w.id, w]));
    expect(rows[pausedId].control).toBe('paused');
    expect(rows[asleepId].control).toBe('asleep');

    await t.http('POST', `/v1/rl/workers/${asleepId}/state`, { body: { control: 'active' } });
    await t.http('POST', `/v1/rl/workers/${pausedId}/engine/continue_generation`, { body: {} });
  });
});

describe('gateway shutdown during a refit', () => {
  it('lets the running refit finish and resume what it paused', async () => {
    const sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    const t = await startTestGateway();
    try {
      await t.register(sims.map((s) => s.url));
      await sims[0]!.setFaults({ route: 'update_weights_from_disk', delayMs: 800, times: 1 });
      const bus = await t.bus();
      const pending = bus.request<{ status: number }>('rl.refit.request', disk('3'), 20_000);
      // Shut the gateway down under the refit: once it has paused the slowed engine, whose load
      // (800 ms) has not landed yet.
      const underRefit = await until('the refit pausing the engine', 10_000, async () => {
        const st = await sims[0]!.state();
        return st.paused !== null ? st : null;
      });
      const closing = t.gw.close();
      expect(underRefit.weightVersion, 'the load landed before the shutdown').not.toBe('3');
      const answer = await pending;
      await closing;
      expect(answer.status).toBe(200);
      for (const s of sims) {
        const st = await s.state();
        expect(st.paused).toBeNull();
        expect(st.weightVersion).toBe('3');
      }
    } finally {
      await t.close().catch(() => {});
      await Promise.all(sims.map((s) => s.stop()));
    }
  });
});
