// The gateway-local version and state writes (per worker and per selector, their validation order
// and error codes) and the versions a per-worker pass-through call records or refuses to record. No
// write may reach an engine.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

// The gateway's own probes and discovery (a paused engine is probed on /ready) are not calls a
// write made.
const PROBE_PATHS = GATEWAY_OWN_PATHS;

async function engineCalls(sim: SimProcess) {
  return (await sim.requests()).filter((r) => !PROBE_PATHS.has(r.path));
}

const NOT_PRINTABLE = 'weight_version contains a byte outside printable ASCII';

describe('version and state writes', () => {
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2, 3].map(() => spawnSglangSim(['--token-rate', '0'])));
  });
  afterAll(async () => {
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  describe('four plain SGLang workers', () => {
    let t: TestGateway;
    let ids: string[];
    const row = async (id: string) => (await t.http('GET', `/v1/rl/workers/${id}`)).json;

    beforeAll(async () => {
      t = await startTestGateway();
      ids = await t.register(sims.map((s) => s.url));
    });
    afterAll(async () => {
      await t?.close();
    });

    it('POST /workers/<id>/version {" 42 "} → 200 row with weight_version "42", version_source "api"', async () => {
      await sims[0]!.clearRequests();
      const r = await t.http('POST', `/v1/rl/workers/${ids[0]}/version`, { body: { weight_version: ' 42 ' } });
      expect(r.status).toBe(200);
      expect(r.json.id).toBe(ids[0]);
      expect(r.json.weight_version).toBe('42');
      expect(r.json.version_source).toBe('api');
      expect(r.json.control).toBe('active');
      expect(await row(ids[0]!)).toEqual(r.json);
      // Gateway-local: no engine call, and the other engines are untouched.
      expect(await engineCalls(sims[0]!)).toEqual([]);
      expect((await row(ids[1]!)).weight_version).toBeNull();

      // The 128-byte boundary, and padding that is trimmed before the length check.
      const max = 'x'.repeat(128);
      const atCap = await t.http('POST', `/v1/rl/workers/${ids[0]}/version`, { body: { weight_version: `  ${max}  ` } });
      expect(atCap.status).toBe(200);
      expect(atCap.json.weight_version).toBe(max);
    });

    it('invalid versions and bodies → 400 invalid_version / invalid_body; body and version are checked before the id', async () => {
      const id = ids[0]!;
      await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '42' } });
      const before = await row(id);
      await sims[0]!.clearRequests();

      const version = async (target: string, opts: Parameters<TestGateway['http']>[2]) => t.http('POST', `/v1/rl/workers/${target}/version`, opts);

      const empty = await version(id, { body: { weight_version: '  ' } });
      expect(empty.status).toBe(400);
      expect(empty.json).toMatchObject({ error: 'invalid_version', message: 'weight_version is empty' });

      const long = await version(id, { body: { weight_version: 'x'.repeat(129) } });
      expect(long.status).toBe(400);
      expect(long.json).toMatchObject({ error: 'invalid_version', message: 'weight_version exceeds 128 bytes' });

      for (const bad of ['v1\u0007', 'step 7', 'caf\u00e9', 'tab\there']) {
        const r = await version(id, { body: { weight_version: bad } });
        expect(r.status, JSON.stringify(bad)).toBe(400);
        expect(r.json, JSON.stringify(bad)).toMatchObject({ error: 'invalid_version', message: NOT_PRINTABLE });
      }

      const badBodies: Array<[string, Parameters<TestGateway['http']>[2]]> = [
        ['{}', { body: {} }],
        ['not json', { raw: 'not json', headers: { 'content-type': 'application/json' } }],
        ['no body', {}],
        ['empty body with content-type', { raw: '', headers: { 'content-type': 'application/json' } }],
        ['truncated JSON', { raw: '{"weight_version":', headers: { 'content-type': 'application/json' } }],
        ['a JSON array', { body: [{ weight_version: '1' }] }],
        ['JSON null', { raw: 'null', headers: { 'content-type': 'application/json' } }],
        ['a number instead of a string', { body: { weight_version: 42 } }],
        ['null instead of a string', { body: { weight_version: null } }],
        ['a misspelt field', { body: { weightVersion: '1' } }],
      ];
      for (const [what, opts] of badBodies) {
        const r = await version(id, opts);
        expect(r.status, what).toBe(400);
        expect(r.json, what).toMatchObject({ error: 'invalid_body', message: expect.any(String) });
      }

      // Validation order: body, then version, then the worker lookup.
      const badBodyUnknown = await version('nope', { raw: 'not json', headers: { 'content-type': 'application/json' } });
      expect(badBodyUnknown.status).toBe(400);
      expect(badBodyUnknown.json.error).toBe('invalid_body');
      const badVersionUnknown = await version('nope', { body: { weight_version: '  ' } });
      expect(badVersionUnknown.status).toBe(400);
      expect(badVersionUnknown.json.error).toBe('invalid_version');
      const goodUnknown = await version('nope', { body: { weight_version: '7' } });
      expect(goodUnknown.status).toBe(404);
      expect(goodUnknown.json).toMatchObject({ error: 'worker_not_found', id: 'nope' });

      // Nothing was written and no engine was called.
      expect(await row(id)).toEqual(before);
      expect(await engineCalls(sims[0]!)).toEqual([]);
    });

    it('POST /workers/<id>/state {"control":"asleep"} → row control "asleep"; "Paused" and "napping" → 400 invalid_body', async () => {
      const id = ids[2]!;
      await sims[2]!.clearRequests();
      const r = await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control: 'asleep' } });
      expect(r.status).toBe(200);
      expect(r.json.id).toBe(id);
      expect(r.json.control).toBe('asleep');
      // Control state is RL-only: health stays ready.
      expect(r.json.health).toBe('ready');
      expect((await row(id)).control).toBe('asleep');

      for (const bad of [{ control: 'Paused' }, { control: 'napping' }, { control: 'ACTIVE' }, { control: 1 }, { control: null }, {}]) {
        const b = await t.http('POST', `/v1/rl/workers/${id}/state`, { body: bad });
        expect(b.status, JSON.stringify(bad)).toBe(400);
        expect(b.json.error, JSON.stringify(bad)).toBe('invalid_body');
      }
      const notJson = await t.http('POST', `/v1/rl/workers/${id}/state`, { raw: 'paused', headers: { 'content-type': 'application/json' } });
      expect(notJson.status).toBe(400);
      expect(notJson.json.error).toBe('invalid_body');
      const badUnknown = await t.http('POST', '/v1/rl/workers/nope/state', { body: { control: 'napping' } });
      expect(badUnknown.status).toBe(400);
      expect(badUnknown.json.error).toBe('invalid_body');
      const unknown = await t.http('POST', '/v1/rl/workers/nope/state', { body: { control: 'paused' } });
      expect(unknown.status).toBe(404);
      expect(unknown.json).toMatchObject({ error: 'worker_not_found', id: 'nope' });
      expect((await row(id)).control).toBe('asleep');

      for (const control of ['paused', 'active']) {
        const c = await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control } });
        expect(c.status).toBe(200);
        expect(c.json.control).toBe(control);
      }
      expect(await engineCalls(sims[2]!)).toEqual([]);
    });

    it('a per-worker update_weights_from_disk records its version only after a 2xx with a valid version', async () => {
      const id = ids[1]!;
      const sim = sims[1]!;
      const disk = (body: unknown) => t.http('POST', `/v1/rl/workers/${id}/engine/update_weights_from_disk`, { body });
      const before = await row(id);
      expect(before.weight_version).toBeNull();

      // The simulator answers 400 (SGLang needs model_path): nothing recorded.
      const refused = await disk({ weight_version: '43' });
      expect(refused.status).toBe(400);
      expect(refused.json.status).toBe(400);
      expect(refused.json.worker_id).toBe(id);
      expect(refused.json.body.success).toBe(false);
      let now = await row(id);
      expect(now.weight_version).toBe(before.weight_version);
      expect(now.version_source).toBe(before.version_source);

      // An injected 500 carrying the same body: nothing recorded either.
      await sim.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false }, times: 1 });
      expect((await disk({ model_path: '/models/x', weight_version: '43' })).status).toBe(500);
      expect((await row(id)).weight_version).toBeNull();

      // A real 200: recorded from the request body as a passthrough observation.
      const ok = await disk({ model_path: '/models/x', weight_version: '43' });
      expect(ok.status).toBe(200);
      expect(ok.json.body.success).toBe(true);
      now = await row(id);
      expect(now.weight_version).toBe('43');
      expect(now.version_source).toBe('passthrough');

      // 200 answers whose request version is not a valid string: nothing recorded.
      await sim.setFaults({ route: 'update_weights_from_disk', status: 200, body: { success: true, message: 'ok' } });
      for (const weight_version of [true, 'bad version', '', ['44'], { v: '44' }, null, 'x'.repeat(129)]) {
        const r = await disk({ model_path: '/models/x', weight_version });
        expect(r.status, JSON.stringify(weight_version)).toBe(200);
        const after = await row(id);
        expect(after.weight_version, JSON.stringify(weight_version)).toBe('43');
        expect(after.version_source, JSON.stringify(weight_version)).toBe('passthrough');
      }
      for (const rawBody of ['not json', '']) {
        const r = await t.http('POST', `/v1/rl/workers/${id}/engine/update_weights_from_disk`, {
          raw: rawBody,
          headers: { 'content-type': 'application/json' },
        });
        expect(r.status, JSON.stringify(rawBody)).toBe(200);
        expect((await row(id)).weight_version, JSON.stringify(rawBody)).toBe('43');
      }
      // A number is rendered as text.
      expect((await disk({ model_path: '/models/x', weight_version: 44 })).status).toBe(200);
      expect((await row(id)).weight_version).toBe('44');
      await sim.clearFaults();
    });

    it('a 2xx pass-through records the control state even when its body says success: false', async () => {
      const id = ids[3]!;
      await sims[3]!.setFaults({ route: 'pause_generation', status: 200, body: { success: false, message: 'nope' }, times: 1 });
      const r = await t.http('POST', `/v1/rl/workers/${id}/engine/pause_generation`, { body: {} });
      expect(r.status).toBe(200);
      expect(r.json.body.success).toBe(false);
      expect((await row(id)).control).toBe('paused');
      await sims[3]!.setFaults({ route: 'continue_generation', status: 503, times: 1 });
      expect((await t.http('POST', `/v1/rl/workers/${id}/engine/continue_generation`, { body: {} })).status).toBe(503);
      expect((await row(id)).control).toBe('paused');
      expect((await t.http('POST', `/v1/rl/workers/${id}/engine/continue_generation`, { body: {} })).status).toBe(200);
      expect((await row(id)).control).toBe('active');
      await sims[3]!.clearFaults();
    });

    it('POST /version?selector=engine%3Dsglang → RlWorkersResponse with every row at "2" (api); the fleet forms check body, version, then selector', async () => {
      await Promise.all(sims.map((s) => s.clearRequests()));
      const r = await t.http('POST', '/v1/rl/version?selector=engine%3Dsglang', { body: { weight_version: '2' } });
      expect(r.status).toBe(200);
      expect(r.json.protocol_version).toBe(1);
      expect(r.json.total).toBe(4);
      expect(r.json.workers).toHaveLength(4);
      expect(new Set(r.json.workers.map((w: { id: string }) => w.id))).toEqual(new Set(ids));
      for (const w of r.json.workers) {
        expect(w.weight_version).toBe('2');
        expect(w.version_source).toBe('api');
      }
      const listing = (await t.http('GET', '/v1/rl/workers')).json.workers;
      expect(listing.map((w: { weight_version: string }) => w.weight_version)).toEqual(['2', '2', '2', '2']);

      // Only the matching engine changes.
      const one = await t.http('POST', `/v1/rl/version?selector=url%3D${encodeURIComponent(sims[3]!.url)}`, { body: { weight_version: '3' } });
      expect(one.status).toBe(200);
      expect(one.json.total).toBe(1);
      expect(one.json.workers[0].id).toBe(ids[3]);
      expect(one.json.workers[0].weight_version).toBe('3');
      for (const id of ids.slice(0, 3)) expect((await row(id)).weight_version).toBe('2');

      // Fleet state write: same selector rules, rows of the targets.
      const asleep = await t.http('POST', `/v1/rl/state?selector=id%20in%20(${ids[0]},${ids[1]})`, { body: { control: 'asleep' } });
      expect(asleep.status).toBe(200);
      expect(asleep.json.total).toBe(2);
      expect(asleep.json.workers.map((w: { control: string }) => w.control)).toEqual(['asleep', 'asleep']);
      expect((await row(ids[2]!)).control).toBe('active');
      const active = await t.http('POST', '/v1/rl/state?selector=control%3Dasleep', { body: { control: 'active' } });
      expect(active.status).toBe(200);
      expect(active.json.total).toBe(2);

      const snapshot = (await t.http('GET', '/v1/rl/workers')).json;
      for (const route of ['/v1/rl/version', '/v1/rl/state']) {
        const good = route.endsWith('version') ? { weight_version: '5' } : { control: 'paused' };
        const bad = route.endsWith('version') ? { weight_version: 5 } : { control: 'Paused' };
        for (const q of ['', '?selector=', '?selector=%20%20']) {
          const m = await t.http('POST', `${route}${q}`, { body: good });
          expect(m.status, `${route}${q}`).toBe(400);
          expect(m.json.error, `${route}${q}`).toBe('selector_required');
        }
        const parse = await t.http('POST', `${route}?selector=engine%3D%3D`, { body: good });
        expect(parse.status).toBe(400);
        expect(parse.json).toMatchObject({ error: 'invalid_selector', offset: 7 });
        const padded = await t.http('POST', `${route}?selector=%20%20engine%3D%3D`, { body: good });
        expect(padded.json).toMatchObject({ error: 'invalid_selector', offset: 7 }); // offset into the trimmed text
        const none = await t.http('POST', `${route}?selector=%20engine%3Dtrtllm%20`, { body: good });
        expect(none.status).toBe(400);
        expect(none.json).toMatchObject({ error: 'no_workers_match', selector: 'engine=trtllm' });
        // Body first, then version, then selector.
        const badBodyNoSelector = await t.http('POST', route, { body: bad });
        expect(badBodyNoSelector.status).toBe(400);
        expect(badBodyNoSelector.json.error).toBe('invalid_body');
        const noBodyBadSelector = await t.http('POST', `${route}?selector=engine%3D%3D`);
        expect(noBodyBadSelector.json.error).toBe('invalid_body');
      }
      const badVersionBadSelector = await t.http('POST', '/v1/rl/version?selector=engine%3D%3D', { body: { weight_version: 'a b' } });
      expect(badVersionBadSelector.status).toBe(400);
      expect(badVersionBadSelector.json.error).toBe('invalid_version');
      const badVersionNoMatch = await t.http('POST', '/v1/rl/version?selector=engine%3Dvllm', { body: { weight_version: '' } });
      expect(badVersionNoMatch.json.error).toBe('invalid_version');

      expect((await t.http('GET', '/v1/rl/workers')).json).toEqual(snapshot);
      for (const s of sims) expect(await engineCalls(s)).toEqual([]);
    });
  });

  describe('a DP engine', () => {
    let t: TestGateway;
    let rank0: string;
    let rank1: string;
    let other: string;

    beforeAll(async () => {
      t = await startTestGateway();
      [rank1, rank0, other] = await t.register([`${sims[0]!.url}@1`, `${sims[0]!.url}@0`, sims[1]!.url], { ready: 2 });
    });
    afterAll(async () => {
      await t?.close();
    });

    it('a fleet version write over a 2-rank DP engine → total 1, dp_ranks 2, both ranks share the version', async () => {
      const sel = encodeURIComponent(`base_url=${sims[0]!.url}`);
      const otherBefore = (await t.http('GET', `/v1/rl/workers/${other}`)).json;
      const r = await t.http('POST', `/v1/rl/version?selector=${sel}`, { body: { weight_version: '2' } });
      expect(r.status).toBe(200);
      expect(r.json.total).toBe(1);
      expect(r.json.workers).toHaveLength(1);
      expect(r.json.workers[0]).toMatchObject({ id: rank0, url: `${sims[0]!.url}@0`, dp_ranks: 2, weight_version: '2', version_source: 'api' });
      const r1 = (await t.http('GET', `/v1/rl/workers/${rank1}`)).json;
      expect(r1).toMatchObject({ url: `${sims[0]!.url}@1`, dp_ranks: 2, weight_version: '2', version_source: 'api' });
      expect((await t.http('GET', `/v1/rl/workers/${other}`)).json).toEqual(otherBefore);

      // A per-worker write to rank 1 is keyed by the engine's base_url: rank 0 sees it too.
      const w1 = await t.http('POST', `/v1/rl/workers/${rank1}/version`, { body: { weight_version: '3' } });
      expect(w1.status).toBe(200);
      expect(w1.json).toMatchObject({ id: rank1, weight_version: '3', dp_ranks: 2 });
      expect((await t.http('GET', `/v1/rl/workers/${rank0}`)).json.weight_version).toBe('3');

      const s = await t.http('POST', `/v1/rl/state?selector=${sel}`, { body: { control: 'paused' } });
      expect(s.status).toBe(200);
      expect(s.json.total).toBe(1);
      expect(s.json.workers[0]).toMatchObject({ id: rank0, dp_ranks: 2, control: 'paused' });
      expect((await t.http('GET', `/v1/rl/workers/${rank1}`)).json.control).toBe('paused');
      expect((await t.http('GET', `/v1/rl/workers/${other}`)).json).toEqual(otherBefore);
    });
  });
});

