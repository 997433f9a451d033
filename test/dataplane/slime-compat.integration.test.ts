// slime as a client of rlgate's data plane: slime's replayed calls against SGLang HTTP simulators
// (registration, /generate, removal, the abort flow), model resolution, input shapes, the one retry
// before the first byte, the request deadline, and slime's end-of-rollout abort flow against a
// TokenSpeed gRPC simulator listed by its control-app URL (`--workers-list-control-urls`).

import { createServer } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { inFlight, slimeAbortFlow, slimeCount, slimeGet, until } from '../fixtures/slime-client.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const MODEL = 'MODEL';
/** What slime's rollout sends: one prompt, no `model`. */
const SLIME_BODY = {
  input_ids: [1, 2, 3],
  sampling_params: { max_new_tokens: 4, no_stop_trim: true, spaces_between_special_tokens: false },
  return_logprob: true,
};

/** A port nothing listens on (bound, read back, closed). */
async function deadPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

function lastSseObject(text: string): any {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice(6));
  expect(datas.at(-1)).toBe('[DONE]');
  return JSON.parse(datas.at(-2)!);
}

async function generateBodies(sim: SimProcess): Promise<any[]> {
  return (await sim.requests()).filter((r) => r.path === '/generate').map((r) => JSON.parse(r.body));
}

