// Issue 11, item 1, over a real gateway, nats-server and SGLang simulators: a write whose body is
// not JSON is a 415 and calls no engine; a browser origin outside --allowed-origins is a 403 before
// anything runs; an allowed origin, the gateway's own origin and a request without Origin work;
// CORS preflights are answered for allowed origins only.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/gateway/config.ts';
import { startTestGateway, type HttpOpts, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const DASH = 'https://dash.example.com';
const EVIL = 'https://evil.example.net';
const PAUSE = '/v1/rl/engine/pause_generation?selector=engine%3Dsglang';
const RESUME = '/v1/rl/engine/continue_generation?selector=engine%3Dsglang';
const disk = (v: string) => ({ weight_version: v, source: { kind: 'disk', model_path: `/models/step-${v}` } });

/** Engine calls the simulators received (discovery and probes left out). */
async function engineCalls(sims: SimProcess[]): Promise<string[]> {
  const all = await Promise.all(sims.map((s) => s.requests()));
  return all
    .flat()
    .filter((r) => !GATEWAY_OWN_PATHS.has(r.path))
    .map((r) => `${r.method} ${r.path}`);
}

/** Resumes every engine and checks each one answered. */
async function resume(t: TestGateway, headers: Record<string, string> = {}): Promise<void> {
  const res = await t.http('POST', RESUME, { body: {}, headers });
  expect(res.status, res.text).toBe(200);
}

/** What a refused write must leave alone: the rows (control state, versions) and the worker list. */
async function fleetState(t: TestGateway): Promise<unknown> {
  const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<Record<string, unknown>>;
  const workers = (await t.http('GET', '/workers')).json.workers as Array<{ url: string }>;
  return { rows: rows.map((r) => [r.url, r.control, r.weight_version]), urls: workers.map((w) => w.url).sort() };
}

describe('write routes take JSON only, and refuse browser origins not allowed', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ allowedOrigins: [DASH] });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  /** Sends the write, then checks that no engine was called and nothing changed. */
  async function refused(method: string, path: string, opts: HttpOpts, status: number, error: string) {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const before = await fleetState(t);
    const res = await t.http(method, path, opts);
    expect(res.status, `${method} ${path}: ${res.text}`).toBe(status);
    expect(res.json).toMatchObject({ error });
    expect(await engineCalls(sims)).toEqual([]);
    expect(await fleetState(t)).toEqual(before);
    return res;
  }

  const textPlain = (body: unknown): HttpOpts => ({ raw: JSON.stringify(body), headers: { 'content-type': 'text/plain' } });

  it('a text/plain refit, pause fan-out, state change or registration is a 415 that calls no engine', async () => {
    await refused('POST', '/v1/rl/refits', textPlain(disk('9')), 415, 'unsupported_media_type');
    await refused('POST', PAUSE, textPlain({}), 415, 'unsupported_media_type');
    await refused('POST', '/v1/rl/state?selector=engine%3Dsglang', textPlain({ state: 'paused' }), 415, 'unsupported_media_type');
    const reg = await refused('POST', '/workers', textPlain({ url: 'http://127.0.0.1:9' }), 415, 'unsupported_media_type');
    expect(reg.json.content_type).toBe('text/plain');
    // Other non-JSON types a page (or a confused client) could send.
    await refused(
      'POST',
      '/v1/rl/refits',
      { raw: 'weight_version=9', headers: { 'content-type': 'application/x-www-form-urlencoded' } },
      415,
      'unsupported_media_type',
    );
    await refused(
      'POST',
      PAUSE,
      { raw: '--b\r\n\r\n{}\r\n--b--', headers: { 'content-type': 'multipart/form-data; boundary=b' } },
      415,
      'unsupported_media_type',
    );
    await refused(
      'POST',
      '/v1/rl/refits',
      { raw: JSON.stringify(disk('9')), headers: { 'content-type': 'application/json; charset=latin1' } },
      415,
      'unsupported_media_type',
    );
    // A body without any content type, outside the pass-through routes.
    const none = await refused('POST', '/v1/rl/refits', { raw: JSON.stringify(disk('9')) }, 415, 'unsupported_media_type');
    expect(none.json.content_type).toBeNull();
    await refused('PUT', '/generate', { raw: '{"text":"hi"}', headers: { 'content-type': 'text/plain' } }, 415, 'unsupported_media_type');
    await refused('POST', '/v1/chat/completions', textPlain({ messages: [{ role: 'user', content: 'hi' }] }), 415, 'unsupported_media_type');
  });

  it('JSON bodies pass: application/json with a charset, and application/*+json', async () => {
    const id = (await t.http('GET', '/v1/rl/workers')).json.workers[0].id as string;
    const version = await t.http('POST', `/v1/rl/workers/${id}/version`, {
      raw: '{"weight_version":"7"}',
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(version.status, version.text).toBe(200);
    const reg = await t.http('POST', '/workers', { raw: JSON.stringify({ url: sims[0]!.url }), headers: { 'content-type': 'application/merge-patch+json' } });
    expect(reg.status, reg.text).toBe(202);
    await t.waitReady(2);
  });

  it('a write without a body needs no content type: a bodiless fan-out reaches the engines', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const flushed = await t.http('POST', '/v1/rl/engine/flush_cache?selector=engine%3Dsglang', { raw: '', headers: { 'content-type': 'text/plain' } });
    expect(flushed.status, flushed.text).toBe(200);
    expect(await engineCalls(sims)).toEqual(['POST /flush_cache', 'POST /flush_cache']);
  });

  it('the pass-through takes a body without a content type as JSON (SMG contract)', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const res = await t.http('POST', PAUSE, { raw: '{}' });
    expect(res.status, res.text).toBe(200);
    const calls = (await Promise.all(sims.map((s) => s.requests()))).flat().filter((r) => r.path === '/pause_generation');
    expect(calls).toHaveLength(2);
    for (const c of calls) expect(c.headers['content-type']).toBe('application/json');
    await resume(t);
  });

  it('a cross-origin JSON write from an origin not allowed is a 403 before anything runs', async () => {
    const evil = { headers: { origin: EVIL } };
    const res = await refused('POST', '/v1/rl/refits', { body: disk('10'), ...evil }, 403, 'origin_not_allowed');
    expect(res.json.origin).toBe(EVIL);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    await refused('POST', PAUSE, { body: {}, ...evil }, 403, 'origin_not_allowed');
    await refused('POST', '/workers', { body: { url: 'http://127.0.0.1:9' }, ...evil }, 403, 'origin_not_allowed');
    await refused('DELETE', `/workers/${(await t.http('GET', '/v1/rl/workers')).json.workers[0].id}`, evil, 403, 'origin_not_allowed');
    // A sandboxed frame's `null` origin is not allowed either; nor is a look-alike of an allowed one.
    await refused('POST', PAUSE, { body: {}, headers: { origin: 'null' } }, 403, 'origin_not_allowed');
    await refused('POST', PAUSE, { body: {}, headers: { origin: 'http://dash.example.com' } }, 403, 'origin_not_allowed');
    // Reads stay open: the browser itself keeps an answer without allow-origin from the page.
    const read = await t.http('GET', '/v1/rl/workers', evil);
    expect(read.status).toBe(200);
    expect(read.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('an allowed origin writes, and its answers carry the CORS headers', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const paused = await t.http('POST', PAUSE, { body: {}, headers: { origin: DASH } });
    expect(paused.status, paused.text).toBe(200);
    expect(paused.headers['access-control-allow-origin']).toBe(DASH);
    expect(paused.headers.vary).toContain('Origin');
    expect(paused.headers['access-control-expose-headers']).toContain('x-smg-weight-version');
    expect(await engineCalls(sims)).toHaveLength(2);
    const refit = await t.http('POST', '/v1/rl/refits', { body: disk('11'), headers: { origin: DASH } });
    expect(refit.status, refit.text).toBe(200);
    expect(refit.headers['access-control-allow-origin']).toBe(DASH);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ weight_version: string; control: string }>;
    // The refit kept paused the engines the operator (here: the dashboard) paused before it.
    for (const r of rows) expect(r).toMatchObject({ weight_version: '11', control: 'paused' });
    // The data plane relays its answers itself; they carry the header too.
    await resume(t, { origin: DASH });
    const gen = await t.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } }, headers: { origin: DASH } });
    expect(gen.status, gen.text).toBe(200);
    expect(gen.headers['access-control-allow-origin']).toBe(DASH);
  });

  it("the gateway's own origin (its page at /ui) and requests without Origin write", async () => {
    const own = new URL(t.url).origin;
    const paused = await t.http('POST', PAUSE, { body: {}, headers: { origin: own } });
    expect(paused.status, paused.text).toBe(200);
    const resumed = await t.http('POST', RESUME, { body: {} });
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.headers['access-control-allow-origin']).toBeUndefined();
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ control: string }>;
    for (const r of rows) expect(r.control).toBe('active');
  });

  it('answers preflights of allowed origins, and refuses the others', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const ask = { 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, authorization, x-rl-version-policy' };
    const ok = await t.http('OPTIONS', '/v1/rl/refits', { headers: { origin: DASH, ...ask } });
    expect(ok.status).toBe(204);
    expect(ok.headers['access-control-allow-origin']).toBe(DASH);
    expect(ok.headers['access-control-allow-methods']).toContain('POST');
    expect(ok.headers['access-control-allow-headers']).toBe('content-type, authorization, x-rl-version-policy');
    expect(Number(ok.headers['access-control-max-age'])).toBeGreaterThan(0);
    const pass = await t.http('OPTIONS', PAUSE, { headers: { origin: DASH, ...ask } });
    expect(pass.status).toBe(204);
    const bad = await t.http('OPTIONS', '/v1/rl/refits', { headers: { origin: EVIL, ...ask } });
    expect(bad.status).toBe(403);
    expect(bad.json).toMatchObject({ error: 'origin_not_allowed', origin: EVIL });
    expect(bad.headers['access-control-allow-origin']).toBeUndefined();
    // A plain OPTIONS (no preflight) is still the route's own answer.
    expect((await t.http('OPTIONS', PAUSE)).status).toBe(405);
    expect(await engineCalls(sims)).toEqual([]);
  });
});

