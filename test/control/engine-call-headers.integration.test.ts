// What every engine call carries on the wire, now that a fan-out prepares its headers once per
// call and once per engine: the fencing headers (this replica's id and the engine's own lease
// epoch) on every leg of every fan-out and on the per-worker proxy, the caller's trace headers,
// the body's content type, and each worker's own bearer only to that worker, never the caller's.
// A caller's header of a fencing header's name never reaches an engine. Real gateway, nats-server and
// SGLang simulators.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEASE_EPOCH_HEADER, REPLICA_HEADER } from '../../src/fleet/lease-fence.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS as OWN_PATHS, spawnSglangSim, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';

async function controlCalls(sim: SimProcess): Promise<SimRequest[]> {
  return (await sim.requests()).filter((r) => !OWN_PATHS.has(r.path));
}

describe('headers of engine calls (3 engines, one with its own api key)', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([
      spawnSglangSim(['--token-rate', '0', '--api-key', 'engine-secret']),
      spawnSglangSim(['--token-rate', '0']),
      spawnSglangSim(['--token-rate', '0']),
    ]);
    t = await startTestGateway();
    ids = await t.register([{ url: sims[0]!.url, api_key: 'engine-secret' }, sims[1]!.url, sims[2]!.url]);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('every leg of two fan-outs and a proxied call carry the replica, the engine lease epoch, the trace and the right bearer', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const trace = { 'x-request-id': 'fan-h', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
    for (const round of [1, 2]) {
      const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular', {
        body: {},
        headers: { ...trace, authorization: 'Bearer caller-token', [REPLICA_HEADER]: 'forged', [LEASE_EPOCH_HEADER]: '999999' },
      });
      expect(res.status, `round ${round}`).toBe(200);
      expect(res.json.succeeded).toBe(3);
    }
    const proxied = await t.http('POST', `/v1/rl/workers/${ids[1]}/engine/flush_cache`, { body: {}, headers: trace });
    expect(proxied.status).toBe(200);

    const epochs = new Set<string>();
    for (const [i, sim] of sims.entries()) {
      const calls = await controlCalls(sim);
      expect(calls, sim.url).toHaveLength(i === 1 ? 3 : 2);
      const epoch = calls[0]!.headers[LEASE_EPOCH_HEADER];
      expect(epoch, sim.url).toMatch(/^[1-9][0-9]*$/);
      epochs.add(epoch as string);
      for (const call of calls) {
        expect(call).toMatchObject({ method: 'POST', path: '/flush_cache', body: '{}' });
        expect(call.headers[REPLICA_HEADER]).toBe(t.gw.replicaId);
        expect(call.headers[LEASE_EPOCH_HEADER]).toBe(epoch);
        expect(call.headers['x-request-id']).toBe('fan-h');
        expect(call.headers.traceparent).toBe(trace.traceparent);
        expect(call.headers['content-type']).toBe('application/json');
        if (i === 0) expect(call.headers.authorization).toBe('Bearer engine-secret');
        else expect(call.headers).not.toHaveProperty('authorization');
      }
    }
    // Each engine's own lease: three claims, three revisions of the owners bucket.
    expect(epochs.size).toBe(3);
  });
});
