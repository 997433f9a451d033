// The end-to-end SGLang-shaped lane: what a trainer does through the gateway, in order — discover,
// flush, pause/continue with rollouts still served, read the engine's own server info, and a disk
// refit whose version the next /generate reports.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const ALL = 'selector=worker_type%3Dregular';

describe('E2E SGLang-shaped lane', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  const fanout = (path: string, body: unknown) => t.http('POST', `/v1/rl/engine/${path}?${ALL}`, { body });

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0', '--model', 'MODEL', '--tp-size', '2'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('rows, flush, pause/continue around a chat completion, and the engine server_info', async () => {
    const listing = await t.http('GET', '/v1/rl/workers');
    expect(listing.status).toBe(200);
    expect(listing.json.total).toBe(2);
    for (const row of listing.json.workers) {
      expect(row.engine).toBe('sglang');
      expect(row.tp_size).not.toBeNull();
      expect(row.health).toBe('ready');
      expect(row.control_url).toBeTruthy();
      expect(row.capabilities.pause_modes).toContain('abort');
    }

    const flush = await fanout('flush_cache', {});
    expect(flush.status).toBe(200);
    expect(flush.json.total).toBeGreaterThanOrEqual(1);
    expect(flush.json.succeeded).toBe(flush.json.total);

    const pause = await fanout('pause_generation', {});
    expect(pause.status).toBe(200);
    expect(pause.json.succeeded).toBe(2);
    for (const s of sims) expect((await s.state()).paused).not.toBeNull();
    const resume = await fanout('continue_generation', {});
    expect(resume.status).toBe(200);
    expect(resume.json.succeeded).toBe(2);
    for (const s of sims) expect((await s.state()).paused).toBeNull();

    const chat = await t.http('POST', '/v1/chat/completions', {
      body: { model: 'MODEL', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 },
    });
    expect(chat.status).toBe(200);
    expect(Array.isArray(chat.json.choices)).toBe(true);
    expect(chat.json.choices.length).toBeGreaterThanOrEqual(1);

    const info = await t.http('GET', `/v1/rl/workers/${ids[0]}/engine/server_info`);
    expect(info.status).toBe(200);
    expect(info.json.status).toBe(200);
    expect(info.json.body.tp_size).not.toBeNull();
    expect(info.json.body.tp_size).toBe(2);
  });

  it('pause, disk refit, continue; the next /generate reports the new version', async () => {
    const pause = await fanout('pause_generation', {});
    expect(pause.status).toBe(200);
    const refit = await fanout('update_weights_from_disk', { model_path: '/models/e2e', weight_version: 'e2e-refit', flush_cache: true });
    expect(refit.status).toBe(200);
    expect(refit.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    for (const id of ids) expect(refit.json.results[id].body.success).toBe(true);
    const resume = await fanout('continue_generation', {});
    expect(resume.status).toBe(200);

    for (const s of sims) expect((await s.state()).weightVersion).toBe('e2e-refit');
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    for (const row of rows) expect(row).toMatchObject({ weight_version: 'e2e-refit', version_source: 'passthrough', control: 'active' });

    // Two requests so that, whichever engine the router picks, the answer carries the new version.
    for (let i = 0; i < 2; i++) {
      const gen = await t.http('POST', '/generate', { body: { text: 'Hello', sampling_params: { max_new_tokens: 4 } } });
      expect(gen.status).toBe(200);
      expect(gen.json.meta_info.weight_version).toBe('e2e-refit');
    }
  });
});
