// In-flight refits (strategy `in_flight`, docs/refit-strategies.md#in_flight) on two SGLang
// simulators with requests running: each engine is paused in place (its own records show
// `pause_generation {"mode":"in_place"}`), loaded without a flush and resumed; no request is
// aborted, each finishes whole, admitted on the old version and answered on the new (flagged
// mixed); both engines end on the new version. SGLang cannot flush while requests are frozen in
// place, so `cache: "flush"` over SGLang engines is refused before anything is paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestGateway } from '../fixtures/gateway.ts';
import type { SimProcess } from '../fixtures/sglang-sim.ts';
import { startVersionedFleet, type VersionedFleet } from '../fixtures/versioned-fleet.ts';

/** 60 tokens at 60 tokens/s: a second, through the refit. */
const LONG = { input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 60, ignore_eos: true } };

describe('an in_flight refit of engines that run requests', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  let fleet: VersionedFleet;
  beforeAll(async () => {
    fleet = await startVersionedFleet({ sims: 2, simArgs: ['--token-rate', '60'] });
    ({ t, sims } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  it('pauses in place, aborts nothing: every request finishes whole, admitted on 1 and answered on 2', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const answers = Array.from({ length: 4 }, () => t.http('POST', '/generate', { body: LONG }));
    // Every engine runs some of them.
    for (let i = 0; i < 100 && (await Promise.all(sims.map(async (s) => (await s.state()).running))).some((n) => n === 0); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const refit = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '2', source: { kind: 'disk', model_path: '/m/2' }, strategy: { kind: 'in_flight', cache: 'keep' } },
    });
    expect(refit.status, refit.text).toBe(200);
    expect(refit.json).toMatchObject({ status: 'succeeded', strategy: 'in_flight', succeeded: 2 });
    for (const r of await Promise.all(answers)) {
      expect(r.status, r.text).toBe(200);
      expect(r.json.meta_info.finish_reason.type).toBe('length');
      expect(r.json.meta_info.completion_tokens).toBe(60);
      expect(r.headers['x-rl-admitted-version']).toBe('1');
      expect(r.json.meta_info.weight_version).toBe('2');
      expect(r.headers['x-smg-mixed-version']).toBe('true');
    }
    for (const s of sims) {
      const calls = (await s.requests()).filter((q) => q.path === '/pause_generation' || q.path === '/update_weights_from_disk');
      expect(calls.map((q) => [q.path, JSON.parse(q.body).mode ?? JSON.parse(q.body).flush_cache])).toEqual([
        ['/pause_generation', 'in_place'],
        ['/update_weights_from_disk', false],
      ]);
      const st = await s.state();
      expect(st.weightVersion).toBe('2');
      expect(st.paused).toBeNull();
    }
  }, 30_000);

  it('cache: flush over SGLang engines is refused (409 strategy_unsupported), nothing paused', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '3', source: { kind: 'disk', model_path: '/m/3' }, strategy: { kind: 'in_flight', cache: 'flush' } },
    });
    expect(r.status, r.text).toBe(409);
    expect(r.json.error).toBe('strategy_unsupported');
    expect(r.json.message).toContain('flush');
    for (const s of sims) {
      expect((await s.requests()).filter((q) => q.path === '/pause_generation')).toEqual([]);
      expect((await s.state()).weightVersion).toBe('2');
    }
  });
});