describe('--allowed-origins * and the admin key', () => {
  let t: TestGateway;
  let sim: SimProcess;
  const KEY = 'admin-secret';

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ allowedOrigins: ['*'], adminKey: KEY });
    await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('any origin may write with the key; a preflight needs no key; the body rule still holds', async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    const pre = await t.http('OPTIONS', PAUSE, {
      headers: { origin: EVIL, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('*');
    expect(pre.headers['access-control-allow-headers']).toBe('authorization');
    const noKey = await t.http('POST', PAUSE, { body: {}, headers: { origin: EVIL } });
    expect(noKey.status).toBe(401);
    const paused = await t.http('POST', PAUSE, { body: {}, headers: { origin: EVIL, ...auth } });
    expect(paused.status, paused.text).toBe(200);
    expect(paused.headers['access-control-allow-origin']).toBe('*');
    await sim.clearRequests();
    const text = await t.http('POST', RESUME, { raw: '{}', headers: { origin: EVIL, 'content-type': 'text/plain', ...auth } });
    expect(text.status).toBe(415);
    expect((await sim.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path))).toEqual([]);
    await resume(t, auth);
  });
});

describe('--allowed-origins', () => {
  it('is read from the flag, the environment and the config file, and refuses what is not an origin', () => {
    expect(loadConfig(['--allowed-origins', `${DASH},*`]).allowedOrigins).toEqual([DASH, '*']);
    expect(loadConfig([], { RLGATE_ALLOWED_ORIGINS: `${DASH} ${EVIL}` }).allowedOrigins).toEqual([DASH, EVIL]);
    expect(loadConfig([]).allowedOrigins).toEqual([]);
    for (const bad of [`${DASH}/app`, 'dash.example.com', 'ftp://dash.example.com', 'https://user:pw@dash.example.com', `${DASH}?x=1`]) {
      expect(() => loadConfig(['--allowed-origins', bad]), bad).toThrow(ConfigError);
      expect(() => loadConfig(['--allowed-origins', bad]), bad).toThrow(/allowed_origins/);
    }
  });
});