describe('slime against SGLang HTTP engines', () => {
  let t: TestGateway;
  let sg: SimProcess;
  let other: SimProcess;
  let sgId: string;

  beforeAll(async () => {
    [sg, other] = await Promise.all([
      spawnSglangSim(['--token-rate', '0', '--model', MODEL, '--weight-version', 'w1']),
      spawnSglangSim(['--token-rate', '0', '--model', 'OTHER']),
    ]);
    t = await startTestGateway();
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([sg?.stop(), other?.stop()]);
  });

  it('an empty fleet is a retryable 503, not model_not_found', async () => {
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(503);
    expect(r.json.error).toBe('no_available_workers');
  });

  it('workers that serve no known model yet: an unnamed request is 404 model_not_found', async () => {
    const [deadId] = await t.register([`http://127.0.0.1:${await deadPort()}`], { ready: 0 });
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(404);
    expect(r.json.error).toBe('model_not_found');
    expect((await t.http('DELETE', `/workers/${deadId}`)).status).toBe(200);
  });

  it('POST /workers {url, worker_type} → 202; GET /workers lists {id, url}', async () => {
    const r = await t.http('POST', '/workers', { body: { url: sg.url, worker_type: 'regular' } });
    expect(r.status).toBe(202);
    sgId = r.json.id;
    const rows = await until('the worker listed', async () => {
      const l = await t.http('GET', '/workers');
      return l.json.workers.length === 1 ? l.json.workers : undefined;
    });
    expect(rows[0]).toMatchObject({ id: sgId, url: sg.url });
    await t.waitReady(1);
  });

  it('slime /generate → one object whose logprobs carry the output ids', async () => {
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(200);
    expect(Array.isArray(r.json)).toBe(false);
    const m = r.json.meta_info;
    expect(m.output_token_logprobs).toHaveLength(m.completion_tokens);
    expect(m.output_token_logprobs.map((e: unknown[]) => e[1])).toEqual(r.json.output_ids);
    expect(['stop', 'length']).toContain(m.finish_reason.type);
    // The engine's own version (`--weight-version w1`): nothing has been refitted yet.
    expect(m.weight_version).toBe('w1');
  });

  it("no model with one served model → 200; the engine got the caller's bytes, no `model`", async () => {
    await sg.clearRequests();
    const raw = JSON.stringify({ text: 'hi', sampling_params: { max_new_tokens: 2 } });
    const r = await t.http('POST', '/generate', { raw, headers: { 'content-type': 'application/json' } });
    expect(r.status).toBe(200);
    expect(Array.isArray(r.json)).toBe(false);
    const seen = (await sg.requests()).filter((q) => q.path === '/generate');
    expect(seen).toHaveLength(1);
    expect(seen[0]!.body).toBe(raw);
    expect(Object.keys(JSON.parse(seen[0]!.body))).not.toContain('model');
  });

  it('an untagged worker (registry models [MODEL, unknown]) does not count as a model', async () => {
    const [deadId] = await t.register([`http://127.0.0.1:${await deadPort()}`], { ready: 0 });
    expect((await t.http('GET', `/workers/${deadId}`)).json.model_id).toBe('unknown');
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(200);
    expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    expect((await t.http('DELETE', `/workers/${deadId}`)).status).toBe(200);
  });

  it('a named model that nobody serves → 404 model_not_found; `unknown` is not a model name', async () => {
    const r = await t.http('POST', '/generate', { body: { ...SLIME_BODY, model: 'nope' } });
    expect(r.status).toBe(404);
    expect(r.json).toMatchObject({ error: 'model_not_found', model: 'nope' });
    const chat = await t.http('POST', '/v1/chat/completions', { body: { model: 'nope', messages: [{ role: 'user', content: 'hi' }] } });
    expect(chat.status).toBe(404);
    expect(chat.json.error).toBe('model_not_found');
    // The placeholder itself resolves like an absent model.
    expect((await t.http('POST', '/generate', { body: { ...SLIME_BODY, model: 'unknown' } })).status).toBe(200);
  });

  it('list `text` → 422 invalid_request_shape; `input_ids` batch → forwarded to the HTTP engine', async () => {
    await sg.clearRequests();
    const bad = await t.http('POST', '/generate', { body: { text: ['a', 'b'] } });
    expect(bad.status).toBe(422);
    expect(bad.json).toMatchObject({ error: 'invalid_request_shape', field: '/text' });
    expect(await generateBodies(sg)).toHaveLength(0);
    const batch = await t.http('POST', '/generate', { body: { input_ids: [[1, 2], [3]], sampling_params: { max_new_tokens: 2 } } });
    expect(batch.status).toBe(200);
    expect(Array.isArray(batch.json)).toBe(true);
    expect(batch.json).toHaveLength(2);
    expect((await generateBodies(sg))[0].input_ids).toEqual([[1, 2], [3]]);
  });

  it('two real models → an unnamed request is 404; a named one goes only to its workers', async () => {
    await t.register([other.url], { ready: 2 });
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(404);
    expect(r.json.error).toBe('model_not_found');
    expect(r.json.message).toContain('MODEL');
    expect(r.json.message).toContain('OTHER');
    for (let i = 0; i < 4; i++) {
      const named = await t.http('POST', '/generate', { body: { ...SLIME_BODY, model: 'OTHER' } });
      expect(named.status).toBe(200);
      expect(named.headers['x-smg-routed-worker-id']).toBe(other.url);
      const mine = await t.http('POST', '/generate', { body: { ...SLIME_BODY, model: MODEL } });
      expect(mine.headers['x-smg-routed-worker-id']).toBe(sg.url);
    }
  });

  it('DELETE /workers/{id} → 2xx; gone from GET /workers and /v1/rl/workers', async () => {
    const r = await t.http('DELETE', `/workers/${sgId}`);
    expect(r.status).toBe(200);
    const listed = (await t.http('GET', '/workers')).json.workers.map((w: { id: string }) => w.id);
    expect(listed).not.toContain(sgId);
    const rl = (await t.http('GET', '/v1/rl/workers')).json.workers.map((w: { id: string }) => w.id);
    expect(rl).not.toContain(sgId);
    // Only OTHER is left: an unnamed request resolves to it again.
    expect((await t.http('POST', '/generate', { body: SLIME_BODY })).headers['x-smg-routed-worker-id']).toBe(other.url);
  });
});

