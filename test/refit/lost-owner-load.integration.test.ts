// The replica that owns the engines is cut off from NATS while their disk loads run (the loads
// land: the engines apply them even though their caller went away, as SGLang's handlers do). The
// refit's runner, on another replica, loses those answers with the owner; before it calls a leg
// failed it reads the engine, once the engine has a new owner: a load that landed is a success, one
// that did not is sent again (a disk load to the same version is safe to repeat). Judged on the
// simulators' own state: every engine ends on the new version, none paused, none quarantined, and
// the report says so.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startStallProxy, type StallProxy } from '../fixtures/stall-proxy.ts';
import { until } from '../fixtures/gateway-process.ts';
import { httpJson } from '../fixtures/http-json.ts';

const LEASE_MS = 2_000;
const LOAD_MS = 3_000;

describe("a refit whose engines' owner is cut off during the load", () => {
  let nats: TestNats;
  let proxy: StallProxy;
  let sims: SimProcess[];
  let owner: Gateway;
  let runner: Gateway;

  beforeAll(async () => {
    nats = await startTestNats();
    proxy = await startStallProxy({ host: '127.0.0.1', port: Number(new URL(nats.url).port) });
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    const cfg = { ...testConfig({ leaseSecs: LEASE_MS / 1000, natsPingIntervalSecs: 1, rl: { controlTimeoutSecs: 30 } }), natsUrl: nats.url };
    // The owner runs no refits: the runner is the other replica, whatever the queue hands out.
    owner = await startGateway({ ...cfg, natsUrl: `nats://127.0.0.1:${proxy.port}`, replicaId: 'own-a', rl: { ...cfg.rl, enabled: false } });
    runner = await startGateway({ ...cfg, replicaId: 'run-b' });
  }, 60_000);
  afterAll(async () => {
    proxy?.heal();
    await Promise.all([owner?.close(), runner?.close()]);
    await proxy?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
    await nats?.stop();
  });

  it('reads the engines before failing a leg: every engine on the new version, reported ok, none quarantined', async () => {
    for (const s of sims) expect((await httpJson(owner.url, 'POST', '/workers', { url: s.url })).status).toBe(202);
    await until('both engines owned by own-a and serving on run-b', 15_000, async () => {
      const rows = (await httpJson(runner.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ owner: string; state: string }>;
      return rows.length === 2 && rows.every((w) => w.owner === 'own-a' && w.state === 'serving');
    });
    for (const s of sims) await s.setFaults({ route: 'update_weights_from_disk', delayMs: LOAD_MS, runIfAbandoned: true });
    const answer = httpJson(runner.url, 'POST', '/v1/rl/refits', {
      refit_id: 'lost-owner-1',
      weight_version: '7',
      source: { kind: 'disk', model_path: '/m/7' },
    });
    await until('the loads reached the engines', 10_000, async () =>
      (await Promise.all(sims.map(async (s) => (await s.requests()).some((r) => r.path === '/update_weights_from_disk')))).every(Boolean),
    );
    await new Promise((r) => setTimeout(r, 500));
    proxy.cut();
    const r = await answer;
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.succeeded).toBe(2);
    expect(r.json.engines).toHaveLength(2);
    for (const e of r.json.engines) expect(e.outcome, JSON.stringify(e)).toBe('ok');
    for (const s of sims) {
      const st = await s.state();
      expect(st.weightVersion).toBe('7');
      expect(st.paused).toBeNull();
    }
    const rows = (await httpJson(runner.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ owner: string; quarantined: boolean }>;
    expect(rows).toHaveLength(2);
    for (const w of rows) {
      expect(w.owner).toBe('run-b');
      expect(w.quarantined, JSON.stringify(w)).toBe(false);
    }
  }, 90_000);
});
