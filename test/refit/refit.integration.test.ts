// The refit transaction end to end: real nats-server, the gateway, SGLang simulators in child
// processes. A refit through HTTP and through NATS moves /generate's weight_version; state
// events arrive in order; a failing refit phase leaves no engine paused.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import type { EngineStateEvent } from '../../src/wire/engine-state.ts';

const disk = (v: string) => ({ weight_version: v, source: { kind: 'disk', model_path: `/models/step-${v}` } });

async function generatedVersion(t: TestGateway): Promise<string> {
  const res = await t.http('POST', '/generate', { body: { text: 'Hello', sampling_params: { max_new_tokens: 4 } } });
  expect(res.status).toBe(200);
  return res.json.meta_info.weight_version;
}

describe('refit transaction', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('refits to "1" then "2" over HTTP; the next /generate reports each version', async () => {
    const r1 = await t.http('POST', '/v1/rl/refits', { body: disk('1') });
    expect(r1.status).toBe(200);
    expect(r1.json.status).toBe('succeeded');
    expect(r1.json.engines.map((e: { outcome: string }) => e.outcome)).toEqual(['ok', 'ok']);
    for (const e of r1.json.engines) {
      expect(e.phases.pause).toEqual(expect.any(Number));
      expect(e.phases.refit).toEqual(expect.any(Number));
      expect(e.phases.resume).toEqual(expect.any(Number));
      expect(e.breaker).toBe('closed');
    }
    expect(await generatedVersion(t)).toBe('1');

    const r2 = await t.http('POST', '/v1/rl/refits', { body: disk('2') });
    expect(r2.status).toBe(200);
    expect(await generatedVersion(t)).toBe('2');

    const again = await t.http('GET', `/v1/rl/refits/${r2.json.id}`);
    expect(again.status).toBe(200);
    expect(again.json).toEqual(r2.json);
    for (const s of sims) expect((await s.state()).weightVersion).toBe('2');
  });

  it('refits through a NATS request on rl.refit.request', async () => {
    const bus = await t.bus();
    const answer = await bus.request<{ status: number; report: { status: string; weight_version: string } }>('rl.refit.request', disk('3'), 30_000);
    expect(answer.status).toBe(200);
    expect(answer.report.status).toBe('succeeded');
    expect(answer.report.weight_version).toBe('3');
    expect(await generatedVersion(t)).toBe('3');
  });

  it('publishes each engine actor transition of a refit on rl.engine.<id>.state, in order', async () => {
    const bus = await t.bus();
    const seen = new Map<string, string[]>();
    const sub = bus.subscribe('rl.engine.*.state', (data) => {
      const e = data as EngineStateEvent;
      seen.set(e.id, [...(seen.get(e.id) ?? []), e.state]);
    });
    const r = await t.http('POST', '/v1/rl/refits', { body: disk('4') });
    expect(r.status).toBe(200);
    await new Promise((res) => setTimeout(res, 200)); // let the last publishes arrive
    sub.unsubscribe();
    for (const id of ids) {
      // serving → pausing (pause sent) → paused (answered) → refitting (update) → paused → serving (continue)
      expect(seen.get(id)).toEqual(['pausing', 'paused', 'refitting', 'paused', 'serving']);
    }
  });

  it('a refit phase that fails on one engine leaves no engine paused', async () => {
    await sims[0]!.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false, message: 'disk on fire' }, times: 1 });
    const r = await t.http('POST', '/v1/rl/refits', { body: disk('5') });
    expect(r.status).toBe(207);
    expect(r.json.status).toBe('partial');
    const failed = r.json.failed;
    expect(failed).toHaveLength(1);
    expect(failed[0].url).toBe(sims[0]!.url);
    expect(failed[0].failed_phase).toBe('refit');
    expect(failed[0].error).toBe('upstream_error');
    expect(failed[0].status).toBe(500);
    // Every engine was resumed: the simulators say so, and the gateway routes to both again.
    for (const s of sims) expect((await s.state()).paused).toBeNull();
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    expect(rows.map((w: { control: string }) => w.control)).toEqual(['active', 'active']);
    expect(rows.map((w: { state: string }) => w.state)).toEqual(['serving', 'serving']);
  });
});
