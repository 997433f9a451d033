// A TokenSpeed worker on the rust servicer profile (no rl.* advertisement, no
// version stamp) degrades cleanly: static capability row, the label's version on rows and
// /generate, and control calls (fan-outs, refits) answered per engine — a working control app, a
// stopped one or none at all — never a crash, a hang or a 500.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runDistributedRefit } from '../../src/cli/trainer/refit.ts';

const STATIC_TOKENSPEED = {
  source: 'static',
  pause_modes: ['wait', 'abort'],
  update_from: ['distributed'],
  abort: true,
  flush_cache: true,
  sleep_wake: true,
  reports_weight_version: true,
};

describe('rust servicer profile behind the gateway', () => {
  let t: TestGateway;
  let rust: TokenspeedSimProcess;
  let bare: TokenspeedSimProcess;
  let sg: SimProcess;
  let rustId: string;
  let bareId: string;
  let sgId: string;

  const generate = (stream = false) => t.http('POST', '/generate', { body: { input_ids: [4, 5, 6], sampling_params: { max_new_tokens: 3 }, stream } });

  beforeAll(async () => {
    [rust, bare, sg] = await Promise.all([
      spawnTokenspeedSim(['--servicer-impl', 'rust', '--rl-control-port', '0', '--model', 'MODEL', '--token-rate', '0', '--weight-version', 'launch-0']),
      // A rust worker registered without the label: it has no control endpoint at all.
      spawnTokenspeedSim(['--servicer-impl', 'rust', '--model', 'MODEL', '--token-rate', '0']),
      spawnSglangSim(['--token-rate', '0', '--model', 'MODEL']),
    ]);
    expect(rust.servicerImpl).toBe('rust');
    t = await startTestGateway();
    [rustId, bareId, sgId] = await t.register([
      { url: rust.url, runtime_type: 'tokenspeed', labels: { 'rl.control_url': rust.controlUrl!, weight_version: '5' } },
      { url: bare.url, runtime_type: 'tokenspeed' },
      sg.url,
    ]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([rust?.stop(), bare?.stop(), sg?.stop()]);
  });

  it('row: static TokenSpeed capabilities, control_url from the label, weight_version from the label', async () => {
    const row = (await t.http('GET', `/v1/rl/workers/${rustId}`)).json;
    expect(row).toMatchObject({
      engine: 'tokenspeed',
      connection_mode: 'grpc',
      control_url: rust.controlUrl,
      weight_version: '5',
      version_source: 'registration',
      control: 'active',
      health: 'ready',
    });
    expect(row.capabilities).toEqual(STATIC_TOKENSPEED);
    // The rust profile advertises nothing: no rl.* key came from discovery, only ours.
    expect(Object.keys(row.labels).filter((k) => k.startsWith('rl.'))).toEqual(['rl.control_url']);
    // The engine's own launch version is discovered but the caller's label wins.
    expect(row.labels.weight_version).toBe('5');

    const bareRow = (await t.http('GET', `/v1/rl/workers/${bareId}`)).json;
    // No label, and the engine's own `default` placeholder seeds an unversioned entry.
    expect(bareRow).toMatchObject({ control_url: null, weight_version: null, version_source: null });
    expect(bareRow.capabilities).toEqual(STATIC_TOKENSPEED);
  });

  it('/generate reports the label version (no engine stamp), then the table version after a write', async () => {
    // Only the rust worker with the label serves: the others are taken out by a local state write.
    for (const id of [bareId, sgId]) expect((await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control: 'paused' } })).status).toBe(200);
    try {
      const b = await generate();
      expect(b.status).toBe(200);
      expect(b.headers['x-smg-routed-worker-id']).toBe(rust.url);
      expect(b.json.meta_info.weight_version).toBe('5');
      expect(b.json.output_ids).toHaveLength(3);
      const s = await generate(true);
      expect(s.status).toBe(200);
      expect(s.text).toContain('"weight_version":"5"');
      expect(s.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      // The engine itself stamps nothing, and its live version is another one.
      expect(await rust.state()).toMatchObject({ stamp: 'none', weightVersion: 'launch-0' });

      const write = await t.http('POST', `/v1/rl/workers/${rustId}/version`, { body: { weight_version: '6' } });
      expect(write.status).toBe(200);
      expect((await generate()).json.meta_info.weight_version).toBe('6');
    } finally {
      for (const id of [bareId, sgId]) await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control: 'active' } });
    }
  });

  it('flush_cache fan-out over the rust worker and SGLang: answered per engine by the control app', async () => {
    await rust.clearRecords();
    const r = await t.http('POST', `/v1/rl/engine/flush_cache?selector=${encodeURIComponent(`id in (${rustId},${sgId})`)}`, { body: {} });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(r.json.results[rustId]).toMatchObject({ status: 200, body: { success: true } });
    expect(r.json.results[sgId].status).toBe(200);
    expect((await rust.requests()).map((x) => x.path)).toEqual(['/flush_cache']);
    // The gRPC FlushCache RPC (UNIMPLEMENTED on rust) is never what the control plane uses.
    expect((await rust.rpcs()).some((x) => x.rpc === 'FlushCache')).toBe(false);
  });

  it('with every worker targeted: a per-engine no_control_endpoint entry, 207, never a 500', async () => {
    const r = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular', { body: {} });
    expect(r.status).toBe(207);
    expect(r.json).toMatchObject({ total: 3, succeeded: 2 });
    expect(r.json.failed).toEqual([expect.objectContaining({ worker_id: bareId, url: bare.url, error: 'no_control_endpoint', connection_mode: 'grpc' })]);
    expect(Object.keys(r.json.results).sort()).toEqual([rustId, sgId].sort());
  });

  it('a stopped control app is a per-engine upstream_unreachable entry; the data plane keeps serving', async () => {
    await rust.stopControlApp();
    try {
      const r = await t.http('POST', `/v1/rl/engine/flush_cache?selector=${encodeURIComponent(`id in (${rustId},${sgId})`)}`, { body: {} });
      expect(r.status).toBe(207);
      expect(r.json).toMatchObject({ total: 2, succeeded: 1 });
      expect(r.json.failed).toEqual([expect.objectContaining({ worker_id: rustId, url: rust.url, error: 'upstream_unreachable' })]);
      expect(r.json.failed[0].message).toContain(`${rust.controlUrl}/flush_cache`);
      expect(r.json.results[sgId].status).toBe(200);
      // Control failures never touch routing: the worker stays ready and keeps answering.
      const row = (await t.http('GET', `/v1/rl/workers/${rustId}`)).json;
      expect(row.health).toBe('ready');
      for (let i = 0; i < 3; i++) expect((await generate()).status).toBe(200);
    } finally {
      await rust.startControlApp();
    }
    const again = await t.http('POST', `/v1/rl/engine/flush_cache?selector=${encodeURIComponent(`id=${rustId}`)}`, { body: {} });
    expect(again.status).toBe(200);
  });

  it('a disk refit over it and SGLang: the rust engine is skipped (it loads only distributed), SGLang refits, nobody stays paused', async () => {
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: 'disk-7', selector: `id in (${rustId},${sgId})`, source: { kind: 'disk', model_path: '/models/disk-7' } },
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: 'succeeded', total: 1, succeeded: 1 });
    expect(r.json.skipped).toEqual([expect.objectContaining({ worker_id: rustId, reason: 'source_unsupported' })]);
    expect(r.json.engines).toEqual([expect.objectContaining({ worker_id: sgId, outcome: 'ok', weight_version: 'disk-7' })]);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    for (const row of rows) expect(row.control).toBe('active');
    expect(rows.find((x: { id: string }) => x.id === rustId).weight_version).toBe('6');
    expect(await rust.state()).toMatchObject({ paused: null, weightVersion: 'launch-0' });
  });

  it('a distributed refit of the rust worker: its /generate then reports the refit version the gateway recorded', async () => {
    const chunks = makeChunks({ params: 3, perChunk: 2, shape: [8, 8], dtype: 'float32' });
    const res = await runDistributedRefit({
      gateway: t.url,
      version: '9',
      chunks,
      selector: `id=${rustId}`,
      pick: (rows) => rows.filter((x) => x.id === rustId),
      rendezvousTimeoutMs: 15_000,
      chunkTimeoutMs: 15_000,
      httpTimeoutMs: 30_000,
    });
    expect(res.transferError).toBeNull();
    expect(res.status).toBe(200);
    expect(res.report).toMatchObject({ status: 'succeeded', world_size: 2, engines: [{ worker_id: rustId, outcome: 'ok', weight_version: '9' }] });
    expect((await rust.state()).weightVersion).toBe('9');
    for (const id of [bareId, sgId]) expect((await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control: 'paused' } })).status).toBe(200);
    try {
      const g = await generate();
      expect(g.status).toBe(200);
      expect(g.headers['x-smg-routed-worker-id']).toBe(rust.url);
      expect(g.json.meta_info.weight_version).toBe('9');
    } finally {
      for (const id of [bareId, sgId]) await t.http('POST', `/v1/rl/workers/${id}/state`, { body: { control: 'active' } });
    }
  });
});
