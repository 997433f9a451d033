// SMG's data-plane surface beyond /generate, against real simulators: `GET /v1/models` (the OpenAI
// list shape, from the registered workers' models), `GET /loads` and its deprecated alias
// `GET /get_loads` (SMG's `{"workers": [{"worker", "load", "details"?}]}`), `stats` on
// `GET /workers` (SMG's counts by type; rlgate's own figures under `rlgate`), and HEAD on the
// `/v1/rl` engine pass-through, which goes to the engine as HEAD (as SMG's GET routes take it)
// and answers its status without a body.

import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { inFlight, until } from '../fixtures/slime-client.ts';

/** A port nothing listens on (bound, read back, closed). */
async function deadPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

describe('GET /v1/models, /loads, /get_loads, GET /workers stats', () => {
  let t: TestGateway;
  // `dp` is one SGLang engine with two DP ranks, registered as `@0` and `@1`; `other` serves a
  // second model; `ts` is a TokenSpeed gRPC engine; `dead` answers nothing.
  let dp: SimProcess;
  let other: SimProcess;
  let ts: TokenspeedSimProcess;
  let dead: string;
  const startedSecs = Math.floor(Date.now() / 1000);

  beforeAll(async () => {
    [dp, other, ts] = await Promise.all([
      spawnSglangSim(['--model', 'MODEL', '--dp-size', '2', '--token-rate', '5']),
      spawnSglangSim(['--model', 'OTHER', '--token-rate', '0']),
      spawnTokenspeedSim(['--model', 'TSM', '--token-rate', '0']),
    ]);
    dead = `http://127.0.0.1:${await deadPort()}`;
    t = await startTestGateway();
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([dp?.stop(), other?.stop(), ts?.stop()]);
  });

  it('/v1/models on an empty registry is a retryable 503, as SMG answers it', async () => {
    const r = await t.http('GET', '/v1/models');
    expect(r.status).toBe(503);
    expect(r.json.error).toBe('no_available_workers');
  });

  it("SMG probes on an empty registry, in SMG's shapes: /readiness 503 `not ready`, /liveness 200 `OK`", async () => {
    expect(await t.http('GET', '/readiness')).toMatchObject({
      status: 503,
      json: { status: 'not ready', reason: 'insufficient healthy workers', healthy_workers: 0, total_workers: 0, message: 'no workers are registered' },
    });
    const live = await t.http('GET', '/liveness');
    expect(live).toMatchObject({ status: 200, text: 'OK' });
    expect(live.headers['content-type']).toMatch(/^text\/plain/);
  });

  it('/v1/models lists each real model once, in the OpenAI list shape', async () => {
    // Three rows: the DP ranks share one.
    await t.register([`${dp.url}@0`, `${dp.url}@1`, { url: other.url, worker_type: 'regular' }, ts.url], { ready: 3 });
    await t.register([dead], { ready: 0 });
    const r = await t.http('GET', '/v1/models');
    expect(r.status, r.text).toBe(200);
    expect(r.json.object).toBe('list');
    // MODEL is served by two workers (the DP ranks): one entry. The dead worker's model is
    // unknown: it lists nothing.
    expect(r.json.data.map((m: { id: string }) => m.id)).toEqual(['MODEL', 'OTHER', 'TSM']);
    for (const m of r.json.data) {
      expect(Object.keys(m).sort()).toEqual(['created', 'id', 'object', 'owned_by']);
      expect(m).toMatchObject({ object: 'model', owned_by: 'self_hosted' });
      expect(Number.isInteger(m.created)).toBe(true);
      expect(m.created).toBeGreaterThanOrEqual(startedSecs);
      expect(m.created).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    }
  });

  it('/readiness counts the healthy workers: ready while one can take requests', async () => {
    expect(await t.http('GET', '/readiness')).toMatchObject({ status: 200, json: { status: 'ready', healthy_workers: 4, total_workers: 5 } });
  });

  it("GET /workers: `stats` is SMG's counts by type, exactly; rlgate's totals, healthy, models and load are under `rlgate`", async () => {
    const r = await t.http('GET', '/workers');
    expect(r.status).toBe(200);
    expect(r.json.total).toBe(5);
    expect(r.json.stats).toEqual({ prefill_count: 0, decode_count: 0, regular_count: 5 });
    expect(r.json.rlgate).toEqual({
      total_workers: 5,
      healthy_workers: 4,
      total_models: 3,
      total_load: 0,
      by_type: { regular: 5, prefill: 0, decode: 0 },
    });
  });

  it('/loads: every worker by registry URL; HTTP engines with their ranks, others -1', async () => {
    // One long generation through the gateway: it shows in the engine's running count and in
    // the gateway's own load.
    const slow = inFlight(t.url, { model: 'MODEL', text: 'hi', sampling_params: { max_new_tokens: 20, ignore_eos: true } });
    const loads = await until('the slow generation running on its engine', async () => {
      const r = await t.http('GET', '/loads');
      expect(r.status).toBe(200);
      const running = r.json.workers
        .filter((w: { worker: string }) => w.worker.startsWith(`${dp.url}@`))
        .reduce((n: number, w: any) => n + w.details.loads[0].num_running_reqs, 0);
      return running === 1 ? r.json : undefined;
    });
    const byWorker = new Map<string, any>(loads.workers.map((w: { worker: string }) => [w.worker, w]));
    expect([...byWorker.keys()]).toEqual([`${dp.url}@0`, `${dp.url}@1`, dead, other.url, ts.url].sort());
    for (const rank of [0, 1]) {
      const w = byWorker.get(`${dp.url}@${rank}`);
      // SGLang's tokens in use (the simulator reports 0) and this rank's entry only.
      expect(w.load).toBe(0);
      expect(w.details.dp_rank_count).toBe(2);
      expect(w.details.loads).toHaveLength(1);
      expect(w.details.loads[0]).toMatchObject({ dp_rank: rank, num_used_tokens: 0, max_running_requests: expect.any(Number) });
      expect(typeof w.details.timestamp).toBe('string');
    }
    expect(byWorker.get(other.url)).toMatchObject({ load: 0, details: { dp_rank_count: 1, loads: [{ dp_rank: 0, num_running_reqs: 0 }] } });
    expect(byWorker.get(ts.url)).toEqual({ worker: ts.url, load: -1 });
    expect(byWorker.get(dead)).toEqual({ worker: dead, load: -1 });

    // The gateway's own count of requests in flight is rlgate's total_load meanwhile.
    const figures = (await t.http('GET', '/workers')).json.rlgate;
    expect(figures.total_load).toBe(1);
    expect((await slow.done).status).toBe(200);
  });

  it('/get_loads answers the same shape', async () => {
    const r = await t.http('GET', '/get_loads');
    expect(r.status).toBe(200);
    expect(r.json.workers.map((w: { worker: string }) => w.worker)).toEqual([`${dp.url}@0`, `${dp.url}@1`, dead, other.url, ts.url].sort());
    expect(r.json.workers.find((w: { worker: string }) => w.worker === ts.url).load).toBe(-1);
  });

  it('/v1/models and /loads take GET only', async () => {
    expect((await t.http('POST', '/v1/models', { body: {} })).status).toBe(404);
    expect((await t.http('POST', '/loads', { body: {} })).status).toBe(404);
  });
});

