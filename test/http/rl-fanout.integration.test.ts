// Acceptance for the fan-out `GET|POST /v1/rl/engine/{*path}?selector=` against real SGLang
// simulators behind a real gateway and nats-server: who was called, the RlFanoutResponse shape, the
// 200/207 rule, and that failures leave breakers alone.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/closed-port.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS as OWN_PATHS, spawnSglangSim, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';

async function controlCalls(sim: SimProcess, path?: string): Promise<SimRequest[]> {
  return (await sim.requests()).filter((r) => !OWN_PATHS.has(r.path) && (path === undefined || r.path === path));
}

async function fanoutCount(t: TestGateway, result: string): Promise<number> {
  const text = (await t.http('GET', '/metrics')).text;
  const m = new RegExp(`^rlgate_rl_fanout_total\\{result="${result}"\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

async function expectBreakersClosed(t: TestGateway, n: number): Promise<void> {
  const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
  expect(rows).toHaveLength(n);
  for (const row of rows) {
    expect(row.breaker, row.url).toBe('closed');
    expect(row.load, row.url).toBe(0);
  }
}

const sorted = (xs: string[]) => [...xs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

describe('fan-out by selector (2 sglang + 1 vllm)', () => {
  let t: TestGateway;
  let sg: SimProcess[];
  let vllm: SimProcess;
  let sgIds: string[];

  beforeAll(async () => {
    const sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    sg = sims.slice(0, 2);
    vllm = sims[2]!;
    t = await startTestGateway();
    sgIds = await t.register([sg[0]!.url, sg[1]!.url, { url: vllm.url, runtime_type: 'vllm' }]);
    sgIds = sgIds.slice(0, 2);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([...(sg ?? []), vllm].filter(Boolean).map((s) => s.stop()));
  });

  it('calls exactly the matching engines, with no query string, and answers 200', async () => {
    await Promise.all([...sg, vllm].map((s) => s.clearRequests()));
    const res = await t.http('POST', '/v1/rl/engine/pause_generation?selector=engine%3Dsglang', { body: {} });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(Object.keys(res.json.results)).toEqual(sorted(sgIds));
    for (const [i, id] of sgIds.entries()) {
      expect(res.json.results[id]).toMatchObject({ worker_id: id, url: sg[i]!.url, status: 200 });
      expect(Number.isInteger(res.json.results[id].latency_ms)).toBe(true);
    }
    for (const sim of sg) {
      const calls = await controlCalls(sim);
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ method: 'POST', path: '/pause_generation', query: '', body: '{}' });
    }
    expect(await controlCalls(vllm)).toEqual([]);

    const resume = await t.http('POST', '/v1/rl/engine/continue_generation?selector=engine%3Dsglang', { body: {} });
    expect(resume.status).toBe(200);
    expect(resume.json.succeeded).toBe(2);
  });

  it('every leg gets the same method, query and trace headers, never the caller credentials', async () => {
    await Promise.all([...sg, vllm].map((s) => s.clearRequests()));
    const res = await t.http('GET', '/v1/rl/engine/flush_cache?timeout=0&selector=engine%3Dsglang', {
      headers: { authorization: 'Bearer caller-token', 'x-request-id': 'fan-1', 'x-smg-routing-key': 'k' },
    });
    expect(res.status).toBe(200);
    for (const sim of sg) {
      const [call, ...more] = await controlCalls(sim);
      expect(more).toEqual([]);
      expect(call).toMatchObject({ method: 'GET', path: '/flush_cache', query: 'timeout=0', bodyBytes: 0 });
      expect(call!.headers['x-request-id']).toBe('fan-1');
      expect(call!.headers).not.toHaveProperty('authorization');
      expect(call!.headers).not.toHaveProperty('x-smg-routing-key');
    }
  });

  it('a 2xx saying success:false still counts as succeeded; concurrent fan-outs are all served', async () => {
    await sg[0]!.setFaults({ route: 'flush_cache', status: 200, body: { success: false, message: 'busy' }, times: 1 });
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang');
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(res.json.results[sgIds[0]!].body).toEqual({ success: false, message: 'busy' });

    const together = await Promise.all([0, 1, 2, 3].map(() => t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang')));
    for (const r of together) {
      expect(r.status).toBe(200);
      expect(r.json.succeeded).toBe(2);
    }
  });

  it('selector and path errors are 400s that call no engine; only no_match is counted', async () => {
    await Promise.all([...sg, vllm].map((s) => s.clearRequests()));
    const before = { noMatch: await fanoutCount(t, 'no_match'), ok: await fanoutCount(t, 'ok'), partial: await fanoutCount(t, 'partial') };

    for (const q of ['', '?selector=', '?selector=%20%20']) {
      const res = await t.http('POST', `/v1/rl/engine/flush_cache${q}`);
      expect(res.status, q).toBe(400);
      expect(res.json.error, q).toBe('selector_required');
    }
    const bad = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3D%3D');
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ error: 'invalid_selector', offset: 7 });
    // The offset counts in the trimmed text.
    const padded = await t.http('POST', '/v1/rl/engine/flush_cache?selector=%20%20engine%3D%3D');
    expect(padded.json).toMatchObject({ error: 'invalid_selector', offset: 7 });
    // Selector first, then the path.
    expect((await t.http('POST', '/v1/rl/engine/a/b/c/d/e')).json.error).toBe('selector_required');
    const badPath = await t.http('POST', '/v1/rl/engine/a/b/c/d/e?selector=engine%3Dsglang');
    expect(badPath.status).toBe(400);
    expect(badPath.json.error).toBe('invalid_engine_path');
    expect(await fanoutCount(t, 'no_match')).toBe(before.noMatch);

    const none = await t.http('POST', '/v1/rl/engine/flush_cache?selector=%20engine%3Dtrtllm%20');
    expect(none.status).toBe(400);
    expect(none.json).toMatchObject({ error: 'no_workers_match', selector: 'engine=trtllm' });

    expect(await fanoutCount(t, 'no_match')).toBe(before.noMatch + 1);
    expect(await fanoutCount(t, 'ok')).toBe(before.ok);
    expect(await fanoutCount(t, 'partial')).toBe(before.partial);
    for (const sim of [...sg, vllm]) expect(await controlCalls(sim)).toEqual([]);
  });

  it('selector parse errors keep their byte offsets over the wire; the valid forms select', async () => {
    // The empty input is selector_required (tested above); the grammar itself is unit-tested in
    // test/fleet/selector.test.ts. Here the offsets must survive the query string and the envelope.
    const cases: Array<[string, number]> = [
      ['=x', 0],
      ['engine', 6],
      ['engine==x', 7],
      ['engine in x', 10],
      ['engine in (a,', 13],
      ['engine=a b', 9],
      ['engine="unterminated', 20],
      ['engine=a,', 9],
      ['engine=', 7],
    ];
    for (const [text, offset] of cases) {
      const res = await t.http('POST', `/v1/rl/engine/flush_cache?selector=${encodeURIComponent(text)}`);
      expect(res.status, text).toBe(400);
      expect(res.json, text).toMatchObject({ error: 'invalid_selector', offset });
    }
    const valid: Array<[string, number]> = [
      ['engine in (sglang, "v llm")', 2],
      ['role!=reward', 3],
      ['id notin (a,b)', 3],
    ];
    for (const [text, total] of valid) {
      const res = await t.http('POST', `/v1/rl/engine/flush_cache?selector=${encodeURIComponent(text)}`);
      expect(res.status, text).toBe(200);
      expect(res.json.total, text).toBe(total);
    }
  });
});

describe('partial fan-out (good, bad, dead, gRPC without rl.control_url)', () => {
  let t: TestGateway;
  let good: SimProcess;
  let bad: SimProcess;
  const ids: Record<'good' | 'bad' | 'dead' | 'grpc', string> = { good: '', bad: '', dead: '', grpc: '' };
  let deadUrl: string;
  let grpcUrl: string;

  beforeAll(async () => {
    [good, bad] = await Promise.all([spawnSglangSim(['--token-rate', '0', '--api-key', 'good-secret']), spawnSglangSim(['--token-rate', '0'])]);
    await bad.setFaults({ route: 'flush_cache', status: 500, body: { success: false, message: 'boom' } });
    t = await startTestGateway();
    [ids.good, ids.bad] = await t.register([
      { url: good.url, api_key: 'good-secret' },
      { url: bad.url, api_key: 'bad-secret' },
    ]);
    deadUrl = `http://127.0.0.1:${await closedPort()}`;
    grpcUrl = `grpc://127.0.0.1:${await closedPort()}`;
    // Neither ever becomes ready: the dead one has no listener, the gRPC one fails discovery.
    [ids.dead, ids.grpc] = await t.register([deadUrl, { url: grpcUrl, runtime_type: 'tokenspeed' }], { ready: 0 });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([good, bad].filter(Boolean).map((s) => s.stop()));
  });

  it('207 with every outcome; failed[] sorted by worker_id with the right code per target', async () => {
    await Promise.all([good.clearRequests(), bad.clearRequests()]);
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular', {
      headers: { authorization: 'Bearer caller-token' },
    });
    expect(res.status).toBe(207);
    expect(res.json.total).toBe(4);
    expect(res.json.succeeded).toBe(1);

    // results: every call that got an HTTP answer, keys sorted; nothing for the other two.
    expect(Object.keys(res.json.results)).toEqual(sorted([ids.good, ids.bad]));
    expect(res.json.results[ids.good]).toMatchObject({ worker_id: ids.good, url: good.url, status: 200 });
    expect(res.json.results[ids.bad]).toMatchObject({ worker_id: ids.bad, url: bad.url, status: 500, body: { success: false } });

    const failed: Array<Record<string, unknown>> = res.json.failed;
    expect(failed.map((f) => f.worker_id)).toEqual(sorted([ids.bad, ids.dead, ids.grpc]));
    const byId = new Map(failed.map((f) => [f.worker_id, f]));
    expect(byId.get(ids.bad)).toEqual({ worker_id: ids.bad, url: bad.url, error: 'upstream_error', message: 'HTTP 500', status: 500 });
    const dead = byId.get(ids.dead)!;
    expect(dead).toMatchObject({ worker_id: ids.dead, url: deadUrl, error: 'upstream_unreachable' });
    expect(dead).not.toHaveProperty('status');
    expect(dead).not.toHaveProperty('connection_mode');
    const grpc = byId.get(ids.grpc)!;
    expect(grpc).toMatchObject({ worker_id: ids.grpc, url: grpcUrl, error: 'no_control_endpoint', connection_mode: 'grpc' });
    expect(grpc).not.toHaveProperty('status');
    expect(typeof grpc.message).toBe('string');

    // Each engine saw its own bearer, never the caller's.
    const [goodCall] = await controlCalls(good, '/flush_cache');
    const [badCall, ...more] = await controlCalls(bad, '/flush_cache');
    expect(more).toEqual([]);
    expect(goodCall!.headers.authorization).toBe('Bearer good-secret');
    expect(badCall!.headers.authorization).toBe('Bearer bad-secret');
  });

  it('per worker, the gRPC worker alone is 422 no_control_endpoint with its grpc:// URL', async () => {
    const res = await t.http('POST', `/v1/rl/workers/${ids.grpc}/engine/pause_generation`, { body: {} });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ error: 'no_control_endpoint', worker_id: ids.grpc, url: grpcUrl, connection_mode: 'grpc' });
    const row = (await t.http('GET', `/v1/rl/workers/${ids.grpc}`)).json;
    expect(row).toMatchObject({ connection_mode: 'grpc', control_url: null });
  });

  it('after the failed legs every breaker is closed and no load is counted', async () => {
    for (let i = 0; i < 6; i++) {
      expect((await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular')).status).toBe(207);
    }
    await expectBreakersClosed(t, 4);
  });
});

