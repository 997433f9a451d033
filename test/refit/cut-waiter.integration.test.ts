// A trainer waits on a refit (POST /v1/rl/refits, answered with the report) at a replica that is
// then cut off from NATS for good, without a reset. Another replica finishes the refit; the cut
// one cannot see it end, so after two ack waits it answers 503 `bus_unavailable` naming the refit,
// and the same request sent to the other replica answers the report. Judged on the simulator: the
// engine holds the new version and is not paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { httpJson } from '../fixtures/http-json.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startStallProxy, type StallProxy } from '../fixtures/stall-proxy.ts';

const LEASE_SECS = 2;
/** The refit queue's ack wait (docs/nats.md): twice the lease, at least 5 s. */
const ACK_WAIT_MS = Math.max(5_000, 2 * LEASE_SECS * 1000);
const LOAD_DELAY_MS = 3_000;

describe('a trainer waiting at a replica that is cut off', () => {
  let nats: TestNats;
  let proxy: StallProxy;
  let sim: SimProcess;
  let a: Gateway;
  let b: Gateway;

  beforeAll(async () => {
    nats = await startTestNats();
    proxy = await startStallProxy({ host: '127.0.0.1', port: Number(new URL(nats.url).port) });
    sim = await spawnSglangSim(['--token-rate', '0']);
    const cfg = { ...testConfig({ leaseSecs: LEASE_SECS, natsPingIntervalSecs: 1 }), natsUrl: nats.url };
    a = await startGateway({ ...cfg, natsUrl: `nats://127.0.0.1:${proxy.port}`, replicaId: 'wait-a' });
    b = await startGateway({ ...cfg, replicaId: 'wait-b' });
  }, 60_000);
  afterAll(async () => {
    proxy?.heal();
    await Promise.all([a?.close(), b?.close()]);
    await proxy?.close();
    await sim?.stop();
    await nats?.stop();
  });

  it('is answered 503 bus_unavailable with the refit id after two ack waits; the other replica answers the report', async () => {
    expect((await httpJson(b.url, 'POST', '/workers', { url: sim.url })).status).toBe(202);
    await until('the engine serving on both replicas', 15_000, async () => {
      for (const g of [a, b]) {
        const rows = (await httpJson(g.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ health: string }>;
        if (rows.length !== 1 || rows[0]!.health !== 'ready') return false;
      }
      return true;
    });
    await sim.setFaults({ route: 'update_weights_from_disk', delayMs: LOAD_DELAY_MS, times: 1, runIfAbandoned: true });
    const body = { refit_id: 'cut-waiter-1', weight_version: 'cw-1', source: { kind: 'disk', model_path: '/m/cw-1' } };
    const waiting = httpJson(a.url, 'POST', '/v1/rl/refits', body);
    await until('the engine is loading', 10_000, async () => (await sim.requests()).some((r) => r.path === '/update_weights_from_disk'));
    proxy.cut();
    const cutAt = Date.now();

    const answer = await waiting;
    const answeredMs = Date.now() - cutAt;
    expect(answer.status, answer.text).toBe(503);
    expect(answer.json.error).toBe('bus_unavailable');
    expect(answer.json.refit_id).toBe('cut-waiter-1');
    expect(answer.json.message).toContain('GET /v1/rl/refits/cut-waiter-1');
    // Not before two ack waits (a refit moves in one), and not much after.
    expect(answeredMs).toBeGreaterThanOrEqual(2 * ACK_WAIT_MS - 500);
    expect(answeredMs).toBeLessThanOrEqual(2 * ACK_WAIT_MS + 4_000);

    // The same request at the other replica is the same refit: its report.
    const again = await httpJson(b.url, 'POST', '/v1/rl/refits', body);
    expect(again.status, again.text).toBe(200);
    expect(again.json.id).toBe('cut-waiter-1');
    expect(again.json.engines.map((e: { outcome: string }) => e.outcome)).toEqual(['ok']);
    const st = await sim.state();
    expect(st.weightVersion).toBe('cw-1');
    expect(st.paused).toBeNull();
    proxy.heal();
  }, 60_000);
});
