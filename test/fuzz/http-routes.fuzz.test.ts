// Property: whatever a client sends to any route the gateway serves, the gateway never fails
// itself (no 5xx of its own: an upstream or overload code is the only 5xx allowed, or an engine's
// own answer when that engine gives the same request the same status), and input it refuses
// changes nothing — no worker added, removed or relabelled, no engine paused, refitted or called
// on a control route. Routes, methods and declared query parameters come from the gateway's own
// API document; bodies are random and hostile JSON or bytes under random content types; query
// parameters are random, repeated, or the declared ones with hostile values. Over a real gateway,
// nats-server and simulator; judged on the simulator's own state and request record.
// Slow bodies (a second property, over the write routes, on a gateway of its own with a 1 s body
// timeout): a body that stalls part-way, trickles slower than the timeout allows, or never ends
// its chunks gets one answer, 408 or an earlier 4xx refusal (415, 403, 413...), within the timeout
// + Node's one-second check + slack, and its connection is closed; never 2xx or 5xx, and nothing
// reaches the engine or changes the fleet.

import { connect } from 'node:net';
import fc from 'fast-check';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { FUZZ_RUNS, FUZZ_SEED, fuzzParams } from '../fixtures/fuzz.ts';
import { engineCalls, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

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
const DATA_PLANE = new Set(['/generate', '/v1/chat/completions', '/v1/completions', '/v1/loads', '/v1/tokenize', '/v1/detokenize']);

const hostileJson = fc.oneof(
  fc.jsonValue({ maxDepth: 6 }),
  fc.string({ unit: 'grapheme', maxLength: 300 }),
  fc.array(fc.oneof(fc.integer(), fc.double()), { maxLength: 1_000 }),
  fc.constant({ nested: JSON.parse('['.repeat(200) + ']'.repeat(200)) as unknown }),
  fc.dictionary(fc.string({ maxLength: 30 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 30 }),
  fc.record({ url: fc.oneof(fc.webUrl(), fc.string()), labels: fc.jsonValue({ maxDepth: 2 }), api_key: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] }),
  fc.record(
    { weight_version: fc.jsonValue({ maxDepth: 1 }), source: fc.jsonValue({ maxDepth: 2 }), selector: fc.jsonValue({ maxDepth: 1 }), dry_run: fc.boolean() },
    { requiredKeys: [] },
  ),
  fc.record({ control: fc.jsonValue({ maxDepth: 1 }), weight_version: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] }),
);
const body = fc.oneof(
  { weight: 6, arbitrary: hostileJson.map((v) => JSON.stringify(v) as string | Uint8Array | undefined) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => b as string | Uint8Array | undefined) },
  { weight: 2, arbitrary: fc.constant(undefined) },
);
const contentType = fc.constantFrom(
  undefined,
  'application/json',
  'application/json; charset=utf-8',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/merge-patch+json',
  'application/json; charset=latin1',
  '*/*',
);
const token = fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('', '..', '%00', '%2e%2e', 'role=actor', 'a&b=c', '\u2028', 'x'.repeat(3_000)));

/** Every route of the gateway's own API document, plus a preflight and a route that does not exist. */
async function routesOf(t: TestGateway): Promise<Route[]> {
  const doc = (await t.http('GET', '/openapi.json')).json as { paths: Record<string, Record<string, { parameters?: Array<{ name: string; in: string }> }>> };
  // The fleet's event stream never ends by design (test/refit/refit-events covers it).
  const endless = new Set(['/v1/rl/events']);
  const routes = Object.entries(doc.paths)
    .filter(([path]) => !endless.has(path))
    .flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([m]) => ['get', 'head', 'post', 'put', 'patch', 'delete'].includes(m))
        .map(([m, op]) => ({ method: m.toUpperCase() as Method, path, query: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name) })),
    );
  routes.push({ method: 'OPTIONS', path: '/v1/rl/refits', query: [] }, { method: 'POST', path: '/no/such/{route}', query: [] });
  return routes;
}

/** What a refused request must not change: the registry as listed, and the engine's own state. */
async function fleetFacts(t: TestGateway, sim: SimProcess) {
  const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<Record<string, unknown>>;
  const st = await sim.state();
  return {
    workers: rows.map((r) => ({ id: r.id, url: r.url, labels: r.labels, weight_version: r.weight_version, control: r.control, quarantined: r.quarantined })),
    paused: st.paused,
    weightVersion: st.weightVersion,
  };
}

/** Paths the gateway reads on its own (probes, discovery): never what a request was routed as. */
const PROBE_PATHS = new Set(['/health', '/ready', '/model_info', '/get_model_info', '/server_info', '/get_server_info']);

