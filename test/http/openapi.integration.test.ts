// The API document (GET /openapi.json, OpenAPI 3.1) against a real gateway, nats-server and SGLang
// simulators: every route the gateway registered is in it with each of its methods, real answers
// of the data plane, the /v1/rl routes and the refit transaction (200, 202, 207 and errors)
// validate against the schema the document gives their status, and Swagger UI at /docs renders
// the document in Debian's chromium with every request outside the gateway refused.

import { readFileSync, existsSync } from 'node:fs';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { chromium } from 'playwright-core';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { startTestGateway, type HttpAnswer, type HttpOpts, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const CHROMIUM = '/usr/lib/chromium/chromium';
const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any -- the document is read as plain JSON

/** `/v1/rl/workers/:id/engine/*` → `/v1/rl/workers/{id}/engine/{*}`, as @fastify/swagger writes paths. */
function openApiPath(url: string): string {
  return url.replace(/:(\w+)/g, '{$1}').replace(/\*/g, '{*}');
}

/** A copy of `schema` with every `#/components/...` reference replaced by what it points at. */
function resolveRefs(schema: Json, doc: Json, depth = 0): Json {
  if (depth > 50) throw new Error('reference cycle in the document');
  if (Array.isArray(schema)) return schema.map((s) => resolveRefs(s, doc, depth + 1));
  if (schema === null || typeof schema !== 'object') return schema;
  if (typeof schema.$ref === 'string') {
    expect(schema.$ref, 'only local references').toMatch(/^#\//);
    const target = schema.$ref
      .slice(2)
      .split('/')
      .reduce((node: Json, key: string) => node?.[key], doc);
    expect(target, `reference ${schema.$ref}`).toBeDefined();
    return resolveRefs(target, doc, depth + 1);
  }
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, resolveRefs(v, doc, depth + 1)]));
}

/** Each route as fastify registered it, from an onRoute hook on the gateway's app. */
interface SeenRoute {
  method: string | string[];
  url: string;
  handler: unknown;
}

