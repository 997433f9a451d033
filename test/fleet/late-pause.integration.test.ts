// Level, not edge: after a replica is cut off and its engines are taken over, a pause that lands on
// one of them later (as the cut-off replica's would: sent before the cut, applied by the engine
// after everyone moved on) is undone by the engine's new owner, since no running refit and no
// operator holds it; an operator's pause, made through the owner, is kept. Judged on the
// simulators' own state and request records.

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

describe('a pause that lands after its sender lost the engine', () => {
  let nats: TestNats;
  let proxy: StallProxy;
  let sims: SimProcess[];
  let a: Gateway;
  let b: Gateway;

  beforeAll(async () => {
    nats = await startTestNats();
    proxy = await startStallProxy({ host: '127.0.0.1', port: Number(new URL(nats.url).port) });
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    const cfg = { ...testConfig({ leaseSecs: LEASE_MS / 1000, natsPingIntervalSecs: 1 }), natsUrl: nats.url };
    a = await startGateway({ ...cfg, natsUrl: `nats://127.0.0.1:${proxy.port}`, replicaId: 'late-a' });
    b = await startGateway({ ...cfg, replicaId: 'late-b' });
  }, 60_000);
  afterAll(async () => {
    proxy?.heal();
    await Promise.all([a?.close(), b?.close()]);
    await proxy?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
    await nats?.stop();
  });

  const rows = async (g: Gateway) =>
    (await httpJson(g.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ id: string; url: string; owner: string | null; state: string }>;

  it('is resumed by the new owner, while an operator pause through it is kept', async () => {
    for (const s of sims) expect((await httpJson(a.url, 'POST', '/workers', { url: s.url })).status).toBe(202);
    await until('both engines owned by late-a and serving', 15_000, async () => {
      const r = await rows(b);
      return r.length === 2 && r.every((w) => w.owner === 'late-a' && w.state === 'serving');
    });
    proxy.cut();
    await until('late-b owns both engines', LEASE_MS * 4, async () => (await rows(b)).every((w) => w.owner === 'late-b'));
    const [late, held] = sims as [SimProcess, SimProcess];
    const heldId = (await rows(b)).find((w) => w.url === held.url)!.id;
    // The operator pauses one engine through its owner: that pause is meant, and held.
    expect((await httpJson(b.url, 'POST', `/v1/rl/workers/${heldId}/engine/pause_generation`, {})).status).toBe(200);
    // The cut-off replica's pause lands on the other one now, straight on the engine.
    expect((await httpJson(late.url, 'POST', '/pause_generation', {}, { [REPLICA_HEADER]: 'late-a', [LEASE_EPOCH_HEADER]: '1' })).status).toBe(200);
    const landedAt = Date.now();
    expect((await late.state()).paused).not.toBeNull();
    // Lease + 2 s: the acceptance bound for a pause no one holds, from the moment it landed.
    await until('the late pause undone', LEASE_MS + 2_000, async () => (await late.state()).paused === null);
    expect(Date.now() - landedAt).toBeLessThanOrEqual(LEASE_MS + 2_000);
    const resumes = (await late.requests()).filter((r) => r.path === '/continue_generation');
    expect(resumes.length).toBeGreaterThan(0);
    expect(resumes.every((r) => r.headers[REPLICA_HEADER] === 'late-b')).toBe(true);
    // Longer than the late pause took to be undone: the operator's stays.
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await held.state()).paused).not.toBeNull();
    expect((await held.requests()).some((r) => r.path === '/continue_generation')).toBe(false);
  }, 60_000);
});