describe('DP engine with 3 ranks', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let rank0: string;
  let rank2: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--dp-size', '3']);
    t = await startTestGateway();
    [rank0, , rank2] = await t.register(
      [0, 1, 2].map((r) => `${sim.url}@${r}`),
      { ready: 1 },
    );
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('selecting the engine by its @0 URL calls it exactly once', async () => {
    await sim.clearRequests();
    const res = await t.http('POST', `/v1/rl/engine/flush_cache?selector=url%3D${encodeURIComponent(`${sim.url}@0`)}`);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 1, succeeded: 1, failed: [] });
    expect(Object.keys(res.json.results)).toEqual([rank0]);
    expect(res.json.results[rank0].url).toBe(`${sim.url}@0`);
    expect(await controlCalls(sim)).toHaveLength(1);

    // The three ranks are one target for any selector that matches them all.
    await sim.clearRequests();
    const all = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular');
    expect(all.status).toBe(200);
    expect(all.json.total).toBe(1);
    expect(await controlCalls(sim)).toHaveLength(1);
  });

  it('a per-worker call to another rank goes to the engine base URL and keeps that rank in url', async () => {
    await sim.clearRequests();
    const res = await t.http('POST', `/v1/rl/workers/${rank2}/engine/flush_cache`);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ worker_id: rank2, url: `${sim.url}@2`, status: 200 });
    expect((await controlCalls(sim)).map((r) => `${r.method} ${r.path}`)).toEqual(['POST /flush_cache']);
  });
});

