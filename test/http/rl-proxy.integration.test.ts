// Acceptance for the per-worker proxy `GET|POST /v1/rl/workers/{id}/engine/{*path}` against real
// SGLang simulators behind a real gateway and nats-server: what the engine received byte for byte,
// the mirrored answer, and every error envelope.

import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/closed-port.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS as OWN_PATHS, spawnSglangSim, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';

async function controlCalls(sim: SimProcess): Promise<SimRequest[]> {
  return (await sim.requests()).filter((r) => !OWN_PATHS.has(r.path));
}

/** A request whose path is sent as written (undici would normalise `..` segments away). */
function rawHttp(base: string, method: string, path: string): Promise<{ status: number; json: any }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: hostname, port, method, path }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function rowsOf(t: TestGateway): Promise<Array<Record<string, any>>> {
  const res = await t.http('GET', '/v1/rl/workers');
  expect(res.status).toBe(200);
  return res.json.workers;
}

describe('per-worker proxy (fixture H)', () => {
  let t: TestGateway;
  /** Registered with api_key engine-secret; the simulator itself requires that bearer. */
  let keyed: SimProcess;
  /** Registered by URL only. */
  let plain: SimProcess;
  let keyedId: string;
  let plainId: string;
  let deadId: string;
  let deadUrl: string;

  beforeAll(async () => {
    [keyed, plain] = await Promise.all([spawnSglangSim(['--token-rate', '0', '--api-key', 'engine-secret']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    [keyedId, plainId] = await t.register([{ url: keyed.url, api_key: 'engine-secret' }, plain.url]);
    deadUrl = `http://127.0.0.1:${await closedPort()}`;
    [deadId] = await t.register([deadUrl], { ready: 0 });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([keyed, plain].filter(Boolean).map((s) => s.stop()));
  });

  it('forwards update_weights_from_disk byte for byte and wraps the answer in RlCallOutcome', async () => {
    await keyed.clearRequests();
    const bytes = '{"model_path":"/models/x","weight_version":"42","flush_cache":true}';
    const res = await t.http('POST', `/v1/rl/workers/${keyedId}/engine/update_weights_from_disk`, {
      raw: bytes,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(200);
    expect(res.json.worker_id).toBe(keyedId);
    expect(res.json.url).toBe(keyed.url);
    expect(res.json.status).toBe(200);
    expect(res.json.body.success).toBe(true);
    expect(Number.isInteger(res.json.latency_ms)).toBe(true);
    expect(res.json.latency_ms).toBeGreaterThanOrEqual(0);
    expect(res.json).not.toHaveProperty('body_truncated');

    const seen = await controlCalls(keyed);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ method: 'POST', path: '/update_weights_from_disk', query: '', body: bytes });
    expect(seen[0]!.headers['content-type']).toBe('application/json');
  });

  it('drops selector pairs from the query, forwards only the three trace headers and sends the worker bearer', async () => {
    await keyed.clearRequests();
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const res = await t.http('POST', `/v1/rl/workers/${keyedId}/engine/pause?mode=keep&selector=engine%3Dsglang&level=2`, {
      headers: {
        authorization: 'Bearer caller-token',
        'x-request-id': 'req-1',
        traceparent,
        tracestate: 'vendor=1',
        'x-smg-routing-key': 'k',
        cookie: 'session=s',
        'x-custom': 'c',
      },
    });
    expect(res.status).toBe(200);
    expect(res.json.status).toBe(200);

    const seen = await controlCalls(keyed);
    expect(seen).toHaveLength(1);
    const r = seen[0]!;
    expect(r.method).toBe('POST');
    expect(r.path).toBe('/pause');
    expect(r.query).toBe('mode=keep&level=2');
    expect(r.headers.authorization).toBe('Bearer engine-secret');
    expect(r.headers['x-request-id']).toBe('req-1');
    expect(r.headers.traceparent).toBe(traceparent);
    expect(r.headers.tracestate).toBe('vendor=1');
    expect(r.headers).not.toHaveProperty('x-smg-routing-key');
    expect(r.headers).not.toHaveProperty('cookie');
    expect(r.headers).not.toHaveProperty('x-custom');
    expect(r.bodyBytes).toBe(0);

    // The forwarded query: duplicates and order kept, bytes not re-encoded, empty pairs dropped,
    // `selectorx` and a bare key kept, every `selector` pair removed.
    await keyed.clearRequests();
    const q = 'a=1&&selector=x&a=2&selectorx=3&flag&b=%2F+c&selector=engine%3Dsglang&';
    expect((await t.http('GET', `/v1/rl/workers/${keyedId}/engine/pause?${q}`)).status).toBe(200);
    const again = await controlCalls(keyed);
    expect(again.map((x) => [x.method, x.path, x.query])).toEqual([['GET', '/pause', 'a=1&a=2&selectorx=3&flag&b=%2F+c']]);
    expect((await t.http('GET', `/v1/rl/workers/${keyedId}/engine/pause?selector=a`)).status).toBe(200);
    expect((await controlCalls(keyed)).at(-1)!.query).toBe('');
    // `pause` was observed as paused; `resume` puts the row back.
    expect((await t.http('POST', `/v1/rl/workers/${keyedId}/engine/resume`)).status).toBe(200);
  });

  it('adds application/json only to a non-empty body, sends no body for none, and no bearer for a keyless worker', async () => {
    await plain.clearRequests();
    const withBody = await t.http('POST', `/v1/rl/workers/${plainId}/engine/continue_generation`, {
      raw: '{}',
      headers: { authorization: 'Bearer caller-token' },
    });
    expect(withBody.status).toBe(200);
    const empty = await t.http('POST', `/v1/rl/workers/${plainId}/engine/flush_cache`);
    expect(empty.status).toBe(200);

    const [cont, flush] = await controlCalls(plain);
    expect(cont).toMatchObject({ method: 'POST', path: '/continue_generation', body: '{}', bodyBytes: 2 });
    expect(cont!.headers['content-type']).toBe('application/json');
    expect(cont!.headers).not.toHaveProperty('authorization');
    expect(flush).toMatchObject({ method: 'POST', path: '/flush_cache', body: '', bodyBytes: 0 });
    expect(flush!.headers).not.toHaveProperty('content-type');
    expect(flush!.headers).not.toHaveProperty('authorization');
  });

  it('a text/plain answer is the JSON string body', async () => {
    await plain.setFaults({ route: 'text_route', status: 200, body: 'plain', times: 1 });
    const res = await t.http('GET', `/v1/rl/workers/${plainId}/engine/text_route`);
    expect(res.status).toBe(200);
    expect(res.json.status).toBe(200);
    expect(res.json.body).toBe('plain');
    const calls = (await controlCalls(plain)).filter((r) => r.path === '/text_route');
    expect(calls.map((r) => r.method)).toEqual(['GET']);

    // A json content type that does not parse stays text; an empty answer is "".
    await plain.setFaults([
      { route: 'broken_json', status: 200, body: '{"no', contentType: 'application/json', times: 1 },
      { route: 'empty', status: 200, body: '', contentType: null, times: 1 },
    ]);
    const broken = await t.http('GET', `/v1/rl/workers/${plainId}/engine/broken_json`);
    expect(broken.status).toBe(200);
    expect(broken.json.body).toBe('{"no');
    const empty = await t.http('GET', `/v1/rl/workers/${plainId}/engine/empty`);
    expect(empty.status).toBe(200);
    expect(empty.json.body).toBe('');
  });

  it('an engine 500 is mirrored as the proxy status with the engine body inside', async () => {
    await plain.setFaults({ route: 'pause_generation', status: 500, body: { success: false }, times: 1 });
    const res = await t.http('POST', `/v1/rl/workers/${plainId}/engine/pause_generation`, { body: {} });
    expect(res.status).toBe(500);
    expect(res.json.worker_id).toBe(plainId);
    expect(res.json.status).toBe(500);
    expect(res.json.body.success).toBe(false);
    // A non-2xx is not observed: the engine is not recorded as paused.
    expect((await t.http('GET', `/v1/rl/workers/${plainId}`)).json.control).toBe('active');
  });

  it('invalid engine paths are 400 invalid_engine_path, other methods 405, and reach no engine', async () => {
    await Promise.all([plain.clearRequests(), keyed.clearRequests()]);
    const base = `/v1/rl/workers/${plainId}/engine`;
    for (const path of ['a/b/c/d/e', 'pause/', 'a%20b', 'a%25b', 'a:b', '..%2Fetc']) {
      const res = await t.http('POST', `${base}/${path}`, { body: {} });
      expect(res.status, path).toBe(400);
      expect(res.json.error, path).toBe('invalid_engine_path');
    }
    // Sent as written: a URL parser on the client side would fold these dot segments away.
    // `engine///pause` carries the path `//pause` (one leading slash is stripped, then an
    // empty first segment remains).
    for (const path of ['/../etc', '/a/./b', '/a/%2E/b', '/%2E%2E/etc', '///pause', '']) {
      const res = await rawHttp(t.url, 'GET', `${base}${path}`);
      expect(res.status, path).toBe(400);
      expect(res.json.error, path).toBe('invalid_engine_path');
    }
    // Any method but GET and POST is 405 (HEAD goes to the engine as HEAD, as SMG's GET
    // routes take it: smg-surface.integration.test.ts).
    for (const method of ['DELETE', 'PUT', 'PATCH', 'OPTIONS']) {
      for (const url of [`${base}/pause_generation`, '/v1/rl/engine/pause_generation?selector=worker_type%3Dregular']) {
        const res = await t.http(method, url);
        expect(res.status, `${method} ${url}`).toBe(405);
      }
    }
    expect(await controlCalls(plain)).toEqual([]);
    expect(await controlCalls(keyed)).toEqual([]);

    // Four segments is the limit, and is forwarded (the engine answers 404, mirrored).
    const four = await t.http('POST', `${base}/a/b/c/d`, { body: {} });
    expect(four.json.worker_id).toBe(plainId);
    expect(four.status).toBe(four.json.status);
    expect((await controlCalls(plain)).map((r) => `${r.method} ${r.path}`)).toEqual(['POST /a/b/c/d']);
  });

  it('the path is validated before the worker lookup', async () => {
    const bad = await t.http('POST', '/v1/rl/workers/nope/engine/a/b/c/d/e', { body: {} });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toBe('invalid_engine_path');
    const unknown = await t.http('POST', '/v1/rl/workers/nope/engine/pause_generation', { body: {} });
    expect(unknown.status).toBe(404);
    expect(unknown.json).toMatchObject({ error: 'worker_not_found', id: 'nope' });
  });

  it('a worker with nothing listening is 502 upstream_unreachable naming the URL called', async () => {
    const res = await t.http('POST', `/v1/rl/workers/${deadId}/engine/pause_generation`, { body: {} });
    expect(res.status).toBe(502);
    expect(res.json).toMatchObject({ error: 'upstream_unreachable', worker_id: deadId, url: deadUrl });
    expect(res.json.message).toContain(`${deadUrl}/pause_generation`);
  });

  it('a 2 MiB answer is cut at 1 MiB and flagged; a 10-byte answer is not flagged', async () => {
    await plain.setFaults([
      { route: 'big', status: 200, bodyBytes: 2 * 1024 * 1024, times: 1 },
      { route: 'small', status: 200, body: { a: '12' }, times: 1 },
    ]);
    const big = await t.http('GET', `/v1/rl/workers/${plainId}/engine/big`);
    expect(big.status).toBe(200);
    expect(big.json.status).toBe(200);
    expect(big.json.body_truncated).toBe(true);
    expect(typeof big.json.body).toBe('string');
    expect(Buffer.byteLength(big.json.body)).toBeLessThanOrEqual(1_048_576);
    expect(big.json.body.startsWith('{"success":true,"data":"xxx')).toBe(true);

    const small = await t.http('GET', `/v1/rl/workers/${plainId}/engine/small`);
    expect(small.status).toBe(200);
    expect(small.json).not.toHaveProperty('body_truncated');
    expect(small.json.body).toEqual({ a: '12' });
  });

  it('failed control calls never open a breaker and never count as load', async () => {
    await plain.setFaults({ route: 'flush_cache', status: 500, times: 6 });
    for (let i = 0; i < 6; i++) {
      expect((await t.http('POST', `/v1/rl/workers/${plainId}/engine/flush_cache`)).status).toBe(500);
      expect((await t.http('POST', `/v1/rl/workers/${deadId}/engine/flush_cache`)).status).toBe(502);
    }
    const rows = await rowsOf(t);
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.breaker, row.url).toBe('closed');
      expect(row.load, row.url).toBe(0);
    }
    const dataPlane = await t.http('GET', '/workers');
    for (const w of dataPlane.json.workers) expect(w.load, w.url).toBe(0);
  });

  it('control calls reach each engine over HTTP/1.1 (rlgate has no h2c upstreams)', async () => {
    await Promise.all([keyed.clearRequests(), plain.clearRequests()]);
    for (const id of [keyedId, plainId]) {
      const res = await t.http('POST', `/v1/rl/workers/${id}/engine/pause_generation`, { body: {} });
      expect(res.status).toBe(200);
    }
    for (const sim of [keyed, plain]) {
      const calls = (await controlCalls(sim)).filter((r) => r.path === '/pause_generation');
      expect(calls).toHaveLength(1);
      expect(calls[0]!.httpVersion).toBe('1.1');
    }
    for (const id of [keyedId, plainId]) {
      expect((await t.http('POST', `/v1/rl/workers/${id}/engine/continue_generation`, { body: {} })).status).toBe(200);
    }
  });
});

describe('control timeout 1 s', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 1 } });
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('an engine slower than the deadline is 504 upstream_timeout ending "timed out after 1s"', async () => {
    await sim.setFaults({ route: 'flush_cache', delayMs: 1500, times: 1 });
    const res = await t.http('POST', `/v1/rl/workers/${id}/engine/flush_cache`);
    expect(res.status).toBe(504);
    expect(res.json).toMatchObject({ error: 'upstream_timeout', worker_id: id, url: sim.url });
    expect(res.json.message.endsWith('timed out after 1s')).toBe(true);
    const row = (await t.http('GET', `/v1/rl/workers/${id}`)).json;
    expect(row.breaker).toBe('closed');
    expect(row.load).toBe(0);
  });

  it('a fan-out leg past its deadline is a failed upstream_timeout with no result', async () => {
    await sim.setFaults({ route: 'flush_cache', delayMs: 1500, times: 1 });
    const res = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular');
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ total: 1, succeeded: 0, results: {} });
    expect(res.json.failed).toHaveLength(1);
    const f = res.json.failed[0];
    expect(f).toMatchObject({ worker_id: id, url: sim.url, error: 'upstream_timeout' });
    expect(f).not.toHaveProperty('status');
    expect(f).not.toHaveProperty('connection_mode');
    expect(f.message.endsWith('timed out after 1s')).toBe(true);
  });
});