/**
 * The status the engine itself gives the last request routed to it since `since` (epoch ms), sent
 * to it again as it recorded it (no fault is set: the simulator answers the same request the same
 * way); null when no request reached it.
 */
async function engineAnswer(sim: SimProcess, since: number): Promise<number | null> {
  const from = new Date(since).toISOString();
  const routed = (await sim.requests()).filter((r) => r.time >= from && !PROBE_PATHS.has(r.path)).at(-1);
  if (!routed) return null;
  const contentType = routed.headers['content-type'];
  const res = await request(`${sim.url}${routed.path}${routed.query ? `?${routed.query}` : ''}`, {
    method: routed.method as 'GET',
    headers: contentType ? { 'content-type': contentType } : {},
    body: routed.bodyBytes > 0 ? routed.body : undefined,
  });
  await res.body.dump();
  return res.statusCode;
}

/** A route template with its `{param}` placeholders filled from `params`, each percent-encoded. */
function fillPath(template: string, params: string[]): string {
  let i = 0;
  return template.replace(/\{[^}]+\}/g, () => encodeURIComponent(params[i++ % params.length]!));
}

describe('HTTP routes under random requests', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let routes: Route[];

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    await t.register([sim.url]);
    routes = await routesOf(t);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it("no 5xx of the gateway's own, and refused input changes nothing", async () => {
    const before = await fleetFacts(t, sim);
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
        const path = fillPath(c.route.path, c.params);
        const q = new URLSearchParams();
        for (const [n, v] of c.declared) if (c.route.query.length) q.append(c.route.query[n % c.route.query.length]!, v);
        for (const [k, v] of c.extra) q.append(k, v);
        if (c.repeat && c.route.query.length) q.append(c.route.query[0]!, 'again');
        const url = `${t.url}${path}${q.size ? `?${q}` : ''}`;
        const headers: Record<string, string> = {};
        if (c.contentType) headers['content-type'] = c.contentType;
        const sendsBody = c.body !== undefined && !['GET', 'HEAD'].includes(c.route.method);
        const started = Date.now();
        if (process.env.RLGATE_FUZZ_TRACE)
          process.stderr.write(
            `[fuzz] > ${c.route.method} ${url.slice(0, 200)} ct=${c.contentType} body=${sendsBody ? (typeof c.body === 'string' ? c.body.length : c.body!.length) : '-'}\n`,
          );
        const res = await request(url, { method: c.route.method, headers, body: sendsBody ? c.body : undefined, headersTimeout: 15_000, bodyTimeout: 15_000 });
        // An event stream (a path that normalises to /v1/rl/events, a refit's events) does not end
        // by itself: its 200 and headers are the answer.
        const streaming = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
        if (streaming) res.body.destroy();
        const text = streaming ? '' : await res.body.text();
        if (process.env.RLGATE_FUZZ_TRACE)
          process.stderr.write(`[fuzz] ${Date.now() - started} ms ${c.route.method} ${url.slice(0, 200)} → ${res.statusCode}\n`);
        seen.push(`${c.route.method} ${c.route.path} → ${res.statusCode}`);
        if (res.statusCode >= 500) {
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: string }).error;
          } catch {
            code = undefined;
          }
          const what = `${c.route.method} ${url.slice(0, 300)} (${c.contentType}) → ${res.statusCode} ${text.slice(0, 300)}`;
          // A worker named on the answer excuses it only if that engine answers the same: its own
          // answer passed on, not the gateway's own failure after routing.
          if (res.headers['x-smg-routed-worker-id'] !== undefined && !UPSTREAM_CODES.has(code ?? '')) {
            expect(await engineAnswer(sim, started), `${what}: the engine's own answer`).toBe(res.statusCode);
          } else expect(UPSTREAM_CODES.has(code ?? ''), what).toBe(true);
        }
      }),
      fuzzParams('HTTP routes', routes.length),
    );
    // Nothing a random request could do legitimately changes the fleet: every id and URL it names
    // is random, and no random body is a valid registration, write or refit.
    expect(await fleetFacts(t, sim)).toEqual(before);
    const control = (await engineCalls(sim)).filter((r) => !DATA_PLANE.has(r.path));
    expect(
      control.map((r) => `${r.method} ${r.path}`),
      'control calls reached the engine',
    ).toEqual([]);
    expect((await t.http('GET', '/health')).status).toBe(200);
    // Most routes were tried (each case picks one at random).
    expect(new Set(seen.map((s) => s.split(' → ')[0])).size).toBeGreaterThan(routes.length / 2);
  }, 600_000);
});

