// Acceptance for TokenSpeed workers on the /v1/rl control plane (rows, discovery, the control
// endpoint, the proxy and fan-outs; fixture G): a real gateway and nats-server, two TokenSpeed gRPC
// simulators (one advertising its HTTP control app, one silent) and an SGLang simulator, all child
// processes.

import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/closed-port.ts';
import { startFixtureG, type FixtureG } from '../fixtures/fixture-g.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS as SG_OWN_PATHS, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type ControlRequest, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

/** SMG's RlWorkerEntry fields, in this order (rlgate's own extras may follow). */
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

async function sgCalls(sim: SimProcess, path: string): Promise<SimRequest[]> {
  return (await sim.requests()).filter((r) => !SG_OWN_PATHS.has(r.path) && r.path === path);
}

async function appCalls(sim: TokenspeedSimProcess, path?: string): Promise<ControlRequest[]> {
  return (await sim.requests()).filter((r) => path === undefined || r.path === path);
}

const q = (selector: string) => `selector=${encodeURIComponent(selector)}`;

describe('fixture G: ts-adv (advertising TokenSpeed), ts-silent (no control app), sg (SGLang)', () => {
  let t: TestGateway;
  let tsAdv: TokenspeedSimProcess;
  let tsSilent: TokenspeedSimProcess;
  let sg: SimProcess;
  let g: FixtureG | undefined;
  const id = { adv: '', silent: '', sg: '' };

  async function row(workerId: string) {
    const res = await t.http('GET', `/v1/rl/workers/${workerId}`);
    expect(res.status).toBe(200);
    return res.json;
  }

  beforeAll(async () => {
    g = await startFixtureG();
    ({ t, tsAdv, tsSilent, sg } = g);
    Object.assign(id, g.id);
  });
  afterAll(() => g?.close());

  it('rows show the control URL, the advertised or static capabilities and the caller-label version', async () => {
    const res = await t.http('GET', '/v1/rl/workers');
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ protocol_version: 1, total: 3 });
    const rows: Array<Record<string, any>> = res.json.workers;
    expect(rows).toHaveLength(3);
    for (const r of rows) {
      expect(Object.keys(r).slice(0, ROW_FIELDS.length), r.url).toEqual(ROW_FIELDS);
      expect(r.health, r.url).toBe('ready');
    }
    const bases = rows.map((r) => r.base_url);
    expect(bases).toEqual([...bases].sort());
    const byId = new Map(rows.map((r) => [r.id, r]));

    const adv = byId.get(id.adv)!;
    expect(adv).toMatchObject({
      url: tsAdv.url,
      base_url: tsAdv.url,
      engine: 'tokenspeed',
      model_id: 'MODEL',
      connection_mode: 'grpc',
      control_url: tsAdv.controlUrl,
      weight_version: 'registered',
      control: 'active',
    });
    expect(adv.capabilities).toEqual({
      source: 'label',
      pause_modes: ['wait', 'abort', 'keep'],
      update_from: ['distributed', 'mooncake'],
      abort: true,
      flush_cache: true,
      sleep_wake: true,
      reports_weight_version: true,
    });
    // Caller labels win over discovered ones; the rl.* advertisement is copied in.
    expect(adv.labels.weight_version).toBe('registered');
    expect(adv.labels['rl.control_url']).toBe(tsAdv.controlUrl);
    // Discovery: tokenspeed_version → version, scheduler_info.shm_namespace_id, GetModelInfo
    // flattened; a default launch reports attn_tp_size 1 (one GPU), folded into tp_size.
    expect(adv.engine_version).toBe('0.2.0');
    expect(adv.labels.version).toBe('0.2.0');
    expect(adv.labels.shm_namespace_id).toMatch(/^\S+:\d+$/);
    expect(adv.labels).toMatchObject({ served_model_name: 'MODEL', model_type: 'llama', vocab_size: '259', eos_token_ids: '[2]' });
    expect(adv.tp_size).toBe(1);
    expect(adv.pp_size).toBeNull();
    // The api key (and the control app's key) never appear anywhere in a row.
    expect(JSON.stringify(rows)).not.toContain('ts-secret');

    const silent = byId.get(id.silent)!;
    expect(silent).toMatchObject({ url: tsSilent.url, engine: 'tokenspeed', connection_mode: 'grpc', control_url: null });
    expect(silent.capabilities).toEqual({
      source: 'static',
      pause_modes: ['wait', 'abort'],
      update_from: ['distributed'],
      abort: true,
      flush_cache: true,
      sleep_wake: true,
      reports_weight_version: true,
    });
    expect(Object.keys(silent.labels).filter((k) => k.startsWith('rl.'))).toEqual([]);

    const s = byId.get(id.sg)!;
    expect(s).toMatchObject({ engine: 'sglang', connection_mode: 'http' });
    expect(s.control_url).toBe(s.base_url);
    expect(s.base_url).toBe(sg.url);
  });

  it('a per-worker pause reaches the control app with the worker bearer and exactly the caller body', async () => {
    await tsAdv.clearRecords();
    const res = await t.http('POST', `/v1/rl/workers/${id.adv}/engine/pause_generation`, {
      body: { mode: 'keep' },
      headers: { authorization: 'Bearer caller-token' },
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ worker_id: id.adv, url: tsAdv.url, status: 200 });
    expect(res.json.body).toMatchObject({ success: true, mode: 'keep' });
    expect(Number.isInteger(res.json.latency_ms)).toBe(true);

    const pauses = await appCalls(tsAdv, '/pause_generation');
    expect(pauses).toHaveLength(1);
    expect(pauses[0]!.body).toBe('{"mode":"keep"}');
    const all = await appCalls(tsAdv);
    expect(all.length).toBeGreaterThanOrEqual(1);
    for (const call of all) expect(call.headers.authorization, call.path).toBe('Bearer ts-secret');
    expect((await tsAdv.state()).paused).toBe('keep');
    expect((await row(id.adv)).control).toBe('paused');

    const resumed = await t.http('POST', `/v1/rl/workers/${id.adv}/engine/continue_generation`, { body: {} });
    expect(resumed.status).toBe(200);
    expect((await tsAdv.state()).paused).toBeNull();
    expect((await row(id.adv)).control).toBe('active');
  });

  it('a fan-out over ts-adv and sg by id reaches both with the same body', async () => {
    await Promise.all([tsAdv.clearRecords(), sg.clearRequests(), tsSilent.clearRecords()]);
    const res = await t.http('POST', `/v1/rl/engine/pause_generation?${q(`id in (${id.adv},${id.sg})`)}`, { body: { mode: 'abort' } });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(Object.keys(res.json.results)).toEqual([id.adv, id.sg].sort());

    const tsPauses = await appCalls(tsAdv, '/pause_generation');
    expect(tsPauses.map((c) => c.body)).toEqual(['{"mode":"abort"}']);
    expect(tsPauses[0]!.headers.authorization).toBe('Bearer ts-secret');
    const sgPauses = await sgCalls(sg, '/pause_generation');
    expect(sgPauses.map((c) => c.body)).toEqual(['{"mode":"abort"}']);
    expect(sgPauses[0]!.headers).not.toHaveProperty('authorization');
    // ts-silent was not selected and has no control app to call anyway: no RPC looked like a pause.
    expect((await tsSilent.state()).paused).toBeNull();

    const resumed = await t.http('POST', `/v1/rl/engine/continue_generation?${q(`id in (${id.adv},${id.sg})`)}`, { body: {} });
    expect(resumed.status).toBe(200);
    expect(resumed.json).toMatchObject({ total: 2, succeeded: 2 });
    expect((await tsAdv.state()).paused).toBeNull();
  });

  it('a flush over every worker is 207 with ts-silent as no_control_endpoint; breakers stay closed, load 0', async () => {
    await Promise.all([tsAdv.clearRecords(), sg.clearRequests()]);
    const res = await t.http('POST', `/v1/rl/engine/flush_cache?${q('worker_type=regular')}`);
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ total: 3, succeeded: 2 });
    expect(Object.keys(res.json.results)).toEqual([id.adv, id.sg].sort());
    expect(res.json.results[id.adv]).toMatchObject({ status: 200, body: { success: true, message: 'Cache flushed.' } });
    expect(res.json.failed).toHaveLength(1);
    const f = res.json.failed[0];
    expect(f).toMatchObject({ worker_id: id.silent, url: tsSilent.url, error: 'no_control_endpoint', connection_mode: 'grpc' });
    expect(f).not.toHaveProperty('status');
    expect(f.message).toContain('rl.control_url');

    // The empty body stays empty on the way to the control app.
    const [flush, ...more] = await appCalls(tsAdv, '/flush_cache');
    expect(more).toEqual([]);
    expect(flush).toMatchObject({ method: 'POST', bodyBytes: 0 });

    for (let i = 0; i < 4; i++) expect((await t.http('POST', `/v1/rl/engine/flush_cache?${q('worker_type=regular')}`)).status).toBe(207);
    const rows: Array<Record<string, any>> = (await t.http('GET', '/v1/rl/workers')).json.workers;
    expect(rows).toHaveLength(3);
    for (const r of rows) {
      expect(r.breaker, r.url).toBe('closed');
      expect(r.load, r.url).toBe(0);
      expect(r.health, r.url).toBe('ready');
    }
  });

  it('a per-worker call to ts-silent is 422 no_control_endpoint with its grpc:// URL', async () => {
    const rpcsBefore = (await tsSilent.rpcs()).length;
    const res = await t.http('POST', `/v1/rl/workers/${id.silent}/engine/pause_generation`, { body: {} });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ error: 'no_control_endpoint', worker_id: id.silent, url: tsSilent.url, connection_mode: 'grpc' });
    expect(res.json.url.startsWith('grpc://')).toBe(true);
    expect(res.json.message).toContain('rl.control_url');
    // Nothing was sent to the engine in its stead (probes aside, no pause-shaped RPC exists).
    const rpcs = (await tsSilent.rpcs()).slice(rpcsBefore).map((r) => r.rpc);
    expect(rpcs.filter((r) => r !== 'HealthCheck' && r !== 'GetServerInfo' && r !== 'GetModelInfo')).toEqual([]);
  });

  it('with the control app stopped, a flush fan-out names the grpc:// URL and the control URL it called', async () => {
    await tsAdv.stopControlApp();
    try {
      const res = await t.http('POST', `/v1/rl/engine/flush_cache?${q(`id=${id.adv}`)}`);
      expect(res.status).toBe(207);
      expect(res.json).toMatchObject({ total: 1, succeeded: 0, results: {} });
      expect(res.json.failed).toHaveLength(1);
      const f = res.json.failed[0];
      expect(f).toMatchObject({ worker_id: id.adv, url: tsAdv.url, error: 'upstream_unreachable' });
      expect(f.url.startsWith('grpc://')).toBe(true);
      expect(f.message).toContain(`${tsAdv.controlUrl}/flush_cache`);
      expect(f).not.toHaveProperty('status');
      // gRPC keeps serving: the worker is still ready, its breaker closed.
      const r = await row(id.adv);
      expect(r).toMatchObject({ health: 'ready', breaker: 'closed', load: 0 });
    } finally {
      await tsAdv.startControlApp();
    }
    const again = await t.http('POST', `/v1/rl/engine/flush_cache?${q(`id=${id.adv}`)}`);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ total: 1, succeeded: 1, failed: [] });
  });

  it('a disk refit fan-out to ts-adv is 207 upstream_error 501; the engine keeps serving afterwards', async () => {
    const before = await row(id.adv);
    const res = await t.http('POST', `/v1/rl/engine/update_weights_from_disk?${q(`id=${id.adv}`)}`, {
      body: { model_path: '/m', weight_version: 'e2e-refused', flush_cache: true },
    });
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ total: 1, succeeded: 0 });
    expect(res.json.failed).toEqual([{ worker_id: id.adv, url: tsAdv.url, error: 'upstream_error', message: 'HTTP 501', status: 501 }]);
    const outcome = res.json.results[id.adv];
    expect(outcome).toMatchObject({ worker_id: id.adv, status: 501, body: { success: false } });
    expect(outcome.body.message).toContain('distributed');
    expect(outcome.body.message).toContain('update_weights_from_disk');
    // A non-2xx is never observed: the version stays what it was.
    const after = await row(id.adv);
    expect(after.weight_version).toBe(before.weight_version);
    expect(after.version_source).toBe(before.version_source);
    expect((await tsAdv.state()).weightVersion).not.toBe('e2e-refused');

    const cont = await t.http('POST', `/v1/rl/engine/continue_generation?${q(`id=${id.adv}`)}`, { body: {} });
    expect(cont.status).toBe(200);
    expect(cont.json).toMatchObject({ total: 1, succeeded: 1, failed: [] });

    const chat = await t.http('POST', '/v1/chat/completions', {
      body: { model: 'MODEL', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 },
    });
    expect(chat.status).toBe(200);
    expect(chat.json.choices.length).toBeGreaterThanOrEqual(1);

    // The refused engine itself still generates (round robin: two picks visit both gRPC engines).
    const routed = new Set<string>();
    for (let i = 0; i < 6 && !routed.has(tsAdv.url); i++) {
      const gen = await t.http('POST', '/generate', { body: { model: 'MODEL', input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } } });
      expect(gen.status).toBe(200);
      routed.add(String(gen.headers['x-smg-routed-worker-id']));
      if (gen.headers['x-smg-routed-worker-id'] === tsAdv.url) expect(gen.json.meta_info.weight_version).toBe('v7');
    }
    expect(routed.has(tsAdv.url)).toBe(true);
  });
});

