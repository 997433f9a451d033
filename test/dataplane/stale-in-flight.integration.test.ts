// The staleness bound on requests in flight (docs/refit-strategies.md#staleness-of-requests-in-flight):
// a /generate admitted at version 1 under `max-staleness:1` runs through two rolling refits of the
// fleet (its engine retracting it and going on). After the first it is one version behind, within
// its bound; after the second, two, past it. By default it is aborted: the engine itself is asked
// (`abort_request` with the request's rid, which its own records show) and its abort answer comes
// back, saying `x-rl-stale: aborted`. With `x-rl-on-stale: mark` it finishes whole and says
// `marked`. Each is counted in `rlgate_rl_stale_requests_total`.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestGateway } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { sample } from '../fixtures/prometheus-text.ts';
import type { SimProcess } from '../fixtures/sglang-sim.ts';
import { startVersionedFleet, type VersionedFleet } from '../fixtures/versioned-fleet.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';
import { defaultConfig } from '../../src/gateway/config.ts';

/** 80 tokens at 40 tokens/s: two seconds, long enough for two rolling refits. */
const LONG = { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 80, ignore_eos: true } };
const BOUNDED = { 'x-smg-version-policy': 'max-staleness:1' };

describe('a request in flight past its max-staleness bound', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let version = 1;

  const refit = async (strategy: Record<string, unknown>) => {
    version++;
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: String(version), source: { kind: 'disk', model_path: `/m/${version}`, flush_cache: false }, strategy },
    });
    expect(r.status, r.text).toBe(200);
  };
  const rolling = () => refit({ kind: 'rolling', pause_mode: 'retract', drain_timeout_ms: 50 });
  /** The engine running the request, by its own state, once it runs. */
  const runner = async () => {
    for (let i = 0; i < 100; i++) {
      for (const s of sims) if ((await s.state()).running > 0) return s;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error('the request never ran');
  };

  let fleet: VersionedFleet;
  beforeAll(async () => {
    // Both engines on a numeric version: staleness is a distance between versions.
    fleet = await startVersionedFleet({ sims: 2, simArgs: ['--token-rate', '40'] });
    ({ t, sims } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  it('is aborted by its engine, at the gateway’s request, once the fleet is two versions on; counted', async () => {
    const admittedAt = String(version);
    const answer = t.http('POST', '/generate', { body: LONG, headers: BOUNDED });
    const engine = await runner();
    await engine.clearRequests();
    await rolling();
    // One version behind: within the bound, still running.
    expect((await engine.state()).running + (await engine.state()).waiting).toBe(1);
    await rolling();
    const r = await answer;
    expect(r.status, r.text).toBe(200);
    expect(r.headers['x-rl-admitted-version']).toBe(admittedAt);
    expect(r.headers['x-rl-stale']).toBe('aborted');
    expect(r.json.meta_info.finish_reason.type).toBe('abort');
    expect(r.json.meta_info.completion_tokens).toBeLessThan(80);
    // The engine was asked to abort exactly this request.
    const aborts = (await engine.requests()).filter((q) => q.path === '/abort_request').map((q) => JSON.parse(q.body).rid);
    expect(aborts).toHaveLength(1);
    expect(aborts[0]).toMatch(/^rlgate-/);
    const metrics = (await t.http('GET', '/metrics')).text;
    expect(sample(metrics, 'rlgate_rl_stale_requests_total', { action: 'aborted' })).toBe(1);
  }, 30_000);

  it('with x-rl-on-stale: mark it finishes whole and says so; counted; a request within its bound is neither', async () => {
    const answer = t.http('POST', '/generate', { body: { ...LONG, rid: 'mine-1' }, headers: { ...BOUNDED, 'x-rl-on-stale': 'mark' } });
    const engine = await runner();
    await engine.clearRequests();
    await rolling();
    await rolling();
    const r = await answer;
    expect(r.status, r.text).toBe(200);
    expect(r.headers['x-rl-stale']).toBe('marked');
    // It ran through two refits of its engine's fleet: admitted on one version, answered on another.
    expect(Number(r.headers['x-rl-admitted-version'])).toBeLessThan(Number(r.json.meta_info.weight_version));
    expect(r.headers['x-smg-mixed-version']).toBe('true');
    expect(r.json.meta_info.finish_reason.type).toBe('length');
    expect(r.json.meta_info.completion_tokens).toBe(80);
    expect((await engine.requests()).filter((q) => q.path === '/abort_request')).toEqual([]);
    const metrics = (await t.http('GET', '/metrics')).text;
    expect(sample(metrics, 'rlgate_rl_stale_requests_total', { action: 'marked' })).toBe(1);
    // Its off-policy lag: two versions behind the fleet when it ended.
    const lag = (le: string) => sample(metrics, 'rlgate_rl_rollout_version_lag_bucket', { le });
    expect(lag('2')! - lag('1')!).toBeGreaterThanOrEqual(1);

    // Through one refit only: within the bound, no header, nothing counted.
    const within = t.http('POST', '/generate', { body: LONG, headers: BOUNDED });
    await runner();
    await rolling();
    const w = await within;
    expect(w.status, w.text).toBe(200);
    expect(w.headers['x-rl-stale']).toBeUndefined();
    expect(w.json.meta_info.finish_reason.type).toBe('length');
    const after = (await t.http('GET', '/metrics')).text;
    expect(sample(after, 'rlgate_rl_stale_requests_total', { action: 'aborted' })).toBe(1);
    expect(sample(after, 'rlgate_rl_stale_requests_total', { action: 'marked' })).toBe(1);
  }, 30_000);

  it('refuses an x-rl-on-stale other than abort or mark (400, nothing routed)', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const r = await t.http('POST', '/generate', { body: LONG, headers: { ...BOUNDED, 'x-rl-on-stale': 'ignore' } });
    expect(r.status).toBe(400);
    expect(r.json.error).toBe('invalid_request');
    for (const s of sims) expect((await s.requests()).filter((q) => q.path === '/generate')).toEqual([]);
  });
});

describe('a token engine’s request in flight past its bound (TokenSpeed over gRPC)', () => {
  let fleet: TokenFleet;
  afterAll(() => fleet?.close());

  it('is cut off into an abort partial that says why; the engine is not charged a failure', async () => {
    fleet = await startTokenFleet({
      sglang: ['--model', 'MODEL', '--token-rate', '0'],
      tokenspeed: [['--model', 'MODEL', '--token-rate', '40']],
      // X-SMG-Target-Worker picks the TokenSpeed engine (consistent_hashing honours it).
      gateway: { routing: { ...defaultConfig().routing, policy: 'consistent_hashing' } },
    });
    const { t, ids } = fleet;
    // TokenSpeed loads over NCCL only: disk refits move the SGLang engine, and with it the fleet.
    for (const id of [ids.sg!, ids.ts[0]!]) expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '1' } })).status).toBe(200);
    const answer = t.http('POST', '/generate', { body: LONG, headers: { ...BOUNDED, 'x-smg-target-worker': ids.ts[0]! } });
    await new Promise((r) => setTimeout(r, 200));
    for (const v of ['2', '3']) {
      const r = await t.http('POST', '/v1/rl/refits', { body: { weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` } } });
      expect(r.status, r.text).toBe(200);
      expect(r.json.engines.map((e: { worker_id: string }) => e.worker_id)).toEqual([ids.sg]);
    }
    const r = await answer;
    expect(r.status, r.text).toBe(200);
    expect(r.headers['x-smg-routed-worker-id']).toBe(fleet.ts[0]!.url);
    expect(r.headers['x-rl-admitted-version']).toBe('1');
    expect(r.headers['x-rl-stale']).toBe('aborted');
    expect(r.json.meta_info.finish_reason).toMatchObject({ type: 'abort' });
    expect(r.json.meta_info.finish_reason.message).toContain('stale: admitted on version 1, the fleet is on 3');
    expect(r.json.output_ids.length).toBeLessThan(80);
    const row = (await t.http('GET', `/v1/rl/workers/${ids.ts[0]}`)).json;
    expect(row.breaker).toBe('closed');
    // The engine's own count: the cancelled generation stops there too.
    await until('the engine to stop generating', 5_000, async () => (await fleet.ts[0]!.state()).running === 0);
  }, 30_000);
});
