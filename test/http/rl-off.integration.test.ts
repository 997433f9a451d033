// Fixture OFF, RL disabled with one SGLang simulator registered: every `/v1/rl` path, any method,
// is a 404 with zero bytes (even without the admin key), no engine is called, no RL metric series
// exist and the data plane works as usual, ignoring the version-policy headers.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

// What the gateway's own discovery and liveness probes send; anything else is a real call.
const PROBE_PATHS = new Set(['/health', '/health_generate', '/server_info', '/get_server_info', '/model_info', '/get_model_info']);

async function engineCalls(sim: SimProcess) {
  return (await sim.requests()).filter((r) => !PROBE_PATHS.has(r.path));
}

/** A raw request, so HEAD/OPTIONS and the exact bytes of the answer can be checked. */
async function raw(base: string, method: string, path: string, body?: string) {
  const res = await request(`${base}${path}`, {
    method: method as 'GET',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body,
  });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, bytes };
}

function expectEmpty404(r: { status: number; headers: Record<string, unknown>; bytes: Buffer }, what: string) {
  expect(r.status, what).toBe(404);
  expect(r.bytes.length, what).toBe(0);
  expect(r.headers['content-length'], what).toBe('0');
}

describe('RL switched off (fixture OFF)', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let workerId: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    // An admin key is configured on purpose: the RL-off 404 must not depend on authentication.
    t = await startTestGateway({ rl: { enabled: false }, adminKey: 'admin-secret' });
    [workerId] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('GET /v1/rl/workers → 404, zero bytes, content-length: 0', async () => {
    const r = await raw(t.url, 'GET', '/v1/rl/workers');
    expectEmpty404(r, 'GET /v1/rl/workers');
    expect(r.headers['content-type']).toBeUndefined();
  });

  it('POST /v1/rl/engine/flush_cache?selector=engine%3Dsglang → empty 404, the simulator is never called', async () => {
    await sim.clearRequests();
    const r = await raw(t.url, 'POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', '{}');
    expectEmpty404(r, 'fan-out');
    const perWorker = await raw(t.url, 'POST', `/v1/rl/workers/${workerId}/engine/flush_cache`, '{}');
    expectEmpty404(perWorker, 'per-worker proxy to a real worker id');
    expect(await engineCalls(sim)).toEqual([]);
  });

  it('every /v1/rl path with any method is an empty 404, with or without the admin key', async () => {
    const cases: Array<[string, string, string?]> = [
      ['GET', '/v1/rl/workers/anything/engine/pause_generation'],
      ['POST', '/v1/rl/version?selector=x', '{"weight_version":"1"}'],
      ['POST', '/v1/rl/state?selector=x', '{"control":"paused"}'],
      ['POST', `/v1/rl/workers/${workerId}/version`, '{"weight_version":"1"}'],
      ['GET', `/v1/rl/workers/${workerId}`],
      ['DELETE', '/v1/rl/workers/anything/engine/pause_generation'],
      ['PUT', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', '{}'],
      ['PATCH', '/v1/rl/workers'],
      ['OPTIONS', '/v1/rl/workers'],
      ['HEAD', '/v1/rl/workers'],
      ['GET', '/v1/rl'],
      ['GET', '/v1/rl/'],
      ['GET', '/v1/rl?x=1'],
      ['GET', '/v1/rl/no/such/route'],
      ['POST', '/v1/rl/refits', '{"weight_version":"1","source":{"kind":"disk","model_path":"/m"}}'],
      ['POST', '/v1/rl/workers/anything/engine/pause_generation', 'not json at all'],
      // URLs the router cannot match at all are still RL paths.
      ['GET', '/v1/rl/workers/%zz'],
      ['GET', `/v1/rl/workers/${'a'.repeat(3000)}`],
    ];
    for (const [method, path, body] of cases) {
      expectEmpty404(await raw(t.url, method, path, body), `${method} ${path}`);
    }
    // With the admin key, and with a wrong one: still the same empty 404 (no 401 ever).
    for (const auth of ['Bearer admin-secret', 'Bearer wrong']) {
      const res = await request(`${t.url}/v1/rl/workers`, { headers: { authorization: auth } });
      const bytes = Buffer.from(await res.body.arrayBuffer());
      expect(res.statusCode, auth).toBe(404);
      expect(bytes.length, auth).toBe(0);
    }
    expect(await engineCalls(sim)).toEqual([]);
  });

  it('GET /workers lists the worker; GET /metrics has no series with the RL prefix', async () => {
    const ws = await t.http('GET', '/workers');
    expect(ws.status).toBe(200);
    expect(ws.json.total).toBe(1);
    expect(ws.json.workers[0].id).toBe(workerId);
    expect(ws.json.workers[0].url).toBe(sim.url);
    expect(ws.json.workers[0].status).toBe('ready');

    // Exercise the data plane and the (absent) control plane first, so a lazily created
    // series would exist by now if RL code ran at all.
    expect((await t.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } } })).status).toBe(200);
    await raw(t.url, 'POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', '{}');

    const m = await t.http('GET', '/metrics');
    expect(m.status).toBe(200);
    expect(m.text).toMatch(/^rlgate_/m); // the registry itself is there…
    expect(m.text).not.toMatch(/rlgate_rl_/); // …but not one RL series, HELP or TYPE line
    expect(m.text).not.toMatch(/smg_rl_/);
  });

  it('/generate with a garbage x-smg-version-policy → 200, no RL headers, x-smg-routed-worker-id stamped', async () => {
    for (const header of ['x-smg-version-policy', 'x-rl-version-policy']) {
      const r = await t.http('POST', '/generate', { body: { text: 'hi' }, headers: { [header]: 'garbage' } });
      expect(r.status, header).toBe(200);
      expect(typeof r.json.text, header).toBe('string');
      expect(r.headers['x-smg-weight-version'], header).toBeUndefined();
      expect(r.headers['x-smg-mixed-version'], header).toBeUndefined();
      expect(r.headers['x-rl-weight-version'], header).toBeUndefined();
      expect(r.headers['x-rl-admitted-version'], header).toBeUndefined();
      expect(r.headers['x-smg-routed-worker-id'], header).toBe(sim.url);
    }
  });
});
