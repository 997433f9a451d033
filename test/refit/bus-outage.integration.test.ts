// NATS unreachable for 15 s while the weights load: once the bus is back, the refit ends within
// 2 s with the engines' real outcomes (the loads that landed are reported as such, not as
// failures), and no engine is left paused. Two replicas: one owns the engines (RL off, so it never
// runs a refit), the other runs the refit, so the load calls' replies cross the bus and are lost
// in the outage: they are settled from the owner's outcome log. Judged on the simulators' state.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { silentLogger } from '../../src/obs/logger.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { until } from '../fixtures/gateway-process.ts';
import { httpJson } from '../fixtures/http-json.ts';

const OUTAGE_MS = 15_000;

const http = (gw: Gateway, method: string, path: string, body?: unknown) => httpJson(gw.url, method, path, body);

describe('a bus outage during the load phase', () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'rlgate-outage-store-'));
  let nats: EmbeddedNats;
  let owner: Gateway;
  let runner: Gateway;
  let sims: SimProcess[] = [];

  beforeAll(async () => {
    nats = await startEmbeddedNats({ storeDir, restart: false });
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    owner = await startGateway({ ...testConfig({ rl: { enabled: false } }), natsUrl: nats.url, replicaId: 'owner' }, { log: silentLogger() });
    runner = await startGateway({ ...testConfig({ rl: { controlTimeoutSecs: 60 } }), natsUrl: nats.url, replicaId: 'runner' }, { log: silentLogger() });
    for (const s of sims) expect((await http(owner, 'POST', '/workers', { url: s.url })).status).toBe(202);
    await until('both engines ready on the runner, owned by the owner', 15_000, async () => {
      const rows = (await http(runner, 'GET', '/v1/rl/workers')).json.workers as Array<{ health: string; owner: string }>;
      return rows.length === 2 && rows.every((r) => r.health === 'ready' && r.owner === 'owner');
    });
  }, 60_000);
  afterAll(async () => {
    await runner?.close();
    await owner?.close();
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  it('ends within 2 s of the bus coming back, with the loads that landed reported as landed', async () => {
    for (const s of sims) await s.setFaults({ route: 'update_weights_from_disk', delayMs: 3_000, times: 1 });
    const answer = http(runner, 'POST', '/v1/rl/refits', { refit_id: 'outage-1', weight_version: '21', source: { kind: 'disk', model_path: '/m/21' } });
    await until('the refit in its load phase', 10_000, async () => {
      const r = await http(runner, 'GET', '/v1/rl/refits/outage-1');
      return r.status === 200 && r.json.phase === 'refit';
    });
    await nats.stop();
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    nats = await startEmbeddedNats({ port: nats.port, storeDir, restart: false });
    // The bus is back when the runner says so (it reconnects every 250-500 ms).
    await until('the runner back on the bus', 10_000, async () => (await http(runner, 'GET', '/health')).status === 200);
    const back = Date.now();
    const r = await answer;
    const tookMs = Date.now() - back;
    expect(r.status, r.text).toBe(200);
    expect(tookMs, 'ms from the bus coming back to the report').toBeLessThanOrEqual(2_000);
    for (const e of r.json.engines) expect(e).toMatchObject({ outcome: 'ok', weight_version: '21' });
    for (const s of sims) {
      const st = await s.state();
      expect(st.weightVersion).toBe('21');
      expect(st.paused).toBeNull();
    }
  }, 90_000);
});
