// Bad input anywhere — malformed JSON, wrong types, unknown ids, oversize bodies, unknown routes,
// wrong methods, broken URLs — answers a 4xx JSON error `{error, message, ...}`; nothing changes
// (rows and simulators unchanged, simulators not called) and the gateway keeps serving.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startTestGateway, type HttpAnswer, type HttpOpts, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const PROBE_PATHS = new Set(['/health', '/health_generate', '/server_info', '/get_server_info', '/model_info', '/get_model_info']);
const MAX_BODY = 64 * 1024;
const JSON_CT = { 'content-type': 'application/json' };
// `{"weight_version":"<0xff>"}`: well-formed JSON but for one byte that is not UTF-8.
const INVALID_UTF8_VERSION = Buffer.concat([Buffer.from('{"weight_version":"'), Buffer.from([0xff]), Buffer.from('"}')]);
// `{"text":"hi<0xff>"}` for the data plane.
const INVALID_UTF8_TEXT = Buffer.concat([Buffer.from('{"text":"hi'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);

async function engineCalls(sim: SimProcess) {
  return (await sim.requests()).filter((r) => !PROBE_PATHS.has(r.path));
}

/** node:http sends the request target as given; undici's URL parsing would resolve `..`. */
async function verbatim(base: string, method: string, path: string, opts: HttpOpts = {}) {
  const body = opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.body !== undefined) headers['content-type'] ??= 'application/json';
  return new Promise<HttpAnswer>((resolve, reject) => {
    const req = httpRequest(`${base}/`, { method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

interface Case {
  what: string;
  /** Send the path byte for byte (no client-side `..` normalisation). */
  verbatim?: boolean;
  method: string;
  path: string;
  opts?: HttpOpts;
  status: number;
  error?: string;
  context?: Record<string, unknown>;
}

describe('bad input', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;
  const oversize = () => JSON.stringify({ weight_version: '1', pad: 'x'.repeat(MAX_BODY) });

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ maxBodyBytes: MAX_BODY });
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  function cases(): Case[] {
    const w = `/v1/rl/workers/${id}`;
    return [
      // --- data-plane registry ---
      { what: 'register: malformed JSON', method: 'POST', path: '/workers', opts: { raw: '{"url":', headers: JSON_CT }, status: 400 },
      { what: 'register: empty JSON body', method: 'POST', path: '/workers', opts: { raw: '', headers: JSON_CT }, status: 400 },
      { what: 'register: no body at all', method: 'POST', path: '/workers', status: 400 },
      { what: 'register: a JSON array', method: 'POST', path: '/workers', opts: { body: [{ url: 'http://127.0.0.1:1' }] }, status: 400 },
      { what: 'register: url is a number', method: 'POST', path: '/workers', opts: { body: { url: 5 } }, status: 400 },
      { what: 'register: url missing', method: 'POST', path: '/workers', opts: { body: { labels: {} } }, status: 400 },
      {
        what: 'register: unreachable scheme',
        method: 'POST',
        path: '/workers',
        opts: { body: { url: 'ftp://127.0.0.1:1' } },
        status: 400,
        context: { field: 'url' },
      },
      { what: 'register: not a URL', method: 'POST', path: '/workers', opts: { body: { url: 'http://' } }, status: 400 },
      {
        what: 'register: label value not a string',
        method: 'POST',
        path: '/workers',
        opts: { body: { url: 'http://127.0.0.1:1', labels: { a: 1 } } },
        status: 400,
      },
      { what: 'register: labels is a list', method: 'POST', path: '/workers', opts: { body: { url: 'http://127.0.0.1:1', labels: ['a'] } }, status: 400 },
      {
        what: 'register: bootstrap_port out of range',
        method: 'POST',
        path: '/workers',
        opts: { body: { url: 'http://127.0.0.1:1', bootstrap_port: 70000 } },
        status: 400,
      },
      { what: 'register: api_key not a string', method: 'POST', path: '/workers', opts: { body: { url: 'http://127.0.0.1:1', api_key: 7 } }, status: 400 },
      {
        what: 'register: __proto__ key',
        method: 'POST',
        path: '/workers',
        opts: { raw: '{"url":"http://127.0.0.1:1","__proto__":{"x":1}}', headers: JSON_CT },
        status: 400,
      },
      {
        what: 'register: deeply nested JSON',
        method: 'POST',
        path: '/workers',
        opts: { raw: `{"url":"http://127.0.0.1:1","labels":${'['.repeat(20_000)}${']'.repeat(20_000)}}`, headers: JSON_CT },
        status: 400,
      },
      {
        what: 'register: text/plain body',
        method: 'POST',
        path: '/workers',
        opts: { raw: 'http://127.0.0.1:1', headers: { 'content-type': 'text/plain' } },
        status: 415,
        error: 'unsupported_media_type',
      },
      {
        what: 'register: an XML body',
        method: 'POST',
        path: '/workers',
        opts: { raw: '<url>http://127.0.0.1:1</url>', headers: { 'content-type': 'application/xml' } },
        status: 415,
      },
      {
        what: 'register: oversize body',
        method: 'POST',
        path: '/workers',
        opts: { raw: JSON.stringify({ url: 'http://127.0.0.1:1', pad: 'x'.repeat(MAX_BODY) }), headers: JSON_CT },
        status: 413,
      },
      { what: 'GET an unknown worker', method: 'GET', path: '/workers/nope', status: 404, error: 'worker_not_found', context: { id: 'nope' } },
      { what: 'DELETE an unknown worker', method: 'DELETE', path: '/workers/nope', status: 404, error: 'worker_not_found', context: { id: 'nope' } },
      { what: 'broken percent-encoding in an id', method: 'GET', path: '/workers/%zz', status: 400 },
      { what: 'broken percent-encoding in an RL id', method: 'POST', path: '/v1/rl/workers/%zz/version', opts: { body: { weight_version: '1' } }, status: 400 },
      { what: 'an over-long id', method: 'GET', path: `/v1/rl/workers/${'a'.repeat(3000)}`, status: 414 },
      // --- data plane ---
      { what: 'generate: malformed JSON', method: 'POST', path: '/generate', opts: { raw: '{"text":', headers: JSON_CT }, status: 400 },
      { what: 'generate: no body', method: 'POST', path: '/generate', status: 400 },
      { what: 'generate: a JSON array', method: 'POST', path: '/generate', opts: { body: [{ text: 'hi' }] }, status: 400 },
      { what: 'generate: a JSON string', method: 'POST', path: '/generate', opts: { body: 'hi' }, status: 400 },
      { what: 'chat: malformed JSON', method: 'POST', path: '/v1/chat/completions', opts: { raw: 'nope', headers: JSON_CT }, status: 400 },
      {
        what: 'generate: oversize body',
        method: 'POST',
        path: '/generate',
        opts: { raw: JSON.stringify({ text: 'x'.repeat(MAX_BODY) }), headers: JSON_CT },
        status: 413,
      },
      // --- unknown routes and wrong methods ---
      { what: 'unknown route', method: 'GET', path: '/nope', status: 404 },
      { what: 'unknown route with a body', method: 'POST', path: '/v1/nope', opts: { body: { a: 1 } }, status: 404 },
      { what: 'unknown RL route', method: 'GET', path: '/v1/rl/nope', status: 404 },
      { what: 'unknown RL sub-route of a worker', method: 'GET', path: `${w}/nope`, status: 404 },
      { what: 'PUT on the listing', method: 'PUT', path: '/v1/rl/workers', opts: { body: {} }, status: 405 },
      { what: 'DELETE on a row', method: 'DELETE', path: w, status: 405 },
      { what: 'GET on a version write', method: 'GET', path: `${w}/version`, status: 405 },
      { what: 'DELETE on the proxy', method: 'DELETE', path: `${w}/engine/pause_generation`, status: 405 },
      { what: 'PUT on a fan-out', method: 'PUT', path: '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', opts: { body: {} }, status: 405 },
      // --- RL control plane ---
      { what: 'RL row: unknown id', method: 'GET', path: '/v1/rl/workers/nope', status: 404, error: 'worker_not_found', context: { id: 'nope' } },
      {
        what: 'proxy: unknown id',
        method: 'POST',
        path: '/v1/rl/workers/nope/engine/pause_generation',
        opts: { body: {} },
        status: 404,
        error: 'worker_not_found',
        context: { id: 'nope' },
      },
      {
        what: 'proxy: path with ..',
        method: 'POST',
        path: `${w}/engine/a/../b`,
        verbatim: true,
        opts: { body: {} },
        status: 400,
        error: 'invalid_engine_path',
      },
      { what: 'proxy: leading ..', method: 'POST', path: `${w}/engine/../etc`, verbatim: true, opts: { body: {} }, status: 400, error: 'invalid_engine_path' },
      {
        what: 'proxy: encoded ..',
        method: 'POST',
        path: `${w}/engine/%2E%2E/etc`,
        verbatim: true,
        opts: { body: {} },
        status: 400,
        error: 'invalid_engine_path',
      },
      {
        what: 'fan-out: path with .',
        method: 'POST',
        path: '/v1/rl/engine/a/./b?selector=engine%3Dsglang',
        verbatim: true,
        opts: { body: {} },
        status: 400,
        error: 'invalid_engine_path',
      },
      { what: 'proxy: encoded space', method: 'POST', path: `${w}/engine/a%20b`, opts: { body: {} }, status: 400, error: 'invalid_engine_path' },
      { what: 'proxy: broken percent-encoding', method: 'POST', path: `${w}/engine/pause%zz`, opts: { body: {} }, status: 400 },
      { what: 'proxy: empty path', method: 'POST', path: `${w}/engine/`, opts: { body: {} }, status: 400, error: 'invalid_engine_path' },
      { what: 'proxy: oversize body', method: 'POST', path: `${w}/engine/update_weights_from_disk`, opts: { raw: oversize(), headers: JSON_CT }, status: 413 },
      { what: 'fan-out: no selector', method: 'POST', path: '/v1/rl/engine/flush_cache', opts: { body: {} }, status: 400, error: 'selector_required' },
      {
        what: 'fan-out: selector garbage',
        method: 'POST',
        path: '/v1/rl/engine/flush_cache?selector=%zz',
        opts: { body: {} },
        status: 400,
        error: 'invalid_selector',
        context: { offset: 0 },
      },
      {
        what: 'fan-out: oversize body',
        method: 'POST',
        path: '/v1/rl/engine/flush_cache?selector=engine%3Dsglang',
        opts: { raw: oversize(), headers: JSON_CT },
        status: 413,
      },
      {
        what: 'version: malformed JSON',
        method: 'POST',
        path: `${w}/version`,
        opts: { raw: '{"weight_version":"1"', headers: JSON_CT },
        status: 400,
        error: 'invalid_body',
      },
      {
        what: 'version: invalid UTF-8',
        method: 'POST',
        path: `${w}/version`,
        opts: { raw: INVALID_UTF8_VERSION, headers: JSON_CT },
        status: 400,
        error: 'invalid_body',
      },
      {
        what: 'fleet version: invalid UTF-8',
        method: 'POST',
        path: '/v1/rl/version?selector=engine%3Dsglang',
        opts: { raw: INVALID_UTF8_VERSION, headers: JSON_CT },
        status: 400,
        error: 'invalid_body',
      },
      { what: 'version: wrong type', method: 'POST', path: `${w}/version`, opts: { body: { weight_version: ['1'] } }, status: 400, error: 'invalid_body' },
      { what: 'version: oversize body', method: 'POST', path: `${w}/version`, opts: { raw: oversize(), headers: JSON_CT }, status: 413 },
      { what: 'state: wrong type', method: 'POST', path: `${w}/state`, opts: { body: { control: true } }, status: 400, error: 'invalid_body' },
      {
        what: 'fleet version: malformed JSON',
        method: 'POST',
        path: '/v1/rl/version?selector=engine%3Dsglang',
        opts: { raw: '{', headers: JSON_CT },
        status: 400,
        error: 'invalid_body',
      },
      {
        what: 'fleet state: unknown state',
        method: 'POST',
        path: '/v1/rl/state?selector=engine%3Dsglang',
        opts: { body: { control: 'off' } },
        status: 400,
        error: 'invalid_body',
      },
      { what: 'refit: malformed JSON', method: 'POST', path: '/v1/rl/refits', opts: { raw: '{"weight_version"', headers: JSON_CT }, status: 400 },
      { what: 'refit: wrong types', method: 'POST', path: '/v1/rl/refits', opts: { body: { weight_version: 3, source: 'disk' } }, status: 400 },
      { what: 'refit: unknown id', method: 'GET', path: '/v1/rl/refits/nope', status: 404 },
    ];
  }

  it('every bad request answers its 4xx JSON error, no engine is called, nothing changes, the gateway lives on', async () => {
    const rowsBefore = (await t.http('GET', '/v1/rl/workers')).json;
    const workersBefore = (await t.http('GET', '/workers')).json;
    const simBefore = await sim.state();
    await sim.clearRequests();

    for (const c of cases()) {
      const r = c.verbatim ? await verbatim(t.url, c.method, c.path, c.opts) : await t.http(c.method, c.path, c.opts);
      const what = `${c.what}: ${c.method} ${c.path} → ${r.status} ${r.text.slice(0, 200)}`;
      expect(r.status, what).toBe(c.status);
      expect(r.headers['content-type'], what).toMatch(/^application\/json/);
      expect(r.json, what).toMatchObject({ error: expect.any(String), message: expect.any(String) });
      expect(r.json.error, what).toMatch(/^[a-z_]+$/);
      if (c.error) expect(r.json.error, what).toBe(c.error);
      if (c.context) expect(r.json, what).toMatchObject(c.context);
    }

    // Nothing changed: rows, the registry, the simulator; no engine saw any of it.
    expect((await t.http('GET', '/v1/rl/workers')).json).toEqual(rowsBefore);
    expect((await t.http('GET', '/workers')).json).toEqual(workersBefore);
    expect(await engineCalls(sim)).toEqual([]);
    const simAfter = await sim.state();
    expect(simAfter.weightVersion).toBe(simBefore.weightVersion);
    expect(simAfter.paused).toEqual(simBefore.paused);

    // …and the gateway still serves both planes.
    expect((await t.http('GET', '/health')).status).toBe(200);
    const gen = await t.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } } });
    expect(gen.status).toBe(200);
    const flush = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { body: {} });
    expect(flush.status).toBe(200);
  });

  it('a data-plane body that is not UTF-8 is malformed JSON: 400 JSON error from the gateway, the engine is not called', async () => {
    await sim.clearRequests();
    for (const path of ['/generate', '/v1/chat/completions']) {
      const r = await t.http('POST', path, { raw: INVALID_UTF8_TEXT, headers: JSON_CT });
      expect(r.status, path).toBe(400);
      expect(r.json, path).toMatchObject({ error: 'invalid_request', message: expect.any(String) });
    }
    expect(await engineCalls(sim)).toEqual([]);
  });

  it('data-plane bodies with wrong field types are refused by the gateway (4xx JSON error), the engine is not called', async () => {
    await sim.clearRequests();
    const cases: Array<[string, unknown]> = [
      ['/generate', { text: 5 }],
      ['/generate', { input_ids: 'abc' }],
      ['/generate', { text: 'hi', sampling_params: 3 }],
      ['/generate', { text: 'hi', stream: 'yes' }],
      ['/v1/chat/completions', { model: 'sim-model', messages: 'hi' }],
      ['/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 'four' }],
    ];
    for (const [path, body] of cases) {
      const r = await t.http('POST', path, { body });
      const what = `${path} ${JSON.stringify(body)} → ${r.status} ${r.text.slice(0, 200)}`;
      expect(r.status, what).toBeGreaterThanOrEqual(400);
      expect(r.status, what).toBeLessThan(500);
      expect(r.json, what).toMatchObject({ error: expect.stringMatching(/^[a-z_]+$/), message: expect.any(String) });
    }
    expect(await engineCalls(sim)).toEqual([]);
  });

  it('status codes stay stable for the same bad input (errors do not leak state between requests)', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await t.http('POST', `/v1/rl/workers/${id}/version`, { raw: 'nope', headers: JSON_CT });
      expect(r.status).toBe(400);
      expect(r.json.error).toBe('invalid_body');
      const big = await t.http('POST', '/generate', { raw: JSON.stringify({ text: 'x'.repeat(MAX_BODY) }), headers: JSON_CT });
      expect(big.status).toBe(413);
    }
  });

  it('a client that sends a truncated body and goes away does not take the gateway down', async () => {
    // Announce more bytes than are sent, then abort: the gateway must shrug it off.
    const ac = new AbortController();
    const pending = request(`${t.url}/v1/rl/workers/${id}/version`, {
      method: 'POST',
      headers: { ...JSON_CT, 'content-length': '1000' },
      body: Readable.from(
        (async function* () {
          yield Buffer.from('{"weight_version":');
          await new Promise((r) => setTimeout(r, 50));
          ac.abort();
        })(),
      ),
      signal: ac.signal,
    }).catch(() => undefined);
    await pending;
    expect((await t.http('GET', '/health')).status).toBe(200);
    expect((await t.http('GET', `/v1/rl/workers/${id}`)).json.weight_version).toBeNull();
  });
});