describe('where rl.control_url points, resolved against the worker URL', () => {
  let t: TestGateway;

  beforeAll(async () => {
    t = await startTestGateway({ rl: { controlTimeoutSecs: 5 } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('a wildcard host takes the worker host; a blank label means no endpoint; an HTTP worker ignores the label', async () => {
    // Loopback aliases stand in for a remote 10.0.0.5: the workers never become ready, and the
    // gateway's discovery attempts must not leave this machine.
    const p = await closedPort();
    const workers = {
      wildcard: `grpc://127.0.0.5:${p}`,
      blank: `grpc://127.0.0.6:${p}`,
      dp: `grpc://127.0.0.7:${p}@2`,
      http: `http://127.0.0.8:${p}`,
    };
    const [wildcard, blank, dp, http] = await t.register(
      [
        { url: workers.wildcard, runtime_type: 'tokenspeed', labels: { 'rl.control_url': 'http://0.0.0.0:40100' } },
        { url: workers.blank, runtime_type: 'tokenspeed', labels: { 'rl.control_url': '  ' } },
        { url: workers.dp, runtime_type: 'tokenspeed', labels: { 'rl.control_url': 'http://:40100/' } },
        { url: workers.http, labels: { 'rl.control_url': 'http://elsewhere:1' } },
      ],
      { ready: 0 },
    );
    const rows = new Map<string, Record<string, any>>(
      ((await t.http('GET', '/v1/rl/workers')).json.workers as Array<Record<string, any>>).map((r) => [r.id, r]),
    );
    expect(rows.get(wildcard!)!.control_url).toBe('http://127.0.0.5:40100');
    expect(rows.get(blank!)!.control_url).toBeNull();
    expect(rows.get(dp!)!.control_url).toBe('http://127.0.0.7:40100');
    expect(rows.get(http!)!.control_url).toBe(workers.http);
    expect(rows.get(http!)!.control_url).toBe(rows.get(http!)!.base_url);

    // The blank label is no endpoint on the wire too.
    const none = await t.http('POST', `/v1/rl/workers/${blank}/engine/pause_generation`, { body: {} });
    expect(none.status).toBe(422);
    expect(none.json).toMatchObject({ error: 'no_control_endpoint', worker_id: blank, url: workers.blank, connection_mode: 'grpc' });
  });
});

describe('a gRPC worker whose control client cannot be built', () => {
  let t: TestGateway;
  let tsAdv: TokenspeedSimProcess;
  let dir: string;
  let caPath: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rlgate-badca-'));
    caPath = join(dir, 'bad-ca-bundle.pem');
    writeFileSync(caPath, 'this is not a PEM certificate bundle\n');
    tsAdv = await spawnTokenspeedSim(['--rl-control-port', '0', '--stamp-weight-version', 'v7', '--model', 'MODEL', '--token-rate', '0']);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 5 } });
  });
  afterAll(async () => {
    await t?.close();
    await tsAdv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps its control_url, and every call is 422 no_control_endpoint naming the cause', async () => {
    // The pool configuration SMG takes at registration (`http_pool`), with an unusable CA bundle.
    const [wid] = await t.register([{ url: tsAdv.url, runtime_type: 'tokenspeed', http_pool: { ca_cert_path: caPath } }]);
    const r = (await t.http('GET', `/v1/rl/workers/${wid}`)).json;
    expect(r.control_url).toBe(tsAdv.controlUrl);

    await tsAdv.clearRecords();
    const res = await t.http('POST', `/v1/rl/workers/${wid}/engine/pause_generation`, { body: {} });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ error: 'no_control_endpoint', worker_id: wid, url: tsAdv.url, connection_mode: 'grpc' });
    expect(res.json.message).toContain('no HTTP client for the control endpoint: ');
    expect(res.json.message).toContain(caPath);
    // The call was refused before anything was sent.
    expect(await appCalls(tsAdv)).toEqual([]);

    const fan = await t.http('POST', `/v1/rl/engine/flush_cache?${q(`id=${wid}`)}`);
    expect(fan.status).toBe(207);
    expect(fan.json.failed).toEqual([expect.objectContaining({ worker_id: wid, error: 'no_control_endpoint', connection_mode: 'grpc' })]);
    expect(fan.json.failed[0].message).toContain('no HTTP client for the control endpoint: ');
  });
});