describe('/get_loads with an admin key', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway({ adminKey: 'adm' });
  }, 60_000);
  afterAll(() => t?.close());

  it('needs the admin bearer (SMG serves it among its admin routes); /loads stays open', async () => {
    const bare = await t.http('GET', '/get_loads');
    expect(bare.status).toBe(401);
    expect(bare.json.error).toBe('unauthorized');
    expect((await t.http('GET', '/get_loads', { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    const ok = await t.http('GET', '/get_loads', { headers: { authorization: 'Bearer adm' } });
    expect(ok.status).toBe(200);
    expect(ok.json).toEqual({ workers: [] });
    expect((await t.http('GET', '/loads')).json).toEqual({ workers: [] });
  });
});

describe('HEAD on the /v1/rl engine pass-through', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--model', 'MODEL', '--token-rate', '0'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  const heads = async (s: SimProcess, path: string) => (await s.requests()).filter((r) => r.method === 'HEAD' && r.path === path);

  it('per worker: the engine gets a HEAD, the caller its status and headers with no body', async () => {
    for (const s of sims) await s.clearRequests();
    const get = await t.http('GET', `/v1/rl/workers/${ids[0]}/engine/server_info`);
    const r = await t.http('HEAD', `/v1/rl/workers/${ids[0]}/engine/server_info`);
    expect(r.status).toBe(200);
    expect(r.text).toBe('');
    expect(r.headers['content-type']).toBe(get.headers['content-type']);
    const seen = await heads(sims[0]!, '/server_info');
    expect(seen).toHaveLength(1);
    expect(seen[0]!.bodyBytes).toBe(0);
    expect(await heads(sims[1]!, '/server_info')).toEqual([]);
  });

  it("per worker: the engine's own status is mirrored (a POST-only route answers HEAD with 405)", async () => {
    const r = await t.http('HEAD', `/v1/rl/workers/${ids[0]}/engine/pause_generation`);
    expect(r.status).toBe(405);
    expect(r.text).toBe('');
    expect(await heads(sims[0]!, '/pause_generation')).toHaveLength(1);
    // The engine was not paused: its route never ran.
    expect((await sims[0]!.state()).paused).toBeNull();
  });

  it('fan-out: every matching engine gets a HEAD; 200 with no body', async () => {
    for (const s of sims) await s.clearRequests();
    const r = await t.http('HEAD', '/v1/rl/engine/model_info?selector=engine%3Dsglang');
    expect(r.status).toBe(200);
    expect(r.text).toBe('');
    for (const s of sims) expect(await heads(s, '/model_info')).toHaveLength(1);
  });

  it('a HEAD for an unknown worker is its 404; OPTIONS is still 405 and reaches no engine', async () => {
    expect((await t.http('HEAD', '/v1/rl/workers/nope/engine/server_info')).status).toBe(404);
    for (const s of sims) await s.clearRequests();
    const o = await t.http('OPTIONS', `/v1/rl/workers/${ids[0]}/engine/server_info`);
    expect(o.status).toBe(405);
    expect(o.headers.allow).toBe('GET, HEAD, POST');
    const proxied = (await sims[0]!.requests()).filter((q) => q.path === '/server_info' && q.method !== 'GET');
    expect(proxied).toEqual([]);
  });
});
