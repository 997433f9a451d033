// The data plane's hot path (src/http/hot-path.ts) answers exactly what the fastify routes answer:
// every request below goes once through each door, `content-type: application/json` (the hot path)
// and `application/vnd.rlgate+json` (a JSON type the hot path leaves to fastify), and both answers
// must agree on status, error code and message, content type and stamping headers. Which door
// served is read off fastify's own diagnostics channel (`fastify.request.handler`), published for
// every request fastify routes: none for the hot path, one each through fastify.

import { tracingChannel } from 'node:diagnostics_channel';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { defaultConfig } from '../../src/gateway/config.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const MAX_BODY = 16 * 1024;
const HOT = 'application/json';
const FASTIFY = 'application/vnd.rlgate+json';
const STAMPS = ['x-smg-routed-worker-id', 'x-smg-weight-version', 'x-rl-weight-version', 'x-rl-admitted-version', 'content-type', 'retry-after'];

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

describe('the data-plane hot path', () => {
  let t: TestGateway;
  let fast: SimProcess;
  let other: SimProcess;
  let fastId: string;
  let fastifyHandled = 0;
  const channel = tracingChannel('fastify.request.handler');
  const count = {
    start: () => {
      fastifyHandled++;
    },
    end: () => {},
    asyncStart: () => {},
    asyncEnd: () => {},
    error: () => {},
  };

  beforeAll(async () => {
    [fast, other] = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    // consistent_hashing honours X-SMG-Target-Worker: both doors' requests go to the same engine.
    const routing = { ...defaultConfig().routing, policy: 'consistent_hashing' };
    // The engine faults below fail requests on purpose: no breaker may open between the two doors' turns.
    t = await startTestGateway({ maxBodyBytes: MAX_BODY, requestTimeoutSecs: 1, breakerThreshold: 1000, routing, rl: { enabled: true } });
    [fastId] = await t.register([fast.url, other.url], { ready: 2 });
    expect((await t.http('POST', `/v1/rl/workers/${fastId}/version`, { body: { weight_version: '9' } })).status).toBe(200);
    channel.subscribe(count);
  });
  afterAll(async () => {
    channel.unsubscribe(count);
    await t?.close();
    await Promise.all([fast?.stop(), other?.stop()]);
  });

  /** One request through one door; `target` pins the fast engine (the routing policy would spread them). */
  async function send(
    door: string,
    method: string,
    path: string,
    body: string | Buffer,
    headers: Record<string, string> = {},
  ): Promise<Answer & { viaFastify: number }> {
    const before = fastifyHandled;
    const res = await request(`${t.url}${path}`, {
      method: method as 'POST',
      headers: { 'content-type': door, 'x-smg-target-worker': fast.url, ...headers },
      body,
    });
    const text = await res.body.text();
    return { status: res.statusCode, headers: res.headers, text, viaFastify: fastifyHandled - before };
  }

  /** The parts of an answer both doors must agree on. */
  function essence(a: Answer) {
    const stamps = Object.fromEntries(STAMPS.map((h) => [h, a.headers[h]]));
    const type = String(a.headers['content-type'] ?? '');
    if (type.startsWith('text/event-stream'))
      return { status: a.status, stamps, events: a.text.split('\n\n').filter(Boolean).length, done: a.text.trimEnd().endsWith('data: [DONE]') };
    const json = JSON.parse(a.text) as Record<string, unknown>;
    // An error's envelope whole; an engine's answer by its shape (ids and timings differ per call).
    return { status: a.status, stamps, body: 'error' in json ? json : Object.keys(json).sort() };
  }

  async function both(method: string, path: string, body: unknown, headers: Record<string, string> = {}) {
    const bytes = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const hot = await send(HOT, method, path, bytes, headers);
    const slow = await send(FASTIFY, method, path, bytes, headers);
    expect(hot.viaFastify, 'the hot path served it').toBe(0);
    expect(slow.viaFastify, 'fastify served it').toBe(1);
    expect(essence(hot)).toEqual(essence(slow));
    return hot;
  }

  const GEN = { input_ids: [1, 2, 3, 4], sampling_params: { max_new_tokens: 4, ignore_eos: true } };
  const CHAT = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
  const COMPLETION = { prompt: 'hi', max_tokens: 4 };

  it('answers buffered and streamed generations on every data-plane route, stamped with the engine and its version', async () => {
    const cases: Array<[string, string, unknown]> = [
      ['POST', '/generate', GEN],
      ['PUT', '/generate', GEN],
      ['POST', '/generate', { ...GEN, stream: true }],
      ['POST', '/v1/chat/completions', CHAT],
      ['POST', '/v1/chat/completions', { ...CHAT, stream: true }],
      ['POST', '/v1/completions', COMPLETION],
      ['POST', '/v1/completions', { ...COMPLETION, stream: true }],
    ];
    for (const [method, path, body] of cases) {
      const a = await both(method, path, body);
      expect(a.status, `${method} ${path}`).toBe(200);
      expect(a.headers['x-smg-routed-worker-id']).toBe(fast.url);
      expect(a.headers['x-smg-weight-version']).toBe('9');
      expect(a.headers['x-rl-admitted-version']).toBe('9');
    }
  });

  it('refuses bad requests with the same status, code and message as the fastify routes', async () => {
    const cases: Array<{ path: string; body: unknown; headers?: Record<string, string>; status: number; error: string }> = [
      { path: '/generate', body: '{"input_ids": [1, 2', status: 400, error: 'invalid_request' },
      { path: '/generate', body: '[1, 2]', status: 400, error: 'invalid_request' },
      { path: '/generate', body: { input_ids: 'seven' }, status: 400, error: 'invalid_request' },
      { path: '/generate', body: Buffer.concat([Buffer.from('{"text":"hi'), Buffer.from([0xff]), Buffer.from('"}')]), status: 400, error: 'invalid_request' },
      { path: '/generate', body: { text: ['a', 'b'] }, status: 422, error: 'invalid_request_shape' },
      { path: '/v1/chat/completions', body: { ...CHAT, model: 'no-such-model' }, status: 404, error: 'model_not_found' },
      { path: '/v1/completions', body: { prompt: 5 }, status: 400, error: 'invalid_request' },
      { path: '/generate', body: GEN, headers: { 'x-rl-version-policy': 'sometimes' }, status: 400, error: 'invalid_version_policy' },
      { path: '/generate', body: GEN, headers: { 'x-smg-target-worker': 'no-such-engine' }, status: 503, error: 'no_available_workers' },
    ];
    for (const c of cases) {
      const a = await both('POST', c.path, c.body, c.headers);
      expect({ status: a.status, error: JSON.parse(a.text).error }, `${c.path} ${JSON.stringify(c.body)}`).toEqual({ status: c.status, error: c.error });
    }
  });

  it('refuses a chunked body past --max-body-bytes with 413 payload_too_large', async () => {
    const big = JSON.stringify({ ...GEN, pad: 'x'.repeat(MAX_BODY) });
    // No content-length: the limit is found while reading, as fastify's parser finds it.
    const chunked = (door: string) => ({
      door,
      body: Readable.from([Buffer.from(big)]),
    });
    const answers = [];
    for (const { door, body } of [chunked(HOT), chunked(FASTIFY)]) {
      const before = fastifyHandled;
      const res = await request(`${t.url}/generate`, { method: 'POST', headers: { 'content-type': door }, body });
      answers.push({ status: res.statusCode, json: await res.body.json(), viaFastify: fastifyHandled - before, type: res.headers['content-type'] });
    }
    expect(answers[0]).toEqual({
      status: 413,
      json: { error: 'payload_too_large', message: `request body exceeds ${MAX_BODY} bytes`, limit: MAX_BODY },
      viaFastify: 0,
      type: 'application/json; charset=utf-8',
    });
    // fastify refuses it before its handler runs: no handler event either.
    expect({ ...answers[1], viaFastify: 0 }).toEqual(answers[0]);
  });

  it('passes an engine error through, and answers 504 past the deadline and 502 when no engine answers', async () => {
    await fast.setFaults({ route: '/generate', status: 500, body: { error: 'engine says no' } });
    const failed = await both('POST', '/generate', GEN);
    expect(failed.status).toBe(500);
    expect(JSON.parse(failed.text)).toEqual({ error: 'engine says no' });

    await fast.setFaults({ route: '/generate', delayMs: 2_500 });
    const late = await both('POST', '/generate', GEN);
    expect({ status: late.status, error: JSON.parse(late.text).error }).toEqual({ status: 504, error: 'upstream_timeout' });

    await Promise.all([fast.setFaults({ route: '/generate', drop: true }), other.setFaults({ route: '/generate', drop: true })]);
    const gone = await both('POST', '/generate', GEN);
    expect({ status: gone.status, error: JSON.parse(gone.text).error }).toEqual({ status: 502, error: 'upstream_unreachable' });
    await Promise.all([fast.clearFaults(), other.clearFaults()]);
  });

  it('leaves other shapes to fastify: a browser origin, a query string', async () => {
    const before = fastifyHandled;
    const withOrigin = await request(`${t.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': HOT, origin: 'http://elsewhere.example', 'x-smg-target-worker': fast.url },
      body: JSON.stringify(GEN),
    });
    await withOrigin.body.text();
    // Refused by the write guard (no --allowed-origins), which only fastify's hooks run.
    expect(withOrigin.statusCode).toBe(403);
    const query = await request(`${t.url}/generate?x=1`, {
      method: 'POST',
      headers: { 'content-type': HOT, 'x-smg-target-worker': fast.url },
      body: JSON.stringify(GEN),
    });
    await query.body.text();
    expect(query.statusCode).toBe(200);
    expect(fastifyHandled - before).toBe(1); // the 403 is a hook's: only the query request reached a handler
  });
});