/** The slow-body gateway's timeouts (Node refuses a header timeout past the body's; 1 s is the least). */
const SLOW_TIMEOUT_MS = 1_000;
/** Node looks for late requests once a second (src/http/bounds.ts). */
const CHECK_INTERVAL_MS = 1_000;
/** How late past timeout + check an answer or close may come: generous, for a loaded CI machine. */
const SLOW_SLACK_MS = 3_000;
/** A trickling body sends one byte per tick; bodies are padded so that trickling takes far longer than the timeout. */
const TRICKLE_MS = 250;
const MIN_SLOW_BODY = 24;
/**
 * How many slow-body cases run: each waits one to two seconds for the timeout, so they are a
 * twenty-fifth of the other property's count per route (2 per write route in `npm test`: about 150
 * cases, some 6 s), and at most SLOW_BODY_CAP in all (under `npm run fuzz`, 400 per route would be
 * about 28,000 cases; 2,000 take under two minutes). Each property run sends a batch of SLOW_BATCH
 * at once, so their waits overlap.
 */
const SLOW_BODY_SHARE = 25;
const SLOW_BODY_CAP = 2_000;
const SLOW_BATCH = 50;

type SlowMode = 'stall' | 'trickle' | 'chunked';
interface SlowBody {
  route: Route;
  params: string[];
  body: Buffer;
  contentType: string | undefined;
  origin: string | undefined;
  mode: SlowMode;
  /** Where a stall stops, as a share of the body. */
  cut: number;
  /** Bytes declared past the body (stall): the rest of the request never comes. */
  extra: number;
}

interface SlowAnswer {
  status: number | null;
  /** From the first byte sent to the first byte of the answer. */
  answeredAfterMs: number | null;
  closedAfterMs: number;
  /** Bytes after the first answer's end: a second answer on the same connection. */
  trailing: number;
  head: string;
}

/** Sends one request whose body never fully arrives, and reads what comes back until the gateway closes. */
function sendSlowBody(port: number, path: string, c: SlowBody): Promise<SlowAnswer> {
  const body = c.body.length >= MIN_SLOW_BODY ? c.body : Buffer.concat([c.body, Buffer.alloc(MIN_SLOW_BODY - c.body.length, 0x20)]);
  const n = body.length;
  const lines = [`${c.route.method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  if (c.contentType !== undefined) lines.push(`Content-Type: ${c.contentType}`);
  if (c.origin !== undefined) lines.push(`Origin: ${c.origin}`);
  let first: Buffer;
  let drip: Buffer | undefined;
  if (c.mode === 'chunked') {
    // One chunk, then neither the next one nor the terminating empty chunk.
    const k = Math.max(1, Math.floor(c.cut * n));
    lines.push('Transfer-Encoding: chunked');
    first = Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n${k.toString(16)}\r\n`, 'latin1'), body.subarray(0, k), Buffer.from('\r\n')]);
  } else if (c.mode === 'trickle') {
    lines.push(`Content-Length: ${n}`);
    first = Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body.subarray(0, 1)]);
    drip = body.subarray(1);
  } else {
    // Part of the body, or all of it under a length that declares more: the rest never comes.
    const k = c.extra > 0 ? Math.floor(c.cut * (n + 1)) : Math.min(n - 1, Math.floor(c.cut * n));
    lines.push(`Content-Length: ${n + c.extra}`);
    first = Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body.subarray(0, k)]);
  }
  return new Promise((resolve) => {
    let started = 0;
    let answeredAt: number | null = null;
    let timer: NodeJS.Timeout | undefined;
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => {
      started = Date.now();
      socket.write(first);
      if (drip) {
        let at = 0;
        timer = setInterval(() => {
          if (at < drip.length && !socket.destroyed) socket.write(drip.subarray(at, ++at));
        }, TRICKLE_MS);
      }
    });
    // Never left open: past any bound the test fails on the close time.
    const giveUp = setTimeout(() => socket.destroy(), SLOW_TIMEOUT_MS + CHECK_INTERVAL_MS + SLOW_SLACK_MS + 10_000);
    socket.on('data', (d: Buffer) => {
      answeredAt ??= Date.now();
      chunks.push(d);
      clearInterval(timer);
    });
    // A reset (the gateway closed while bytes were still coming) ends here too.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      const raw = Buffer.concat(chunks);
      const text = raw.toString('latin1');
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      const headEnd = text.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, headEnd));
      const trailing = headEnd >= 0 && length ? raw.length - (headEnd + 4 + Number(length[1])) : 0;
      resolve({
        status: status ? Number(status[1]) : null,
        answeredAfterMs: answeredAt === null ? null : answeredAt - started,
        closedAfterMs: Date.now() - started,
        trailing,
        head: text.slice(0, Math.max(0, headEnd)).split('\r\n')[0] ?? '',
      });
    });
  });
}

