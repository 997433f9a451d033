// A replica whose NATS link goes silent (bytes dropped, nothing reset: the client still believes it
// is connected) while it can still reach its engines. Judged on the simulator's own records:
// - its `/health` is 503 `bus_unavailable` within the lease of the cut;
// - a per-worker pause sent to it during the cut is refused and never reaches the engine;
// - the other replica takes the engine over; after the heal the cut replica's view of who owns the
//   engine agrees with the survivor's within 5 s, and it never calls the engine again;
// - every control call the engine saw names the replica and the lease epoch that made it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { LEASE_EPOCH_HEADER, REPLICA_HEADER } from '../../src/fleet/lease-fence.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startStallProxy, type StallProxy } from '../fixtures/stall-proxy.ts';
import { until } from '../fixtures/gateway-process.ts';
import { httpJson } from '../fixtures/http-json.ts';

const LEASE_MS = 2_000;

describe('a replica cut off from NATS without a reset', () => {
  let nats: TestNats;
  let proxy: StallProxy;
  let sim: SimProcess;
  let a: Gateway;
  let b: Gateway;

  beforeAll(async () => {
    nats = await startTestNats();
    proxy = await startStallProxy({ host: '127.0.0.1', port: Number(new URL(nats.url).port) });
    sim = await spawnSglangSim(['--token-rate', '0']);
    const cfg = { ...testConfig({ leaseSecs: LEASE_MS / 1000, natsPingIntervalSecs: 1 }), natsUrl: nats.url };
    a = await startGateway({ ...cfg, natsUrl: `nats://127.0.0.1:${proxy.port}`, replicaId: 'cut-a' });
    b = await startGateway({ ...cfg, replicaId: 'cut-b' });
  }, 60_000);
  afterAll(async () => {
    proxy?.heal();
    await Promise.all([a?.close(), b?.close()]);
    await proxy?.close();
    await sim?.stop();
    await nats?.stop();
  });

  const ownerSeenBy = async (g: Gateway): Promise<string | null> => {
    const rows = (await httpJson(g.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ url: string; owner: string | null }>;
    return rows.find((w) => w.url === sim.url)?.owner ?? null;
  };

  it('is unhealthy within the lease, commands nothing during the cut, and agrees on ownership within 5 s of the heal', async () => {
    expect((await httpJson(a.url, 'POST', '/workers', { url: sim.url })).status).toBe(202);
    await until('the engine owned by cut-a and serving on both', 15_000, async () => (await ownerSeenBy(a)) === 'cut-a' && (await ownerSeenBy(b)) === 'cut-a');
    const id = (await httpJson(a.url, 'GET', '/v1/rl/workers')).json.workers[0].id as string;
    // A control call before the cut carries the replica and its lease epoch, once the lease the
    // registrar claims is in the owners bucket (the row names the registrar a moment before).
    const before = await until('a control call with the lease epoch', 5_000, async () => {
      await sim.clearRequests();
      expect((await httpJson(a.url, 'POST', `/v1/rl/workers/${id}/engine/flush_cache`, {})).status).toBe(200);
      const calls = (await sim.requests()).filter((r) => r.path === '/flush_cache');
      return Number(calls[0]?.headers[LEASE_EPOCH_HEADER]) > 0 ? calls : undefined;
    });
    expect(before).toHaveLength(1);
    expect(before[0]!.headers[REPLICA_HEADER]).toBe('cut-a');
    expect(Number(before[0]!.headers[LEASE_EPOCH_HEADER])).toBeGreaterThan(0);
    expect((await httpJson(a.url, 'GET', '/health')).status).toBe(200);

    proxy.cut();
    const cutAt = Date.now();
    // The behaviour is the deadline: unhealthy before another replica may take the lease.
    await until('cut-a unhealthy', LEASE_MS + 1_000, async () => {
      const h = await httpJson(a.url, 'GET', '/health');
      return h.status === 503 && h.json.reason === 'bus_unavailable';
    });
    expect(Date.now() - cutAt).toBeLessThanOrEqual(LEASE_MS);

    const refused = await httpJson(a.url, 'POST', `/v1/rl/workers/${id}/engine/pause_generation`, {});
    expect(refused.status).toBe(503);
    expect(refused.json.error).toBe('bus_unavailable');

    await until('cut-b owns the engine', LEASE_MS * 4, async () => (await ownerSeenBy(b)) === 'cut-b');
    // The new owner's own control calls go out under its own name and a newer epoch.
    expect((await httpJson(b.url, 'POST', `/v1/rl/workers/${id}/engine/flush_cache`, {})).status).toBe(200);
    proxy.heal();
    const healedAt = Date.now();
    await until('cut-a sees cut-b as the owner', 5_000, async () => (await ownerSeenBy(a)) === 'cut-b');
    expect(Date.now() - healedAt).toBeLessThanOrEqual(5_000);
    await until('cut-a healthy again', 5_000, async () => (await httpJson(a.url, 'GET', '/health')).status === 200);

    const records = await sim.requests();
    const control = records.filter((r) => r.method === 'POST');
    expect(
      control.some((r) => r.path === '/pause_generation'),
      'the refused pause reached the engine',
    ).toBe(false);
    // Nothing from cut-a after its lease could have lapsed; cut-b's calls carry a newer epoch.
    const fromA = control.filter((r) => r.headers[REPLICA_HEADER] === 'cut-a');
    expect(
      fromA.every((r) => Date.parse(r.time) < cutAt + LEASE_MS),
      JSON.stringify(fromA.map((r) => [r.path, r.time])),
    ).toBe(true);
    const fromB = control.filter((r) => r.headers[REPLICA_HEADER] === 'cut-b');
    expect(fromB.length).toBeGreaterThan(0);
    for (const r of fromB) expect(Number(r.headers[LEASE_EPOCH_HEADER])).toBeGreaterThan(Number(before[0]!.headers[LEASE_EPOCH_HEADER]));
    expect(control.every((r) => r.headers[REPLICA_HEADER] !== undefined)).toBe(true);
    // The engine was never left paused by any of it.
    expect((await sim.state()).paused).toBeNull();
  }, 60_000);
});