describe('fan-out concurrency cap', () => {
  // Six engines behind ONE simulator process (each registered under its own path prefix, so
  // each has its own control URL): the simulator's control-concurrency peak is then the
  // gateway's peak across all six legs, measured exactly rather than inferred from clocks.
  let t: TestGateway;
  let sim: SimProcess;
  let ids: string[];
  const prefixes = ['e1', 'e2', 'e3', 'e4', 'e5', 'e6'];

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ rl: { fanoutConcurrency: 2 } });
    ids = await t.register(prefixes.map((p) => `${sim.url}/${p}`));
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('six legs of 150 ms each run at most two at a time and all succeed', async () => {
    await sim.setFaults({ route: '*', method: 'POST', delayMs: 150, status: 200, body: { success: true, message: 'ok' } });
    await sim.clearRequests(); // also restarts the peak counters
    const res = await t.http('POST', '/v1/rl/engine/pause_generation?selector=worker_type%3Dregular', { body: {} });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 6, succeeded: 6, failed: [] });
    expect(Object.keys(res.json.results)).toEqual(sorted(ids));

    const calls = await controlCalls(sim);
    expect(sorted(calls.map((r) => r.path))).toEqual(prefixes.map((p) => `/${p}/pause_generation`));
    const state = await sim.state();
    expect(state.peakControlInFlight).toBeGreaterThanOrEqual(1);
    expect(state.peakControlInFlight).toBeLessThanOrEqual(2);
    await sim.clearFaults();
  });
});

