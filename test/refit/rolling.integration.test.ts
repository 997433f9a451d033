// Rolling refits (strategy `rolling`, docs/refit-strategies.md), judged on the engines' own
// records and state: under steady load over six SGLang simulators, waves of one engine each; no
// two engines are ever paused at once (the engines' `/_sim/state` sampled every 50 ms, and the
// pause → resume windows the engines recorded never overlap); every request is answered 200,
// none aborted, each with a version the engine held while it made it; every engine ends on the
// new version. A wave that fails stops the waves (`max_failed: 0`), or not (`max_failed: 1`).
// An `in_flight` refit over an engine that cannot pause in place is refused before any pause.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { sample } from '../fixtures/prometheus-text.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const LOAD_MS = 250;
/**
 * 16 tokens at 100 tokens/s: a request takes about 160 ms, long enough that a wave's drain (begun
 * after a journal write, counted by asking the engine) still finds the requests that were running
 * when routing turned away from its engine, on a loaded machine too.
 */
const ASK = { input_ids: [1, 2, 3, 4], sampling_params: { max_new_tokens: 16 } };

interface Answer {
  sent: number;
  received: number;
  status: number;
  worker: string;
  version: string | undefined;
  finish: string | undefined;
}

/** The engine's unavailable windows: each pause's arrival to the next resume's, from its own records. */
async function windows(s: SimProcess): Promise<Array<[number, number]>> {
  const out: Array<[number, number]> = [];
  let from: number | undefined;
  for (const r of await s.requests()) {
    if (r.path === '/pause_generation') from = Date.parse(r.time);
    if (r.path === '/continue_generation' && from !== undefined) {
      out.push([from, Date.parse(r.time)]);
      from = undefined;
    }
  }
  return out;
}

