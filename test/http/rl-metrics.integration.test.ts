// The RL Prometheus series (`rlgate_rl_…` in place of `smg_rl_…`) as /metrics shows them after
// real pass-through calls and fan-outs: per-engine version and control gauges, control-call
// counters by op and result, fan-out counters and histograms.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort as deadPort } from '../fixtures/closed-port.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

/** The value of one sample, matched by name and exact label set; undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : 1));
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)]
      .map((x) => [x[1]!, x[2]!] as const)
      .sort(([a], [b]) => (a < b ? -1 : 1));
    if (JSON.stringify(got) === JSON.stringify(want)) return Number(m[3]);
  }
  return undefined;
}

describe('RL metrics', () => {
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
  });
  afterAll(async () => {
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  describe('version and control gauges', () => {
    let t: TestGateway;
    let ids: string[];
    const metrics = async () => (await t.http('GET', '/metrics')).text;

    beforeAll(async () => {
      t = await startTestGateway();
      ids = await t.register(sims.map((s) => s.url));
    });
    afterAll(async () => {
      await t?.close();
    });

    it('fan-out update_weight_version {"new_version":"9"} → every row at "9"; worker_weight_version = 9 and worker_control_state = 0 per base_url', async () => {
      const r = await t.http('POST', '/v1/rl/engine/update_weight_version?selector=engine%3Dsglang', { body: { new_version: '9' } });
      expect(r.status).toBe(200);
      expect(r.json.total).toBe(3);
      expect(r.json.succeeded).toBe(3);
      const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
      expect(rows).toHaveLength(3);
      for (const w of rows) {
        expect(w.weight_version).toBe('9');
        expect(w.version_source).toBe('passthrough');
        expect(w.control).toBe('active');
      }
      const text = await metrics();
      for (const s of sims) {
        expect(sample(text, 'rlgate_rl_worker_weight_version', { worker: s.url }), s.url).toBe(9);
        expect(sample(text, 'rlgate_rl_worker_control_state', { worker: s.url }), s.url).toBe(0);
      }
      expect(text).toMatch(/^# TYPE rlgate_rl_worker_weight_version gauge$/m);
      expect(text).toMatch(/^# TYPE rlgate_rl_worker_control_state gauge$/m);
    });

    it('worker_control_state follows the control state: paused 1, asleep 2, active 0', async () => {
      const [a, b] = sims;
      expect((await t.http('POST', `/v1/rl/engine/pause_generation?selector=id%3D${ids[0]}`, { body: {} })).status).toBe(200);
      expect((await t.http('POST', `/v1/rl/workers/${ids[1]}/state`, { body: { control: 'asleep' } })).status).toBe(200);
      let text = await metrics();
      expect(sample(text, 'rlgate_rl_worker_control_state', { worker: a!.url })).toBe(1);
      expect(sample(text, 'rlgate_rl_worker_control_state', { worker: b!.url })).toBe(2);
      expect(sample(text, 'rlgate_rl_worker_control_state', { worker: sims[2]!.url })).toBe(0);

      expect((await t.http('POST', `/v1/rl/engine/continue_generation?selector=id%3D${ids[0]}`, { body: {} })).status).toBe(200);
      expect((await t.http('POST', `/v1/rl/workers/${ids[1]}/state`, { body: { control: 'active' } })).status).toBe(200);
      // An API version write moves the gauge too (numeric versions only).
      expect((await t.http('POST', `/v1/rl/workers/${ids[2]}/version`, { body: { weight_version: '12' } })).status).toBe(200);
      text = await metrics();
      for (const s of sims) expect(sample(text, 'rlgate_rl_worker_control_state', { worker: s.url }), s.url).toBe(0);
      expect(sample(text, 'rlgate_rl_worker_weight_version', { worker: sims[2]!.url })).toBe(12);
    });
  });

  describe('control-call and fan-out counters', () => {
    let t: TestGateway;
    let live: string;
    let dead: string;
    let deadUrl: string;
    const metrics = async () => (await t.http('GET', '/metrics')).text;

    beforeAll(async () => {
      // A 1 s control timeout so the `timeout` result can be produced quickly.
      t = await startTestGateway({ rl: { controlTimeoutSecs: 1 } });
      [live] = await t.register([sims[0]!.url]);
      deadUrl = `http://127.0.0.1:${await deadPort()}`;
      [dead] = await t.register([deadUrl], { ready: 0 });
    });
    afterAll(async () => {
      await t?.close();
    });

    it('one ok and one partial flush fan-out → control_calls_total by op/result and fanout_total by result', async () => {
      // No RL call yet: no call or fan-out series.
      let text = await metrics();
      expect(text).not.toMatch(/^rlgate_rl_control_calls_total/m);
      expect(text).not.toMatch(/^rlgate_rl_fanout_total/m);

      const ok = await t.http('POST', `/v1/rl/engine/flush_cache?selector=id%3D${live}`, { body: {} });
      expect(ok.status).toBe(200);
      const partial = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular', { body: {} });
      expect(partial.status).toBe(207);
      expect(partial.json.total).toBe(2);
      expect(partial.json.succeeded).toBe(1);
      expect(partial.json.failed).toEqual([expect.objectContaining({ worker_id: dead, url: deadUrl, error: 'upstream_unreachable' })]);

      text = await metrics();
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'flush_cache', result: 'ok' })).toBe(2);
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'flush_cache', result: 'unreachable' })).toBe(1);
      expect(sample(text, 'rlgate_rl_fanout_total', { result: 'ok' })).toBe(1);
      expect(sample(text, 'rlgate_rl_fanout_total', { result: 'partial' })).toBe(1);
      expect(sample(text, 'rlgate_rl_control_call_duration_seconds_count', { op: 'flush_cache' })).toBe(3);
      expect(sample(text, 'rlgate_rl_fanout_duration_seconds_count')).toBe(2);
      expect(text).toMatch(/^# TYPE rlgate_rl_control_calls_total counter$/m);
      expect(text).toMatch(/^# TYPE rlgate_rl_fanout_total counter$/m);
      expect(text).toMatch(/^# TYPE rlgate_rl_control_call_duration_seconds histogram$/m);
      expect(text).toMatch(/^# TYPE rlgate_rl_fanout_duration_seconds histogram$/m);
    });

    it('a proxied inference/v1/generate is counted under op="other"; engine errors and timeouts have their own results', async () => {
      const sim = sims[0]!;
      await sim.setFaults([
        { route: 'inference/v1/generate', status: 200, body: { ok: true }, times: 1 },
        { route: 'flush_cache', status: 500, times: 1 },
        { route: 'pause_generation', delayMs: 1500, times: 1 },
      ]);
      const other = await t.http('POST', `/v1/rl/workers/${live}/engine/inference/v1/generate`, { body: { text: 'hi' } });
      expect(other.status).toBe(200);
      const err = await t.http('POST', `/v1/rl/workers/${live}/engine/flush_cache`, { body: {} });
      expect(err.status).toBe(500);
      const slow = await t.http('POST', `/v1/rl/workers/${live}/engine/pause_generation`, { body: {} });
      expect(slow.status).toBe(504);
      expect(slow.json).toMatchObject({ error: 'upstream_timeout', worker_id: live, url: sims[0]!.url });
      expect(slow.json.message.endsWith('timed out after 1s')).toBe(true);
      const gone = await t.http('POST', `/v1/rl/workers/${dead}/engine/server_info`, { raw: '' });
      expect(gone.status).toBe(502);

      const text = await metrics();
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'other', result: 'ok' })).toBe(1);
      expect(text).not.toMatch(/op="inference\/v1\/generate"/);
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'flush_cache', result: 'upstream_error' })).toBe(1);
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'pause_generation', result: 'timeout' })).toBe(1);
      expect(sample(text, 'rlgate_rl_control_calls_total', { op: 'server_info', result: 'unreachable' })).toBe(1);
      expect(sample(text, 'rlgate_rl_control_call_duration_seconds_count', { op: 'other' })).toBe(1);
      // Fan-outs are unchanged by per-worker calls.
      expect(sample(text, 'rlgate_rl_fanout_total', { result: 'ok' })).toBe(1);
      await sim.clearFaults();
      // Let the delayed pause land, then resume the engine so nothing is left paused.
      await t.http('POST', `/v1/rl/workers/${live}/engine/continue_generation`, { body: {} });
    });

    it('fanout_total{result="no_match"} counts unmatched selectors; selector and path errors are not counted', async () => {
      const before = await metrics();
      const noMatchBefore = sample(before, 'rlgate_rl_fanout_total', { result: 'no_match' }) ?? 0;
      const callsBefore = before.split('\n').filter((l) => l.startsWith('rlgate_rl_control_calls_total'));

      expect((await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dtrtllm', { body: {} })).json.error).toBe('no_workers_match');
      expect((await t.http('POST', '/v1/rl/engine/flush_cache', { body: {} })).json.error).toBe('selector_required');
      expect((await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3D%3D', { body: {} })).json.error).toBe('invalid_selector');
      expect((await t.http('POST', '/v1/rl/engine/a/b/c/d/e?selector=engine%3Dsglang', { body: {} })).json.error).toBe('invalid_engine_path');

      const after = await metrics();
      expect(sample(after, 'rlgate_rl_fanout_total', { result: 'no_match' })).toBe(noMatchBefore + 1);
      expect(sample(after, 'rlgate_rl_fanout_total', { result: 'ok' })).toBe(1);
      expect(sample(after, 'rlgate_rl_fanout_total', { result: 'partial' })).toBe(1);
      expect(after.split('\n').filter((l) => l.startsWith('rlgate_rl_control_calls_total'))).toEqual(callsBefore);
    });
  });
});
