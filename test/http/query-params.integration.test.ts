// Query parameters over a real gateway, nats-server and SGLang simulators (issue 11, item 3):
// every route that declares a query parameter refuses it repeated, or malformed, with 400
// `invalid_request` naming it, calls no engine and changes nothing; the engine pass-through keeps
// forwarding the parameters that are not the gateway's, duplicates included. The routes are read
// from the gateway's own API document, so a route that gains a query parameter is covered.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';

interface QueryParam {
  name: string;
  in: string;
  required?: boolean;
}
interface Operation {
  parameters?: QueryParam[];
  responses: Record<string, { description?: string }>;
}

const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete'] as const;

async function engineCalls(sim: SimProcess): Promise<SimRequest[]> {
  return (await sim.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path));
}

describe('query parameters (2 sglang engines, one spare)', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let spare: SimProcess;
  let ids: string[];

  beforeAll(async () => {
    [spare, ...sims] = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([spare, ...(sims ?? [])].filter(Boolean).map((s) => s.stop()));
  });

  /** What could change: the gateway's rows and worker list, and each engine's own state. */
  async function snapshot() {
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers.map((r: Record<string, unknown>) => [r.id, r.url, r.control, r.weight_version, r.labels]);
    const workers = (await t.http('GET', '/list_workers')).json.urls;
    const engines = await Promise.all(
      [spare, ...sims].map(async (s) => {
        const st = await s.state();
        return [st.paused, st.weightVersion];
      }),
    );
    return { rows, workers, engines };
  }

  /** A value each parameter takes when it is valid; one the gateway does not know fails the test. */
  function validValue(name: string, path: string): string {
    if (name === 'selector') return 'worker_type=regular';
    // Adding the spare would change the fleet; removing a registered engine too.
    if (name === 'url') return path === '/add_worker' ? spare.url : sims[0]!.url;
    if (name === 'timeout_secs') return '1';
    // The listings' paging: a page size, and a cursor as a listing gives one (a sort key).
    if (name === 'limit') return '1';
    if (name === 'cursor') return Buffer.from(JSON.stringify(['http://127.0.0.1'])).toString('base64url');
    throw new Error(`no sample value for query parameter ${name} of ${path}: add one`);
  }

  const concrete = (template: string) => template.replace('{*}', 'pause_generation').replace('{id}', ids[0]!);
  const bodyFor = (path: string) => (path.endsWith('/state') ? { control: 'paused' } : path.endsWith('/version') ? { weight_version: 'query-test' } : {});

  it('every route that declares a query parameter refuses it repeated with 400 naming it, documents that, and changes nothing', async () => {
    const doc = (await t.http('GET', '/openapi.json')).json as { paths: Record<string, Partial<Record<string, Operation>>> };
    const before = await snapshot();
    await Promise.all([spare, ...sims].map((s) => s.clearRequests()));
    const covered: string[] = [];
    for (const [template, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) {
        const op = item[method];
        const params = (op?.parameters ?? []).filter((p) => p.in === 'query');
        if (!op || params.length === 0) continue;
        expect(op.responses['400']?.description, `${method} ${template} documents 400 invalid_request`).toContain('`invalid_request`');
        const path = concrete(template);
        for (const p of params) {
          const query = new URLSearchParams();
          for (const q of params) if (q.required && q.name !== p.name) query.append(q.name, validValue(q.name, template));
          query.append(p.name, validValue(p.name, template));
          query.append(p.name, validValue(p.name, template));
          const where = `${method.toUpperCase()} ${path}?${query}`;
          const res = await t.http(method.toUpperCase(), `${path}?${query}`, method === 'post' ? { body: bodyFor(path) } : {});
          expect(res.status, where).toBe(400);
          if (method !== 'head') expect(res.json, where).toMatchObject({ error: 'invalid_request', parameter: p.name });
          covered.push(`${method.toUpperCase()} ${template} ${p.name}`);
        }
      }
    }
    // The routes the issue names are among them (the list above comes from the document).
    expect(covered).toEqual(
      expect.arrayContaining([
        'POST /v1/rl/state selector',
        'POST /v1/rl/version selector',
        'GET /v1/rl/engine/{*} selector',
        'HEAD /v1/rl/engine/{*} selector',
        'POST /v1/rl/engine/{*} selector',
        'POST /add_worker url',
        'POST /add_worker timeout_secs',
        'POST /remove_worker url',
      ]),
    );
    for (const s of [spare, ...sims]) expect(await engineCalls(s), s.url).toEqual([]);
    expect(await snapshot()).toEqual(before);
  });

  it('a repeated selector on a pause fan-out pauses no engine, even when it is spelled encoded', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    for (const query of ['selector=engine%3Dsglang&selector=id%3Dnone', 'sel%65ctor=engine%3Dsglang&selector=engine%3Dsglang']) {
      const res = await t.http('POST', `/v1/rl/engine/pause_generation?${query}`, { body: {} });
      expect(res.status, query).toBe(400);
      expect(res.json, query).toMatchObject({ error: 'invalid_request', parameter: 'selector' });
    }
    for (const s of sims) {
      expect(await engineCalls(s), s.url).toEqual([]);
      expect((await s.state()).paused, s.url).toBeNull();
    }
  });

  it('a malformed parameter is a 400 naming it: a timeout that is not an integer in range, a selector that does not parse', async () => {
    const before = await snapshot();
    for (const timeout of ['abc', '1.5', '0', '99999', '']) {
      const res = await t.http('POST', `/add_worker?url=${encodeURIComponent(spare.url)}&timeout_secs=${timeout}`);
      expect(res.status, timeout).toBe(400);
      expect(res.json, timeout).toMatchObject({ error: 'invalid_request', parameter: 'timeout_secs' });
    }
    const bad = await t.http('POST', '/v1/rl/state?selector=engine%3D%3D', { body: { control: 'paused' } });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toBe('invalid_selector');
    expect(await snapshot()).toEqual(before);
  });

  it("the pass-through forwards the parameters that are not the gateway's, repeated ones included", async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const fan = await t.http('GET', '/v1/rl/engine/get_load?selector=engine%3Dsglang&a=1&a=2&b=x');
    expect(fan.status).toBe(200);
    expect(fan.json).toMatchObject({ total: 2, succeeded: 2 });
    for (const s of sims) {
      const calls = await engineCalls(s);
      expect(
        calls.map((c) => [c.path, c.query]),
        s.url,
      ).toEqual([['/get_load', 'a=1&a=2&b=x']]);
    }

    // One worker's route reads no parameter (a `selector` there is dropped, never forwarded): the
    // engine's own ones go as sent.
    await Promise.all(sims.map((s) => s.clearRequests()));
    const one = await t.http('GET', `/v1/rl/workers/${ids[0]}/engine/get_load?selector=a&selector=b&a=1&a=2`);
    expect(one.status).toBe(200);
    expect((await engineCalls(sims[0]!)).map((c) => [c.path, c.query])).toEqual([['/get_load', 'a=1&a=2']]);
    expect(await engineCalls(sims[1]!)).toEqual([]);
  });

  it('a parameter given once still works on every route that takes one', async () => {
    const state = await t.http('POST', '/v1/rl/state?selector=engine%3Dsglang', { body: { control: 'active' } });
    expect(state.status).toBe(200);
    expect(state.json.total).toBe(2);
    const added = await t.http('POST', `/add_worker?url=${encodeURIComponent(spare.url)}&timeout_secs=30`);
    expect(added.status).toBe(200);
    const removed = await t.http('POST', `/remove_worker?url=${encodeURIComponent(spare.url)}`);
    expect(removed.status).toBe(200);
    expect((await t.http('GET', '/list_workers')).json.urls).not.toContain(spare.url);
  });
});