describe('a rolling refit of six engines under load, one at a time', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  /** The engines in the waves' order (the fleet's), as the first refit's report gives it. */
  let inOrder: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all(Array.from({ length: 6 }, () => spawnSglangSim(['--token-rate', '100'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('never more than one engine paused, every request answered with a version its engine held, all on the new version', async () => {
    for (const s of sims) await s.setFaults({ route: 'update_weights_from_disk', delayMs: LOAD_MS });
    await Promise.all(sims.map((s) => s.clearRequests()));
    const answers: Answer[] = [];
    let loading = true;
    // Eight callers, each sending its next request as soon as the last is answered.
    const callers = Array.from({ length: 8 }, async () => {
      while (loading) {
        const sent = Date.now();
        const r = await t.http('POST', '/generate', { body: ASK });
        answers.push({
          sent,
          received: Date.now(),
          status: r.status,
          worker: String(r.headers['x-smg-routed-worker-id']),
          version: r.json?.meta_info?.weight_version,
          finish: r.json?.meta_info?.finish_reason?.type,
        });
      }
    });
    // What the engines say, every 50 ms: how many are paused now.
    let mostPaused = 0;
    let samples = 0;
    const sampler = (async () => {
      while (loading) {
        const states = await Promise.all(sims.map((s) => s.state()));
        mostPaused = Math.max(mostPaused, states.filter((st) => st.paused !== null).length);
        samples++;
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    const refit = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '2', source: { kind: 'disk', model_path: '/m/2' }, strategy: { kind: 'rolling', max_unavailable: 1, drain_timeout_ms: 5_000 } },
    });
    await new Promise((r) => setTimeout(r, 300));
    loading = false;
    await Promise.all([...callers, sampler]);

    expect(refit.status, refit.text).toBe(200);
    // The waves' order, for the tests below, before anything here may fail.
    const urlOf = new Map(refit.json.engines.map((e: { worker_id: string; url: string }) => [e.worker_id, e.url]));
    inOrder = refit.json.waves.map((w: { engines: string[] }) => sims.find((s) => s.url === urlOf.get(w.engines[0]!))!);
    expect(refit.json).toMatchObject({ status: 'succeeded', strategy: 'rolling', total: 6, succeeded: 6, failed: [], skipped: [] });
    expect(refit.json.waves.map((w: { engines: string[] }) => w.engines.length)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(new Set(refit.json.waves.flatMap((w: { engines: string[] }) => w.engines)).size).toBe(6);
    // Each engine was held at least for its load, one at a time: never longer than the whole refit.
    expect(refit.json.downtime_engine_ms).toBeGreaterThanOrEqual(6 * LOAD_MS);
    expect(refit.json.downtime_engine_ms).toBeLessThan(refit.json.duration_ms);
    // The drains found requests running on the waves' engines and let them finish (none aborted below).
    expect(refit.json.waves.reduce((n: number, w: { drained_requests: number }) => n + w.drained_requests, 0)).toBeGreaterThan(0);
    expect(refit.json.waves.every((w: { drain_timed_out: string[] }) => w.drain_timed_out.length === 0)).toBe(true);
    const metrics = (await t.http('GET', '/metrics')).text;
    expect(sample(metrics, 'rlgate_rl_refit_downtime_engine_seconds_total')).toBeCloseTo(refit.json.downtime_engine_ms / 1000, 1);

    // The engines' own word: all on the new version, none paused; at most one was paused at a time.
    for (const s of sims) expect((await s.state()).weightVersion, s.url).toBe('2');
    for (const s of sims) expect((await s.state()).paused, s.url).toBeNull();
    expect(samples).toBeGreaterThan(10);
    expect(mostPaused).toBe(1);
    const all = (await Promise.all(sims.map(async (s) => (await windows(s)).map(([a, b]) => ({ url: s.url, a, b }))))).flat();
    expect(all).toHaveLength(6);
    all.sort((x, y) => x.a - y.a);
    for (let i = 1; i < all.length; i++) expect(all[i]!.a, `${all[i]!.url} paused before ${all[i - 1]!.url} resumed`).toBeGreaterThanOrEqual(all[i - 1]!.b);

    // Every request answered, none cut off; each version one its engine held while it ran it.
    expect(answers.length).toBeGreaterThan(50);
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    expect(answers.filter((a) => a.finish === 'abort')).toEqual([]);
    const windowOf = new Map(all.map((w) => [w.url, w]));
    for (const a of answers) {
      const w = windowOf.get(a.worker)!;
      if (a.received <= w.a) expect(a.version, `${a.worker} answered before its pause`).toBe('default');
      else if (a.sent >= w.b) expect(a.version, `${a.worker} answered after its resume`).toBe('2');
      else expect(['default', '2']).toContain(a.version);
    }
    // The drain worked: no request ran on an engine while it was paused.
    const during = answers.filter((a) => {
      const w = windowOf.get(a.worker)!;
      return a.sent > w.a && a.received < w.b;
    });
    expect(during).toEqual([]);
    for (const s of sims) await s.clearFaults();
  }, 60_000);

  it('a dry run answers the waves it would run, touching nothing', async () => {
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { dry_run: true, weight_version: '9', source: { kind: 'disk', model_path: '/m/9' }, strategy: { kind: 'rolling', max_unavailable: '50%' } },
    });
    expect(r.status, r.text).toBe(200);
    const ids = inOrder.map((s) => r.json.targets.find((x: { url: string }) => x.url === s.url).worker_id);
    expect(r.json).toMatchObject({ dry_run: true, strategy: 'rolling', waves: [ids.slice(0, 3), ids.slice(3)] });
    for (const s of sims) expect((await s.state()).weightVersion).toBe('2');
  });

  it('a failing third wave stops the waves (max_failed 0): the rest keep their version, nothing is left paused', async () => {
    const third = inOrder[2]!;
    await third.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false, message: 'disk gone' } });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '3', source: { kind: 'disk', model_path: '/m/3' }, strategy: { kind: 'rolling', max_unavailable: 1 } },
    });
    expect(r.status, r.text).toBe(207);
    expect(r.json).toMatchObject({ status: 'partial', aborted: 'max_failed', total: 6, succeeded: 2 });
    expect(r.json.failed.map((e: { url: string }) => e.url)).toEqual([third.url]);
    expect(r.json.failed[0]).toMatchObject({ failed_phase: 'refit', error: 'upstream_error' });
    expect(r.json.skipped.map((e: { url: string; reason: string }) => [e.url, e.reason])).toEqual(inOrder.slice(3).map((s) => [s.url, 'wave_not_run']));
    const versions = await Promise.all(inOrder.map(async (s) => (await s.state()).weightVersion));
    expect(versions).toEqual(['3', '3', '2', '2', '2', '2']);
    for (const s of sims) expect((await s.state()).paused, s.url).toBeNull();
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; quarantined: boolean; control: string }>;
    for (const row of rows) {
      expect(row.control, row.url).toBe('active');
      expect(row.quarantined, row.url).toBe(row.url === third.url);
    }
    await third.clearFaults();
  }, 60_000);

  it('with max_failed 1 the waves go on past the failed engine', async () => {
    const third = inOrder[2]!;
    await third.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false, message: 'disk gone' } });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '4', source: { kind: 'disk', model_path: '/m/4' }, strategy: { kind: 'rolling', max_unavailable: 2, max_failed: 1 } },
    });
    expect(r.status, r.text).toBe(207);
    expect(r.json).toMatchObject({ status: 'partial', total: 6, succeeded: 5, skipped: [] });
    expect(r.json.aborted).toBeUndefined();
    expect(r.json.waves.map((w: { engines: string[] }) => w.engines.length)).toEqual([2, 2, 2]);
    const versions = await Promise.all(inOrder.map(async (s) => (await s.state()).weightVersion));
    expect(versions).toEqual(['4', '4', '2', '4', '4', '4']);
    for (const s of sims) expect((await s.state()).paused, s.url).toBeNull();
    await third.clearFaults();
  }, 60_000);
});

describe('an in_flight refit over an engine that cannot pause in place', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    // The second says (as a TokenSpeed build without `keep` would) that it can only wait or abort.
    ids = await t.register([sims[0]!.url, { url: sims[1]!.url, labels: { 'rl.pause_modes': 'wait,abort' } }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('is refused with 409 strategy_unsupported naming it, before any engine is paused', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '2', source: { kind: 'disk', model_path: '/m/2' }, strategy: { kind: 'in_flight' } },
    });
    expect(r.status, r.text).toBe(409);
    expect(r.json.error).toBe('strategy_unsupported');
    expect(r.json.message).toContain(ids[1]);
    expect(r.json.message).not.toContain(ids[0]);
    const touching = new Set(['/pause_generation', '/update_weights_from_disk', '/continue_generation']);
    for (const s of sims) {
      expect((await s.requests()).filter((q) => touching.has(q.path))).toEqual([]);
      expect((await s.state()).weightVersion).toBe('default');
    }
  });
});