describe('API document', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];
  let routes: SeenRoute[];
  let doc: Json;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0', '--model', 'MODEL'])));
    // fastify announces each instance on this channel before any plugin runs: the hook sees
    // every route the gateway's app registers, whoever registers it.
    const seen = new Map<FastifyInstance, SeenRoute[]>();
    const onInstance = (message: unknown) => {
      const { fastify } = message as { fastify: FastifyInstance };
      const list: SeenRoute[] = [];
      seen.set(fastify, list);
      fastify.addHook('onRoute', (r: RouteOptions) => {
        list.push({ method: Array.isArray(r.method) ? [...r.method] : r.method, url: r.url, handler: r.handler });
      });
    };
    subscribe('fastify.initialization', onInstance);
    try {
      t = await startTestGateway();
    } finally {
      unsubscribe('fastify.initialization', onInstance);
    }
    routes = seen.get(t.gw.app) ?? [];
    ids = await t.register([
      { url: sims[0]!.url, labels: { pool: 'a' } },
      { url: sims[1]!.url, labels: { pool: 'a' } },
      { url: sims[2]!.url, labels: { pool: 'b' } },
    ]);
    const res = await t.http('GET', '/openapi.json');
    expect(res.status).toBe(200);
    doc = res.json;
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  /** Sends the request, then validates the answer against the schema the document gives its status and content type. */
  async function documented(method: string, template: string, path: string, opts?: HttpOpts): Promise<HttpAnswer> {
    const res = await t.http(method, path, opts);
    const op = doc.paths[template]?.[method.toLowerCase()];
    expect(op, `${method} ${template} in the document`).toBeDefined();
    const responses = op.responses;
    const response = responses[String(res.status)] ?? responses[`${String(res.status)[0]}XX`] ?? responses.default;
    expect(response, `${method} ${path} answered ${res.status}, which ${method} ${template} does not document`).toBeDefined();
    const media = String(res.headers['content-type'] ?? '')
      .split(';')[0]!
      .trim();
    const content = response.content?.[media];
    expect(content, `${method} ${path} ${res.status}: content type ${media} not documented`).toBeDefined();
    const validate = ajv.compile(resolveRefs(content.schema, doc));
    const body = media === 'application/json' ? res.json : res.text;
    expect(validate(body), `${method} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}\n${res.text.slice(0, 2000)}`).toBe(true);
    for (const header of Object.keys(response.headers ?? {})) {
      if (res.status === 405) expect(res.headers[header], `${header} header of ${method} ${path}`).toBeDefined();
    }
    return res;
  }

  it('is OpenAPI 3.1 named rlgate, at the package version', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info).toMatchObject({ title: 'rlgate', version: VERSION });
  });

  it('has every route the gateway registered, with each of its methods, tags, a summary and its answers', () => {
    expect(routes.length).toBeGreaterThan(20);
    const getHandlers = new Map(routes.filter((r) => [r.method].flat().includes('GET')).map((r) => [r.url, r.handler]));
    const missing: string[] = [];
    let checked = 0;
    for (const route of routes) {
      // The viewer's own routes and the document itself are not part of the API.
      if (route.url === '/openapi.json' || route.url === '/docs' || route.url.startsWith('/docs/')) continue;
      // fastify's HEAD twin of a GET route (same handler) adds nothing to the document.
      if (route.method === 'HEAD' && getHandlers.get(route.url) === route.handler) continue;
      for (const method of [route.method].flat()) {
        checked++;
        const op = doc.paths[openApiPath(route.url)]?.[method.toLowerCase()];
        if (!op) {
          missing.push(`${method} ${route.url}: not in the document`);
          continue;
        }
        if (!op.tags?.length || !op.summary) missing.push(`${method} ${route.url}: no tags or summary`);
        // Without a response schema, @fastify/swagger writes one `Default Response` without content.
        const answers = Object.values<Json>(op.responses ?? {});
        if (answers.every((a) => !a.content && a.description === 'Default Response')) missing.push(`${method} ${route.url}: answers not declared`);
        // The write guard refuses a browser origin not allowed (403) and a body not JSON (415) on every write.
        if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(method)) {
          for (const [status, code] of [
            ['403', 'origin_not_allowed'],
            ['415', 'unsupported_media_type'],
          ]) {
            if (!String(op.responses?.[status]?.description ?? '').includes(`\`${code}\``))
              missing.push(`${method} ${route.url}: ${status} ${code} not documented`);
          }
        }
      }
    }
    expect(missing).toEqual([]);
    expect(checked).toBeGreaterThan(40);
    // The document names nothing the gateway does not serve.
    expect(doc.paths['/openapi.json']).toBeUndefined();
  });

  it('data plane: /health, /liveness, /readiness, /metrics, /workers (202 too), /generate, a chat completion and the tokenizer routes answer what the document says', async () => {
    await documented('GET', '/health', '/health');
    await documented('GET', '/liveness', '/liveness');
    await documented('GET', '/readiness', '/readiness');
    await documented('GET', '/metrics', '/metrics');
    const listing = await documented('GET', '/workers', '/workers');
    expect(listing.status).toBe(200);
    expect(listing.json.total).toBe(3);
    const again = await documented('POST', '/workers', '/workers', { body: { url: sims[0]!.url, labels: { pool: 'a' } } });
    expect(again.status).toBe(202);
    expect(again.json.id).toBe(ids[0]);
    expect((await documented('GET', '/workers/{id}', `/workers/${ids[0]}`)).status).toBe(200);
    const gen = await documented('POST', '/generate', '/generate', { body: { text: 'Hello', sampling_params: { max_new_tokens: 4 } } });
    expect(gen.status).toBe(200);
    expect(gen.json.meta_info).toBeDefined();
    const chat = await documented('POST', '/v1/chat/completions', '/v1/chat/completions', {
      body: { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 },
    });
    expect(chat.status).toBe(200);
    const tok = await documented('POST', '/v1/tokenize', '/v1/tokenize', { body: { prompt: ['Hi', 'there'] } });
    expect(tok.status).toBe(200);
    expect((await documented('POST', '/v1/detokenize', '/v1/detokenize', { body: { tokens: tok.json.tokens } })).json.text).toEqual(['Hi', 'there']);
  });

  it('/v1/rl rows, a state write, a per-worker call and a fan-out answer what the document says', async () => {
    const rows = await documented('GET', '/v1/rl/workers', '/v1/rl/workers');
    expect(rows.status).toBe(200);
    expect(rows.json.workers).toHaveLength(3);
    expect((await documented('GET', '/v1/rl/workers/{id}', `/v1/rl/workers/${ids[0]}`)).json.id).toBe(ids[0]);
    expect((await documented('POST', '/v1/rl/workers/{id}/state', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'active' } })).status).toBe(200);
    const one = await documented('GET', '/v1/rl/workers/{id}/engine/{*}', `/v1/rl/workers/${ids[0]}/engine/server_info`);
    expect(one.status).toBe(200);
    expect(one.json.status).toBe(200);
    const fan = await documented('GET', '/v1/rl/engine/{*}', '/v1/rl/engine/server_info?selector=pool%3Da');
    expect(fan.status).toBe(200);
    expect(fan.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
  });

  it('refits: a dry run, a 200 report, a 207 report, one refit and the listing answer what the document says', async () => {
    const request = (v: string) => ({ weight_version: v, selector: 'pool=a', source: { kind: 'disk', model_path: `/models/openapi-${v}` } });
    const plan = await documented('POST', '/v1/rl/refits', '/v1/rl/refits', { body: { ...request('1'), dry_run: true } });
    expect(plan.status).toBe(200);
    expect(plan.json.dry_run).toBe(true);

    const ok = await documented('POST', '/v1/rl/refits', '/v1/rl/refits', { body: request('1') });
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ status: 'succeeded', total: 2, succeeded: 2 });
    expect((await documented('GET', '/v1/rl/refits/{id}', `/v1/rl/refits/${ok.json.id}`)).json.id).toBe(ok.json.id);

    await sims[1]!.setFaults({ route: 'update_weights_from_disk', status: 500, times: 1 });
    const partial = await documented('POST', '/v1/rl/refits', '/v1/rl/refits', { body: request('2') });
    expect(partial.status).toBe(207);
    expect(partial.json).toMatchObject({ status: 'partial', succeeded: 1 });
    expect(partial.json.failed).toHaveLength(1);

    const list = await documented('GET', '/v1/rl/refits', '/v1/rl/refits');
    expect(list.json.refits.map((r: { id: string }) => r.id)).toEqual(expect.arrayContaining([ok.json.id, partial.json.id]));
  });

  it('errors (400, 403, 404, 405, 415) are the documented envelope, and a fan-out with one engine dead is a documented 207', async () => {
    const cases: Array<[string, string, string, number, string, HttpOpts?]> = [
      ['GET', '/v1/rl/workers/{id}', '/v1/rl/workers/no-such-worker', 404, 'worker_not_found'],
      ['GET', '/workers/{id}', '/workers/no-such-worker', 404, 'worker_not_found'],
      ['GET', '/v1/rl/workers/{id}/engine/{*}', '/v1/rl/workers/no-such-worker/engine/server_info', 404, 'worker_not_found'],
      ['GET', '/v1/rl/engine/{*}', '/v1/rl/engine/server_info?selector=engine%3D%3D', 400, 'invalid_selector'],
      ['GET', '/v1/rl/refits/{id}', '/v1/rl/refits/no-such-refit', 404, 'refit_not_found'],
      ['POST', '/workers', '/workers', 400, 'invalid_request', { body: { url: sims[0]!.url, labels: { a: 1 } } }],
      ['POST', '/v1/rl/refits', '/v1/rl/refits', 400, 'invalid_request', { body: { weight_version: 'x' } }],
      ['PUT', '/v1/rl/refits', '/v1/rl/refits', 405, 'method_not_allowed'],
      ['POST', '/v1/rl/refits', '/v1/rl/refits', 415, 'unsupported_media_type', { raw: '{}', headers: { 'content-type': 'text/plain' } }],
      ['POST', '/workers', '/workers', 403, 'origin_not_allowed', { body: { url: sims[0]!.url }, headers: { origin: 'https://elsewhere.example' } }],
      ['DELETE', '/v1/rl/engine/{*}', '/v1/rl/engine/flush_cache', 405, 'method_not_allowed'],
      ['DELETE', '/workers/{id}', `/workers/${encodeURIComponent('http://127.0.0.1:1')}`, 404, 'worker_not_found'],
      ['POST', '/v1/tokenize', '/v1/tokenize', 400, 'invalid_request', { body: { prompt: 1 } }],
      ['POST', '/v1/detokenize', '/v1/detokenize', 404, 'model_not_found', { body: { model: 'nope', tokens: [1] } }],
    ];
    for (const [method, template, path, status, error, opts] of cases) {
      const res = await documented(method, template, path, opts);
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(res.json.error, `${method} ${path}`).toBe(error);
    }

    await sims[2]!.kill();
    const fan = await documented('GET', '/v1/rl/engine/{*}', '/v1/rl/engine/server_info?selector=worker_type%3Dregular');
    expect(fan.status).toBe(207);
    expect(fan.json.failed.map((f: { worker_id: string }) => f.worker_id)).toEqual([ids[2]]);
  });

  it('/docs is Swagger UI showing the document, loaded from the gateway alone', async () => {
    const page = await t.http('GET', '/docs');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);

    expect(existsSync(CHROMIUM), `no browser at ${CHROMIUM} (Debian package chromium)`).toBe(true);
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--disable-background-networking', '--disable-component-update', '--no-first-run'],
    });
    try {
      const context = await browser.newContext();
      const outside: string[] = [];
      const origin = new URL(t.url).origin;
      // Anything not served by the gateway is refused and recorded: the page must not need it.
      await context.route('**/*', (route) => {
        const url = route.request().url();
        if (url.startsWith(`${origin}/`) || url.startsWith('data:')) return route.continue();
        outside.push(url);
        return route.abort();
      });
      const tab = await context.newPage();
      const errors: Error[] = [];
      tab.on('pageerror', (e) => errors.push(e));
      await tab.goto(`${t.url}/docs`);
      // Swagger UI draws one block per operation once it has loaded and parsed the document.
      await tab.locator('.opblock').first().waitFor({ timeout: 30_000 });
      expect(await tab.locator('.opblock').count()).toBeGreaterThan(40);
      await expect.poll(() => tab.locator('.info .title').textContent()).toContain('rlgate');
      expect(outside).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