describe('slime: the abort flow against SGLang simulators', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '20', '--model', MODEL])));
    t = await startTestGateway();
    await t.register(sims.map((s) => ({ url: s.url, worker_type: 'regular' })));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('abort_all per listed URL → in-flight /generate calls answer 200 partials with finish_reason abort; loads reach 0', async () => {
    const long = { ...SLIME_BODY, sampling_params: { ...SLIME_BODY.sampling_params, max_new_tokens: 30_000 } };
    const calls = [inFlight(t.url, { ...long, stream: true }), inFlight(t.url, { ...long, stream: true }), inFlight(t.url, long), inFlight(t.url, long)];
    // Streams have answered their headers once the first token left the engine.
    expect(await Promise.all(calls.slice(0, 2).map((c) => c.headers))).toEqual([200, 200]);
    await until('all four running', async () => {
      let n = 0;
      for (const s of sims) n += slimeCount(await slimeGet(`${s.url}/v1/loads?include=core`));
      return n === 4 ? true : undefined;
    });
    const urls = await slimeAbortFlow(t.url);
    expect(urls.sort()).toEqual(sims.map((s) => s.url).sort());
    for (const c of calls.slice(0, 2)) {
      const r = await c.done;
      expect(r.status).toBe(200);
      const last = lastSseObject(r.text);
      expect(last.meta_info.finish_reason.type).toBe('abort');
      expect(last.meta_info.completion_tokens).toBeGreaterThan(0);
    }
    for (const c of calls.slice(2)) {
      const r = await c.done;
      expect(r.status).toBe(200);
      const out = JSON.parse(r.text);
      expect(out.meta_info.finish_reason.type).toBe('abort');
      expect(out.meta_info.output_token_logprobs).toHaveLength(out.meta_info.completion_tokens);
    }
  });
});

describe('an upstream that fails before its first byte is retried once (issue 4 item 6)', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0', '--model', MODEL])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  const failures = (id: string) => t.gw.services.host.snapshot(id)!.context.breakerFailures;

  it('a dropped connection is retried on another engine; the failed engine counts a breaker failure', async () => {
    await sims[0]!.setFaults({ route: 'generate', drop: true });
    for (let i = 0; i < 3; i++) {
      const r = await t.http('POST', '/generate', { body: SLIME_BODY });
      expect(r.status).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).not.toBe(sims[0]!.url);
    }
    expect((await sims[0]!.requests()).filter((q) => q.path === '/generate').length).toBeGreaterThan(0);
    expect(failures(ids[0]!)).toBeGreaterThan(0);
    await sims[0]!.clearFaults();
  });

  it('only once: every engine dropping → 502 after exactly two engines were tried', async () => {
    await Promise.all(
      sims.map(async (s) => {
        await s.clearRequests();
        await s.setFaults({ route: 'generate', drop: true });
      }),
    );
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(502);
    expect(r.json.error).toBe('upstream_unreachable');
    const tried = await Promise.all(sims.map(async (s) => (await s.requests()).filter((q) => q.path === '/generate').length));
    expect(tried.reduce((a, b) => a + b, 0)).toBe(2);
    expect(tried.filter((n) => n === 1)).toHaveLength(2);
    await Promise.all(sims.map((s) => s.clearFaults()));
  });

  it('an engine error answer (a byte arrived) is relayed, never retried', async () => {
    await Promise.all(
      sims.map(async (s) => {
        await s.clearRequests();
        await s.setFaults({ route: 'generate', status: 500, body: { error: 'boom' } });
      }),
    );
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(500);
    const tried = await Promise.all(sims.map(async (s) => (await s.requests()).filter((q) => q.path === '/generate').length));
    expect(tried.reduce((a, b) => a + b, 0)).toBe(1);
    await Promise.all(sims.map((s) => s.clearFaults()));
  });
});

