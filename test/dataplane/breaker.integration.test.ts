// The engine actor's data-plane breaker region, observed through real traffic: 5xx answers trip
// only the failing engine's breaker, 4xx answers trip none, an open breaker takes the engine out
// of routing, and after the cool-down one good answer closes it again.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const gen = { text: 'hi', sampling_params: { max_new_tokens: 1 } };

describe('data-plane breaker', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let rowsByUrl: () => Promise<Record<string, { breaker: string }>>;

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway({ breakerThreshold: 3, breakerCooldownSecs: 1, probeIntervalSecs: 0 });
    await t.register(sims.map((s) => s.url));
    rowsByUrl = async () => Object.fromEntries((await t.http('GET', '/v1/rl/workers')).json.workers.map((w: { url: string }) => [w.url, w]));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('4xx bursts trip no breaker', async () => {
    for (const s of sims) await s.setFaults({ route: 'generate', status: 400, body: { error: { message: 'bad request' } } });
    for (let i = 0; i < 10; i++) expect((await t.http('POST', '/generate', { body: gen })).status).toBe(400);
    const rows = await rowsByUrl();
    for (const s of sims) expect(rows[s.url]!.breaker).toBe('closed');
    for (const s of sims) await s.clearFaults();
  });

  it('500s trip only the failing engine, which then receives no traffic until it recovers', async () => {
    const [bad, good] = sims as [SimProcess, SimProcess];
    await bad.setFaults({ route: 'generate', status: 500, body: { error: { message: 'boom' } } });
    for (let i = 0; i < 10; i++) await t.http('POST', '/generate', { body: gen });
    let rows = await rowsByUrl();
    expect(rows[bad.url]!.breaker).toBe('open');
    expect(rows[good.url]!.breaker).toBe('closed');

    await bad.clearRequests();
    for (let i = 0; i < 6; i++) {
      const r = await t.http('POST', '/generate', { body: gen });
      expect(r.status).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(good.url);
    }
    expect((await bad.requests()).filter((r) => r.path === '/generate')).toHaveLength(0);

    // Cool-down → half-open; the engine is healthy again, one success closes the breaker.
    await bad.clearFaults();
    const until = Date.now() + 10_000;
    while ((await rowsByUrl())[bad.url]!.breaker === 'open' && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    rows = await rowsByUrl();
    expect(rows[bad.url]!.breaker).toBe('half_open');
    for (let i = 0; i < 6; i++) expect((await t.http('POST', '/generate', { body: gen })).status).toBe(200);
    rows = await rowsByUrl();
    expect(rows[bad.url]!.breaker).toBe('closed');
  });
});

describe('callers that go away', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '20']);
    t = await startTestGateway({ breakerThreshold: 2, probeIntervalSecs: 0 });
    await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('a cancelled streamed /generate is no engine failure: the breaker stays closed', async () => {
    const { request } = await import('undici');
    for (let i = 0; i < 4; i++) {
      const ctrl = new AbortController();
      const res = await request(`${t.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text: 'hi', stream: true, sampling_params: { max_new_tokens: 64 } }),
        signal: ctrl.signal,
      });
      expect(res.statusCode).toBe(200);
      for await (const _chunk of res.body) {
        ctrl.abort();
        break;
      }
    }
    await new Promise((r) => setTimeout(r, 200)); // the gateway sees the disconnects
    const row = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    expect(row.breaker).toBe('closed');
    expect((await t.http('POST', '/generate', { body: gen })).status).toBe(200);
  });
});