describe('worker update route (PUT/PATCH /workers/:id)', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('replaces caller labels and re-seeds the version from a changed weight_version label', async () => {
    const r = await t.http('PATCH', `/workers/${id}`, { body: { labels: { role: 'rollout', weight_version: '12' } } });
    expect(r.status).toBe(200);
    expect(r.json.labels.role).toBe('rollout');
    await t.waitReady(1);
    const row = (await t.http('GET', `/v1/rl/workers/${id}`)).json;
    expect(row.role).toBe('rollout');
    expect(row.weight_version).toBe('12');
    expect(row.version_source).toBe('registration');
    expect(row.labels).not.toHaveProperty('api_key');
  });

  it('refuses unknown fields and wrong types with 400, and unknown ids with 404, changing nothing', async () => {
    expect((await t.http('PUT', `/workers/${id}`, { body: { url: 'http://elsewhere:1' } })).status).toBe(400);
    expect((await t.http('PATCH', `/workers/${id}`, { body: { labels: { a: 1 } } })).status).toBe(400);
    const missing = await t.http('PATCH', '/workers/nope', { body: { labels: {} } });
    expect(missing.status).toBe(404);
    expect(missing.json.error).toBe('worker_not_found');
    expect((await t.http('GET', `/v1/rl/workers/${id}`)).json.role).toBe('rollout');
  });
});
