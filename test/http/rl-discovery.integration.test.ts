// Admin-key authentication on `/v1/rl`, the worker listing and single rows (shape, field order,
// sorting, DP collapse, dp_ranks), label parsing and the synthetic selector keys that caller labels
// cannot spoof. Real gateways, real simulators.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

// SMG's fields of RlWorkerEntry, in this order (rlgate may append its own after them).
const ROW_FIELDS = [
  'id',
  'url',
  'base_url',
  'engine',
  'engine_version',
  'model_id',
  'worker_type',
  'connection_mode',
  'control_url',
  'tp_size',
  'dp_size',
  'pp_size',
  'dp_ranks',
  'role',
  'health',
  'weight_version',
  'version_source',
  'control',
  'labels',
  'capabilities',
];

const PROBE_PATHS = new Set(['/health', '/health_generate', '/server_info', '/get_server_info', '/model_info', '/get_model_info']);

async function engineCalls(sim: SimProcess) {
  return (await sim.requests()).filter((r) => !PROBE_PATHS.has(r.path));
}

describe('admin key on /v1/rl', () => {
  let t: TestGateway;

  beforeAll(async () => {
    t = await startTestGateway({ adminKey: 'admin-secret' });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('no authorization → 401; Bearer wrong → 401; Bearer admin-secret → 200', async () => {
    const none = await t.http('GET', '/v1/rl/workers');
    expect(none.status).toBe(401);
    expect(none.json).toMatchObject({ error: expect.any(String), message: expect.any(String) });

    const wrong = await t.http('GET', '/v1/rl/workers', { headers: { authorization: 'Bearer wrong' } });
    expect(wrong.status).toBe(401);
    expect(wrong.json.error).toBe(none.json.error);

    for (const bad of ['admin-secret', 'Basic admin-secret', 'Bearer admin-secretX', 'Bearer ']) {
      expect((await t.http('GET', '/v1/rl/workers', { headers: { authorization: bad } })).status, bad).toBe(401);
    }

    const ok = await t.http('GET', '/v1/rl/workers', { headers: { authorization: 'Bearer admin-secret' } });
    expect(ok.status).toBe(200);
    expect(ok.json).toEqual({ protocol_version: 1, workers: [], total: 0 });
  });

  it('authentication comes before any other check, on every /v1/rl route', async () => {
    const routes: Array<[string, string]> = [
      ['GET', '/v1/rl/workers/nope'],
      ['POST', '/v1/rl/workers/nope/engine/pause_generation'],
      ['POST', '/v1/rl/engine/pause_generation'], // would be 400 selector_required with the key
      ['POST', '/v1/rl/version?selector=engine%3Dsglang'],
      ['POST', '/v1/rl/workers/nope/state'],
    ];
    for (const [method, path] of routes) {
      const r = await t.http(method, path, { body: {}, headers: { authorization: 'Bearer wrong' } });
      expect(r.status, `${method} ${path}`).toBe(401);
    }
    const authed = await t.http('POST', '/v1/rl/engine/pause_generation', { body: {}, headers: { authorization: 'Bearer admin-secret' } });
    expect(authed.status).toBe(400);
    expect(authed.json.error).toBe('selector_required');
  });
});

describe('discovery with real simulators', () => {
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
  });
  afterAll(async () => {
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  describe('two plain SGLang workers', () => {
    let t: TestGateway;
    let ids: string[];

    beforeAll(async () => {
      t = await startTestGateway();
      // Registered in reverse port order, so sorting is the gateway's doing.
      const ordered = [...sims].sort((a, b) => (a.url < b.url ? 1 : -1));
      ids = await t.register(ordered.map((s) => s.url));
    });
    afterAll(async () => {
      await t?.close();
    });

    it('GET /v1/rl/workers → protocol_version 1, total 2, SGLang rows sorted by base_url', async () => {
      const r = await t.http('GET', '/v1/rl/workers');
      expect(r.status).toBe(200);
      expect(r.headers['content-type']).toMatch(/^application\/json/);
      expect(r.json.protocol_version).toBe(1);
      expect(r.json.total).toBe(2);
      const rows = r.json.workers;
      expect(rows).toHaveLength(2);
      expect(new Set(rows.map((w: { id: string }) => w.id))).toEqual(new Set(ids));
      const bases = rows.map((w: { base_url: string }) => w.base_url);
      expect(bases).toEqual([...bases].sort());
      for (const w of rows) {
        expect(Object.keys(w).slice(0, ROW_FIELDS.length)).toEqual(ROW_FIELDS);
        expect(w.id.length).toBeGreaterThanOrEqual(32);
        expect(w.url).toBe(w.base_url);
        expect(sims.map((s) => s.url)).toContain(w.url);
        expect(w.engine).toBe('sglang');
        expect(w.tp_size).toBe(1);
        expect(w.dp_ranks).toBe(1);
        expect(w.health).toBe('ready');
        expect(w.connection_mode).toBe('http');
        expect(w.control_url).toBe(w.base_url);
        expect(w.worker_type).toBe('regular');
        expect(w.model_id).toBe('sim-model');
        // Absent optional values are explicit nulls, never omitted.
        expect(w.role).toBeNull();
        expect(w.weight_version).toBeNull(); // SGLang's "default" seeds an unversioned entry
        expect(w.version_source).toBeNull();
        expect(w.control).toBe('active');
        expect(typeof w.labels).toBe('object');
        expect(w.capabilities).toEqual({
          source: 'static',
          pause_modes: ['abort', 'retract', 'in_place'],
          update_from: ['disk', 'tensor', 'distributed'],
          abort: true,
          flush_cache: true,
          sleep_wake: true,
          reports_weight_version: true,
        });
      }
    });

    it('GET /v1/rl/workers/<id> equals the listing row; an unknown id → 404 worker_not_found with id', async () => {
      const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
      for (const row of rows) {
        const one = await t.http('GET', `/v1/rl/workers/${row.id}`);
        expect(one.status).toBe(200);
        expect(one.json).toEqual(row);
      }
      const nope = await t.http('GET', '/v1/rl/workers/nope');
      expect(nope.status).toBe(404);
      expect(nope.json).toMatchObject({ error: 'worker_not_found', id: 'nope', message: expect.any(String) });
      const uuid = '01a0cb7f-7523-7b01-a71a-669da8cfb402';
      const missing = await t.http('GET', `/v1/rl/workers/${uuid}`);
      expect(missing.status).toBe(404);
      expect(missing.json).toMatchObject({ error: 'worker_not_found', id: uuid });
    });
  });

  describe('DP ranks and labels', () => {
    let t: TestGateway;
    let dp0: string;
    let dp1: string;
    let plain: string;
    let labelled: string;

    beforeAll(async () => {
      t = await startTestGateway();
      const [a, b] = sims;
      // Rank 1 first: the row must still be represented by the lowest rank.
      [dp1, dp0, plain] = await t.register([`${a!.url}@1`, `${a!.url}@0`, a!.url], { ready: 2 });
      [labelled] = await t.register([{ url: b!.url, labels: { tp_size: 'garbage', version: '0.5.15', engine: 'spoofed', role: 'rollout' } }], { ready: 3 });
    });
    afterAll(async () => {
      await t?.close();
    });

    it('DP ranks @0/@1 collapse into one row (dp_ranks 2); the non-DP worker on the same base is its own row', async () => {
      const base = sims[0]!.url;
      const r = await t.http('GET', '/v1/rl/workers');
      expect(r.status).toBe(200);
      const mine = r.json.workers.filter((w: { base_url: string }) => w.base_url === base);
      expect(mine).toHaveLength(2);
      expect(r.json.total).toBe(3);
      // Sorted by base_url, then url: `http://h:p` < `http://h:p@0`.
      const [nonDp, dp] = mine;
      expect(nonDp.id).toBe(plain);
      expect(nonDp.url).toBe(base);
      expect(nonDp.dp_ranks).toBe(1);
      expect(dp.id).toBe(dp0);
      expect(dp.url).toBe(`${base}@0`);
      expect(dp.url.endsWith('@0')).toBe(true);
      expect(dp.base_url).toBe(base);
      expect(dp.dp_ranks).toBe(2);
      expect(dp.control_url).toBe(base);

      const rank1 = await t.http('GET', `/v1/rl/workers/${dp1}`);
      expect(rank1.status).toBe(200);
      expect(rank1.json.id).toBe(dp1);
      expect(rank1.json.url).toBe(`${base}@1`);
      expect(rank1.json.base_url).toBe(base);
      expect(rank1.json.dp_ranks).toBe(2);

      expect((await t.http('GET', `/v1/rl/workers/${dp0}`)).json.dp_ranks).toBe(2);
      expect((await t.http('GET', `/v1/rl/workers/${plain}`)).json.dp_ranks).toBe(1);
    });

    it('garbage tp_size → null, version → engine_version, a spoofed engine label changes neither the row nor selectors', async () => {
      const row = (await t.http('GET', `/v1/rl/workers/${labelled}`)).json;
      expect(row.tp_size).toBeNull();
      expect(row.engine_version).toBe('0.5.15');
      expect(row.engine).toBe('sglang');
      expect(row.role).toBe('rollout');
      // The label map is the full merged view: caller labels win over discovered ones.
      expect(row.labels).toMatchObject({ tp_size: 'garbage', version: '0.5.15', engine: 'spoofed', role: 'rollout' });

      await sims[1]!.clearRequests();
      const spoofed = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dspoofed', { body: {} });
      expect(spoofed.status).toBe(400);
      expect(spoofed.json).toMatchObject({ error: 'no_workers_match', selector: 'engine=spoofed' });
      const spoofedWrite = await t.http('POST', '/v1/rl/version?selector=engine%3Dspoofed', { body: { weight_version: '1' } });
      expect(spoofedWrite.status).toBe(400);
      expect(spoofedWrite.json).toMatchObject({ error: 'no_workers_match', selector: 'engine=spoofed' });
      expect(await engineCalls(sims[1]!)).toEqual([]);

      // The role label is matchable, and `engine=sglang` still reaches the spoofing worker.
      const byRole = await t.http('POST', '/v1/rl/engine/flush_cache?selector=role%3Drollout', { body: {} });
      expect(byRole.status).toBe(200);
      expect(Object.keys(byRole.json.results)).toEqual([labelled]);
      const bySglang = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { body: {} });
      expect(bySglang.status).toBe(200);
      expect(bySglang.json.total).toBe(3);
      expect(Object.keys(bySglang.json.results)).toContain(labelled);
    });
  });
});