describe('per-leg deadline', () => {
  // Each leg has its own control_timeout_secs deadline and there is no overall deadline. Three
  // engines (path prefixes of one simulator) answer in 450 ms each, one leg at a time under a 1 s
  // timeout: every leg is well inside its own deadline, while the fan-out as a whole runs past 1 s.
  let t: TestGateway;
  let sim: SimProcess;
  const prefixes = ['p1', 'p2', 'p3'];

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 1, fanoutConcurrency: 1 } });
    await t.register(prefixes.map((p) => `${sim.url}/${p}`));
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('a leg queued behind the concurrency cap still gets its full timeout', async () => {
    await sim.setFaults({ route: '*', method: 'POST', delayMs: 450, status: 200, body: { success: true, message: 'ok' } });
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular');
    expect(res.json.failed).toEqual([]);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ total: 3, succeeded: 3 });
    await sim.clearFaults();
  });
});

describe('an engine stopped after registration', () => {
  let t: TestGateway;
  let live: SimProcess;
  let stopped: SimProcess;
  let liveId: string;
  let stoppedId: string;
  const pause = () => t.http('POST', '/v1/rl/engine/pause_generation?selector=worker_type%3Dregular', { body: { mode: 'abort' } });

  beforeAll(async () => {
    [live, stopped] = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    [liveId, stoppedId] = await t.register([live.url, stopped.url]);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([live, stopped].filter(Boolean).map((s) => s.stop()));
  });

  it('207 naming the dead engine, breakers closed, load 0; after a restart the same fan-out is 200', async () => {
    await stopped.stop();
    const res = await pause();
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ total: 2, succeeded: 1 });
    expect(Object.keys(res.json.results)).toEqual([liveId]);
    expect(res.json.results[liveId].status).toBe(200);
    expect(res.json.failed).toHaveLength(1);
    const f = res.json.failed[0];
    expect(f).toMatchObject({ worker_id: stoppedId, url: stopped.url, error: 'upstream_unreachable' });
    expect(f.url).toContain(`:${stopped.port}`);
    expect(f.message).toContain(`127.0.0.1:${stopped.port}`);
    await expectBreakersClosed(t, 2);

    await stopped.restart();
    const again = await pause();
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(Object.keys(again.json.results)).toEqual(sorted([liveId, stoppedId]));
    expect(await controlCalls(stopped, '/pause_generation')).toHaveLength(1);
    await expectBreakersClosed(t, 2);

    const resume = await t.http('POST', '/v1/rl/engine/continue_generation?selector=worker_type%3Dregular', { body: {} });
    expect(resume.status).toBe(200);
  });
});
