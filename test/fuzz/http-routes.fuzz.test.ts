// Property: whatever a client sends to any route the gateway serves, the gateway never fails
// itself (no 5xx of its own: an engine's own answer, or an upstream or overload code, is the only
// 5xx allowed), and input it refuses changes nothing — no worker added, removed or relabelled, no
// engine paused, refitted or called on a control route. Routes, methods and declared query
// parameters come from the gateway's own API document; bodies are random and hostile JSON or
// bytes under random content types; query parameters are random, repeated, or the declared ones
// with hostile values. Over a real gateway, nats-server and simulator; judged on the simulator's
// own state and request record.

import fc from 'fast-check';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { fuzzParams } from '../fixtures/fuzz.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';
interface Route {
  method: Method;
  /** The path template, `{param}` placeholders included. */
  path: string;
  query: string[];
}

/** 5xx codes that speak of an engine or of load, never of the gateway failing. */
const UPSTREAM_CODES = new Set(['upstream_unreachable', 'upstream_timeout', 'logprobs_unavailable', 'no_available_workers', 'bus_unavailable', 'overloaded']);
/** Engine routes a refused request must never have reached. */
const DATA_PLANE = new Set(['/generate', '/v1/chat/completions', '/v1/completions', '/v1/loads']);

const hostileJson = fc.oneof(
  fc.jsonValue({ maxDepth: 6 }),
  fc.string({ unit: 'grapheme', maxLength: 300 }),
  fc.array(fc.oneof(fc.integer(), fc.double()), { maxLength: 1_000 }),
  fc.constant({ nested: JSON.parse('['.repeat(200) + ']'.repeat(200)) as unknown }),
  fc.dictionary(fc.string({ maxLength: 30 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 30 }),
  fc.record({ url: fc.oneof(fc.webUrl(), fc.string()), labels: fc.jsonValue({ maxDepth: 2 }), api_key: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] }),
  fc.record({ weight_version: fc.jsonValue({ maxDepth: 1 }), source: fc.jsonValue({ maxDepth: 2 }), selector: fc.jsonValue({ maxDepth: 1 }), dry_run: fc.boolean() }, { requiredKeys: [] }),
  fc.record({ control: fc.jsonValue({ maxDepth: 1 }), weight_version: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] }),
);
const body = fc.oneof(
  { weight: 6, arbitrary: hostileJson.map((v) => JSON.stringify(v) as string | Uint8Array | undefined) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => b as string | Uint8Array | undefined) },
  { weight: 2, arbitrary: fc.constant(undefined) },
);
const contentType = fc.constantFrom(undefined, 'application/json', 'application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/merge-patch+json', 'application/json; charset=latin1', '*/*');
const token = fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('', '..', '%00', '%2e%2e', 'role=actor', 'a&b=c', '\u2028', 'x'.repeat(3_000)));

describe('HTTP routes under random requests', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let routes: Route[];

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    await t.register([sim.url]);
    const doc = (await t.http('GET', '/openapi.json')).json as { paths: Record<string, Record<string, { parameters?: Array<{ name: string; in: string }> }>> };
    // The fleet's event stream never ends by design (test/refit/refit-events covers it).
    const endless = new Set(['/v1/rl/events']);
    routes = Object.entries(doc.paths).filter(([path]) => !endless.has(path)).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([m]) => ['get', 'head', 'post', 'put', 'patch', 'delete'].includes(m))
        .map(([m, op]) => ({ method: m.toUpperCase() as Method, path, query: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name) })),
    );
    routes.push({ method: 'OPTIONS', path: '/v1/rl/refits', query: [] }, { method: 'POST', path: '/no/such/{route}', query: [] });
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  /** What a refused request must not change: the registry as listed, and the engine's own state. */
  async function fleetFacts() {
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<Record<string, unknown>>;
    const st = await sim.state();
    return {
      workers: rows.map((r) => ({ id: r.id, url: r.url, labels: r.labels, weight_version: r.weight_version, control: r.control, quarantined: r.quarantined })),
      paused: st.paused,
      weightVersion: st.weightVersion,
    };
  }

  it('no 5xx of the gateway\'s own, and refused input changes nothing', async () => {
    const before = await fleetFacts();
    await sim.clearRequests();
    const cases = fc.record({
      route: fc.constantFrom(...routes),
      params: fc.array(token, { minLength: 4, maxLength: 4 }),
      declared: fc.array(fc.tuple(fc.nat(), token), { maxLength: 4 }),
      extra: fc.array(fc.tuple(fc.string({ maxLength: 10 }), token), { maxLength: 3 }),
      repeat: fc.boolean(),
      body,
      contentType,
    });
    const seen: string[] = [];
    await fc.assert(
      fc.asyncProperty(cases, async (c) => {
        let i = 0;
        const path = c.route.path.replace(/\{[^}]+\}/g, () => encodeURIComponent(c.params[i++ % c.params.length]!));
        const q = new URLSearchParams();
        for (const [n, v] of c.declared) if (c.route.query.length) q.append(c.route.query[n % c.route.query.length]!, v);
        for (const [k, v] of c.extra) q.append(k, v);
        if (c.repeat && c.route.query.length) q.append(c.route.query[0]!, 'again');
        const url = `${t.url}${path}${q.size ? `?${q}` : ''}`;
        const headers: Record<string, string> = {};
        if (c.contentType) headers['content-type'] = c.contentType;
        const sendsBody = c.body !== undefined && !['GET', 'HEAD'].includes(c.route.method);
        const started = Date.now();
        if (process.env.RLGATE_FUZZ_TRACE) process.stderr.write(`[fuzz] > ${c.route.method} ${url.slice(0, 200)} ct=${c.contentType} body=${sendsBody ? (typeof c.body === 'string' ? c.body.length : c.body!.length) : '-'}\n`);
        const res = await request(url, { method: c.route.method, headers, body: sendsBody ? c.body : undefined, headersTimeout: 15_000, bodyTimeout: 15_000 });
        // An event stream (a path that normalises to /v1/rl/events, a refit's events) does not end
        // by itself: its 200 and headers are the answer.
        const streaming = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
        if (streaming) res.body.destroy();
        const text = streaming ? '' : await res.body.text();
        if (process.env.RLGATE_FUZZ_TRACE) process.stderr.write(`[fuzz] ${Date.now() - started} ms ${c.route.method} ${url.slice(0, 200)} → ${res.statusCode}\n`);
        seen.push(`${c.route.method} ${c.route.path} → ${res.statusCode}`);
        if (res.statusCode >= 500) {
          const fromEngine = res.headers['x-smg-routed-worker-id'] !== undefined;
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: string }).error;
          } catch {
            code = undefined;
          }
          expect(fromEngine || UPSTREAM_CODES.has(code ?? ''), `${c.route.method} ${url.slice(0, 300)} (${c.contentType}) → ${res.statusCode} ${text.slice(0, 300)}`).toBe(true);
        }
      }),
      fuzzParams('HTTP routes', routes.length),
    );
    // Nothing a random request could do legitimately changes the fleet: every id and URL it names
    // is random, and no random body is a valid registration, write or refit.
    expect(await fleetFacts()).toEqual(before);
    const control = (await sim.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path) && !DATA_PLANE.has(r.path));
    expect(control.map((r) => `${r.method} ${r.path}`), 'control calls reached the engine').toEqual([]);
    expect((await t.http('GET', '/health')).status).toBe(200);
    // Most routes were tried (each case picks one at random).
    expect(new Set(seen.map((s) => s.split(' → ')[0])).size).toBeGreaterThan(routes.length / 2);
  }, 600_000);
});
