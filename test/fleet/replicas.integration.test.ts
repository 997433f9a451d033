// Two gateway replicas on one subject root are one fleet: an engine registered through either is
// listed and served by both, each engine's actor runs on exactly one of them, and when that one
// is SIGKILLed the survivor owns its engines within the lease time (+ 2 s) and serves them.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';

const LEASE_SECS = 2;

type Row = { url: string; owner: string | null; state: string; health: string; weight_version: string | null };

describe('two replicas on one subject root', () => {
  let nats: TestNats;
  let sims: SimProcess[] = [];
  let a: GatewayProcess;
  let b: GatewayProcess;
  const flags = () => ['--nats-url', nats.url, '--lease-secs', String(LEASE_SECS), '--health-check-interval-secs', '1', '--retry-interval-secs', '1'];

  const rows = async (g: GatewayProcess): Promise<Row[]> => (await g.http('GET', '/v1/rl/workers')).json.workers;

  beforeAll(async () => {
    nats = await startTestNats();
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    [a, b] = await Promise.all([startGatewayProcess([...flags(), '--replica-id', 'ra']), startGatewayProcess([...flags(), '--replica-id', 'rb'])]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
  });

  it('lists and serves an engine registered through either replica on both, each owned by its registrar', async () => {
    expect((await a.http('POST', '/workers', { url: sims[0]!.url })).status).toBe(202);
    expect((await b.http('POST', '/workers', { url: sims[1]!.url })).status).toBe(202);
    for (const g of [a, b]) {
      await until(`both engines ready on ${g.replicaId}`, 15_000, async () => {
        const r = await rows(g);
        return r.length === 2 && r.every((w) => w.health === 'ready' && w.state === 'serving');
      });
      const byUrl = Object.fromEntries((await rows(g)).map((w) => [w.url, w.owner]));
      expect(byUrl).toEqual({ [sims[0]!.url]: 'ra', [sims[1]!.url]: 'rb' });
      const listed = (await g.http('GET', '/workers')).json.workers.map((w: { url: string }) => w.url).sort();
      expect(listed).toEqual(sims.map((s) => s.url).sort());
    }
    // /generate through each replica reaches both engines, whichever registered them.
    for (const s of sims) await s.clearRequests();
    for (const g of [a, b]) {
      for (let i = 0; i < 10; i++) {
        const r = await g.http('POST', '/generate', { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 2 } });
        expect(r.status, r.text).toBe(200);
      }
    }
    for (const s of sims) expect((await s.requests()).filter((q) => q.path === '/generate').length).toBeGreaterThan(0);
  }, 40_000);

  it('a refit through either replica reaches every engine', async () => {
    const r = await b.http('POST', '/v1/rl/refits', { weight_version: '5', source: { kind: 'disk', model_path: '/m/5' } });
    expect(r.status, r.text).toBe(200);
    expect(r.json.succeeded).toBe(2);
    for (const s of sims) {
      const st = await s.state();
      expect(st.weightVersion).toBe('5');
      expect(st.paused).toBeNull();
    }
  }, 30_000);

  it('SIGKILL of the owner: the survivor owns its engines within the lease time + 2 s and serves them', async () => {
    await a.kill();
    const killedAt = Date.now();
    await until('rb owns every engine and both serve', (LEASE_SECS + 2) * 1000, async () => {
      const r = await rows(b);
      return r.length === 2 && r.every((w) => w.owner === 'rb' && w.state === 'serving');
    });
    expect(Date.now() - killedAt).toBeLessThanOrEqual((LEASE_SECS + 2) * 1000);
    // The new owner read the engine's version from the engine: still the refit's.
    for (const w of await rows(b)) expect(w.weight_version).toBe('5');
    for (let i = 0; i < 20; i++) {
      const r = await b.http('POST', '/generate', { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 2 } });
      expect(r.status, r.text).toBe(200);
    }
  }, 30_000);

  it('a replica that stops cleanly hands its engines over at once (no lease to wait out)', async () => {
    const c = await startGatewayProcess([...flags(), '--replica-id', 'rc']);
    const extra = await spawnSglangSim(['--token-rate', '0']);
    sims.push(extra);
    try {
      expect((await c.http('POST', '/workers', { url: extra.url })).status).toBe(202);
      await until('rb lists the engine owned by rc and serving', 15_000, async () => {
        const r = (await rows(b)).find((w) => w.url === extra.url);
        return r?.owner === 'rc' && r.state === 'serving';
      });
      await c.stop();
      const stoppedAt = Date.now();
      // The heartbeat went with the replica: the survivor takes over at its next sweep.
      await until('rb owns the engine and it serves', LEASE_SECS * 1000, async () => {
        const r = (await rows(b)).find((w) => w.url === extra.url);
        return r?.owner === 'rb' && r.state === 'serving';
      });
      expect(Date.now() - stoppedAt).toBeLessThan(LEASE_SECS * 1000);
    } finally {
      await c.stop();
    }
  }, 40_000);
});