describe('--request-timeout-secs bounds a relayed request', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--model', MODEL]);
    t = await startTestGateway({ requestTimeoutSecs: 1 });
    await t.register([sim.url]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('an engine that never answers → 504 upstream_timeout naming the deadline, no retry', async () => {
    await sim.setFaults({ route: 'generate', hang: true });
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(504);
    expect(r.json).toMatchObject({ error: 'upstream_timeout', url: sim.url });
    expect(r.json.message).toContain('timed out after 1s');
    await sim.releaseHung();
    await sim.clearFaults();
    expect((await t.http('POST', '/generate', { body: SLIME_BODY })).status).toBe(200);
  });

  it('defaults to 14400 s', async () => {
    const { defaultConfig } = await import('../../src/gateway/config.ts');
    expect(defaultConfig().requestTimeoutSecs).toBe(14400);
  });
});

describe('slime: the end-of-rollout abort against a TokenSpeed gRPC worker listed by its control app (--workers-list-control-urls)', () => {
  let t: TestGateway;
  let plain: TestGateway;
  let ts: TokenspeedSimProcess;
  let id: string;

  beforeAll(async () => {
    ts = await spawnTokenspeedSim([
      '--model',
      MODEL,
      '--token-rate',
      '20',
      '--rl-control-port',
      '0',
      '--enable-output-logprobs',
      '--stamp-weight-version',
      'v7',
    ]);
    [t, plain] = await Promise.all([startTestGateway({ workersListControlUrls: true }), startTestGateway()]);
    [id] = await t.register([{ url: ts.url, runtime_type: 'tokenspeed' }]);
    await plain.register([{ url: ts.url, runtime_type: 'tokenspeed' }]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([t?.close(), plain?.close()]);
    await ts?.stop();
  });

  it('GET /workers lists the control-app URL with the setting on, the grpc:// URL without it', async () => {
    const on = (await t.http('GET', '/workers')).json.workers;
    expect(on).toHaveLength(1);
    expect(on[0]).toMatchObject({ id, url: ts.controlUrl, registry_url: ts.url, connection_mode: 'grpc' });
    const off = (await plain.http('GET', '/workers')).json.workers;
    expect(off[0].url).toBe(ts.url);
    expect(off[0]).not.toHaveProperty('registry_url');
    // The per-id row and the RL listing keep the registry URL.
    expect((await t.http('GET', `/workers/${id}`)).json.url).toBe(ts.url);
  });

  it('on gRPC: list `text` → 422; `input_ids` batch → 400; a model-less request resolves', async () => {
    expect((await t.http('POST', '/generate', { body: { text: ['a', 'b'] } })).status).toBe(422);
    const batch = await t.http('POST', '/generate', { body: { input_ids: [[1, 2], [3]], sampling_params: { max_new_tokens: 2 } } });
    expect(batch.status).toBe(400);
    expect(batch.json.error).toBe('invalid_request');
    const one = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } } });
    expect(one.status).toBe(200);
    expect(one.json.meta_info.weight_version).toBe('v7');
  });

  it('list → abort_request {abort_all} → loads reach 0 → in-flight streams end with 200 abort partials', async () => {
    const long = { ...SLIME_BODY, sampling_params: { ...SLIME_BODY.sampling_params, max_new_tokens: 30_000 }, stream: true };
    const calls = [0, 1, 2].map(() => inFlight(t.url, long));
    expect(await Promise.all(calls.map((c) => c.headers))).toEqual([200, 200, 200]);
    await until('three running', async () => (slimeCount(await slimeGet(`${ts.controlUrl}/v1/loads`)) === 3 ? true : undefined));
    const urls = await slimeAbortFlow(t.url);
    expect(urls).toEqual([ts.controlUrl]);
    for (const c of calls) {
      const r = await c.done;
      expect(r.status).toBe(200);
      const last = lastSseObject(r.text);
      expect(last.meta_info.finish_reason.type).toBe('abort');
      expect(last.meta_info.completion_tokens).toBeGreaterThan(0);
      expect(last.meta_info.output_token_logprobs).toHaveLength(last.meta_info.completion_tokens);
    }
    // abort_all is pause-abort + resume: the engine serves again.
    expect((await t.http('POST', '/generate', { body: SLIME_BODY })).status).toBe(200);
  });
});