describe('HTTP write routes under slow bodies', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let writes: Route[];

  beforeAll(async () => {
    [sim, t] = await Promise.all([
      spawnSglangSim(['--token-rate', '0']),
      startTestGateway({ requestBodyTimeoutSecs: SLOW_TIMEOUT_MS / 1000, requestHeaderTimeoutSecs: SLOW_TIMEOUT_MS / 1000 }),
    ]);
    await t.register([sim.url]);
    writes = (await routesOf(t)).filter((r) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(r.method));
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('a body that stalls or trickles past the body timeout gets one 4xx (408, or an earlier refusal) in time, never 2xx or 5xx, and changes nothing', async () => {
    const before = await fleetFacts(t, sim);
    await sim.clearRequests();
    const port = Number(new URL(t.url).port);
    const slowCase: fc.Arbitrary<SlowBody> = fc.record({
      route: fc.constantFrom(...writes),
      params: fc.array(token, { minLength: 4, maxLength: 4 }),
      body: fc.oneof(
        { weight: 6, arbitrary: hostileJson.map((v) => Buffer.from(JSON.stringify(v) ?? '')) },
        { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)) },
      ),
      // Mostly JSON, which the write guard lets through to the body read; the rest are refused earlier.
      contentType: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8') },
        { weight: 1, arbitrary: contentType },
      ),
      origin: fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('https://elsewhere.example', 'null') }),
      mode: fc.constantFrom<SlowMode>('stall', 'trickle', 'chunked'),
      cut: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      extra: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 1_000 }), fc.integer({ min: 1, max: 2 ** 31 })),
    });
    const total = Math.min(SLOW_BODY_CAP, Math.max(1, Math.ceil(FUZZ_RUNS / SLOW_BODY_SHARE)) * writes.length);
    const numRuns = Math.ceil(total / SLOW_BATCH);
    process.stdout.write(
      `[fuzz] HTTP slow bodies: ${numRuns * SLOW_BATCH} cases in ${numRuns} runs of ${SLOW_BATCH} at once (${writes.length} write routes), seed ${FUZZ_SEED} (RLGATE_FUZZ_SEED to replay)\n`,
    );
    const bound = SLOW_TIMEOUT_MS + CHECK_INTERVAL_MS + SLOW_SLACK_MS;
    const statuses = new Map<number | null, number>();
    await fc.assert(
      fc.asyncProperty(fc.array(slowCase, { minLength: SLOW_BATCH, maxLength: SLOW_BATCH }), async (batch) => {
        const answers = await Promise.all(batch.map((c) => sendSlowBody(port, fillPath(c.route.path, c.params), c)));
        batch.forEach((c, i) => {
          const a = answers[i]!;
          statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
          const what = `${c.route.method} ${c.route.path} ${c.mode} (ct=${c.contentType}, origin=${c.origin}, ${c.body.length} bytes, cut ${c.cut.toFixed(2)}, extra ${c.extra}) → ${a.head || 'no answer'} after ${a.answeredAfterMs} ms, closed after ${a.closedAfterMs} ms`;
          expect(a.status, what).not.toBeNull();
          // An incomplete request is never acted on, and the gateway never fails on one.
          expect(a.status! >= 400 && a.status! < 500, what).toBe(true);
          expect(a.answeredAfterMs!, what).toBeLessThanOrEqual(bound);
          // A 408 is not given before the timeout (Node counts from the request's first byte).
          if (a.status === 408) expect(a.answeredAfterMs!, what).toBeGreaterThanOrEqual(SLOW_TIMEOUT_MS - 100);
          // One answer per request: an early refusal is not followed by a late 408.
          expect(a.trailing, `${what}: bytes after the answer`).toBe(0);
          // The connection is closed, not left holding the rest of a request that never comes.
          expect(a.closedAfterMs, what).toBeLessThanOrEqual(bound);
        });
      }),
      { numRuns, seed: FUZZ_SEED, endOnFailure: true },
    );
    process.stdout.write(`[fuzz] HTTP slow bodies: statuses ${JSON.stringify(Object.fromEntries(statuses))}\n`);
    // No body was ever complete: nothing reached the engine, data plane included, and nothing changed.
    expect(await fleetFacts(t, sim)).toEqual(before);
    const reached = await engineCalls(sim);
    expect(
      reached.map((r) => `${r.method} ${r.path}`),
      'slow requests reached the engine',
    ).toEqual([]);
    expect((await t.http('GET', '/health')).status).toBe(200);
    // Both kinds of answer were seen: the 408 and an earlier refusal.
    expect(statuses.get(408) ?? 0).toBeGreaterThan(0);
  }, 1_800_000);
});
