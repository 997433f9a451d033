// The routing pre-filter. Paused and asleep engines are never chosen (and counted), the configured
// policy or a request header narrows the candidates by version, an empty eligible set is a 503
// without a routed-worker header. Which engines were chosen is read from the simulators' own
// request records.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const GEN = { text: 'hi', sampling_params: { max_new_tokens: 2 } };
const FANOUT = '/v1/rl/engine';
const ALL = 'selector=engine%3Dsglang';

/** Fresh simulators per fixture: discovery would seed versions a previous fixture left behind. */
async function spawnSims(n: number): Promise<SimProcess[]> {
  return Promise.all(Array.from({ length: n }, () => spawnSglangSim(['--token-rate', '0'])));
}

/** Sends `n` /generate requests one after another; every one must answer 200. */
async function generate(t: TestGateway, n: number, headers: Record<string, string> = {}): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await t.http('POST', '/generate', { body: GEN, headers });
    expect(r.status, r.text).toBe(200);
  }
}

/** URLs of the simulators that received a /generate since the last `clear`. */
async function reached(sims: SimProcess[]): Promise<string[]> {
  const out: string[] = [];
  for (const s of sims) if ((await s.requests()).some((r) => r.path === '/generate')) out.push(s.url);
  return out.sort();
}

async function clear(sims: SimProcess[]): Promise<void> {
  await Promise.all(sims.map((s) => s.clearRequests()));
}

/** Value of one metric series (0 when the series does not exist yet). */
async function metric(t: TestGateway, series: string): Promise<number> {
  const text = (await t.http('GET', '/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

const urls = (sims: SimProcess[], ...idx: number[]) => idx.map((i) => sims[i]!.url).sort();

describe('a paused engine is never routed (policy any, 1 simulator)', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    sims = await spawnSims(1);
    t = await startTestGateway();
    [id] = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('pause fan-out → /generate 503 without x-smg-routed-worker-id; continue → 200 again', async () => {
    const pause = await t.http('POST', `${FANOUT}/pause_generation?${ALL}`, { body: {} });
    expect(pause.status, pause.text).toBe(200);
    expect((await t.http('GET', `/v1/rl/workers/${id}`)).json.control).toBe('paused');
    await clear(sims);

    const refused = await t.http('POST', '/generate', { body: { text: 'hi' } });
    expect(refused.status).toBe(503);
    expect(refused.json.error).toBe('no_available_workers');
    expect(refused.headers['x-smg-routed-worker-id']).toBeUndefined();
    expect(await reached(sims)).toEqual([]);
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="paused"}')).toBeGreaterThanOrEqual(1);
    expect(await metric(t, 'rlgate_rl_requests_unroutable_total')).toBe(1);

    const cont = await t.http('POST', `${FANOUT}/continue_generation?${ALL}`, { body: {} });
    expect(cont.status, cont.text).toBe(200);
    expect((await t.http('GET', `/v1/rl/workers/${id}`)).json.control).toBe('active');
    const ok = await t.http('POST', '/generate', { body: { text: 'hi' } });
    expect(ok.status).toBe(200);
    expect(ok.headers['x-smg-routed-worker-id']).toBe(sims[0]!.url);
    expect(await reached(sims)).toEqual(urls(sims, 0));
  });
});

describe('asleep engines leave the rotation, health is untouched (policy any, 3 simulators)', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];

  beforeAll(async () => {
    sims = await spawnSims(3);
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('API state asleep on w0 + proxied release_memory_occupation on w1 → only w2; back to active → all 3', async () => {
    await clear(sims);
    await generate(t, 12);
    expect(await reached(sims)).toEqual(urls(sims, 0, 1, 2));

    const asleep = await t.http('POST', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'asleep' } });
    expect(asleep.status, asleep.text).toBe(200);
    const release = await t.http('POST', `/v1/rl/workers/${ids[1]}/engine/release_memory_occupation`, { body: { tags: ['weights'] } });
    expect(release.status, release.text).toBe(200);
    expect((await t.http('GET', `/v1/rl/workers/${ids[1]}`)).json.control).toBe('asleep');

    await clear(sims);
    await generate(t, 12);
    expect(await reached(sims)).toEqual(urls(sims, 2));
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="asleep"}')).toBeGreaterThanOrEqual(24);
    expect(await metric(t, 'rlgate_rl_requests_unroutable_total')).toBe(0);

    // Control state is RL-only: the data-plane listing still shows every engine ready.
    const listing = await t.http('GET', '/workers');
    expect(listing.status).toBe(200);
    const workers = listing.json.workers as Array<{ status: string; is_healthy: boolean }>;
    expect(workers).toHaveLength(3);
    expect(workers.every((w) => w.status === 'ready' && w.is_healthy)).toBe(true);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ health: string }>;
    expect(rows.every((r) => r.health === 'ready')).toBe(true);

    const active = await t.http('POST', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'active' } });
    expect(active.status, active.text).toBe(200);
    const resume = await t.http('POST', `/v1/rl/workers/${ids[1]}/engine/resume_memory_occupation`, { body: {} });
    expect(resume.status, resume.text).toBe(200);

    await clear(sims);
    await generate(t, 12);
    expect(await reached(sims)).toEqual(urls(sims, 0, 1, 2));
  });
});

describe('latest-only follows the fleet maximum (4 unversioned simulators)', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];

  beforeAll(async () => {
    sims = await spawnSims(4);
    t = await startTestGateway({ rl: { versionPolicy: 'latest-only' } });
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('no maximum → all; API version 2 on w0 → w0; proxied update_weight_version on w1 → {w0,w1}; fleet 2 → all; 3 on w3 → w3', async () => {
    await clear(sims);
    await generate(t, 8);
    expect(await reached(sims)).toEqual(urls(sims, 0, 1, 2, 3));

    expect((await t.http('POST', `/v1/rl/workers/${ids[0]}/version`, { body: { weight_version: '2' } })).status).toBe(200);
    await clear(sims);
    await generate(t, 8);
    expect(await reached(sims)).toEqual(urls(sims, 0));
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="unversioned"}')).toBe(24);

    const proxied = await t.http('POST', `/v1/rl/workers/${ids[1]}/engine/update_weight_version`, { body: { new_version: '2' } });
    expect(proxied.status, proxied.text).toBe(200);
    await clear(sims);
    await generate(t, 8);
    expect(await reached(sims)).toEqual(urls(sims, 0, 1));

    expect((await t.http('POST', `/v1/rl/version?${ALL}`, { body: { weight_version: '2' } })).status).toBe(200);
    await clear(sims);
    await generate(t, 8);
    expect(await reached(sims)).toEqual(urls(sims, 0, 1, 2, 3));

    expect((await t.http('POST', `/v1/rl/workers/${ids[3]}/version`, { body: { weight_version: '3' } })).status).toBe(200);
    await clear(sims);
    await generate(t, 8);
    expect(await reached(sims)).toEqual(urls(sims, 3));
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="stale"}')).toBe(24);
  });
});

describe('the request headers override the configured policy (policy any, w0 at 2, w1 at 1)', () => {
  let sims: SimProcess[];
  let t: TestGateway;

  beforeAll(async () => {
    sims = await spawnSims(2);
    t = await startTestGateway();
    const ids = await t.register(sims.map((s) => s.url));
    expect((await t.http('POST', `/v1/rl/workers/${ids[0]}/version`, { body: { weight_version: '2' } })).status).toBe(200);
    expect((await t.http('POST', `/v1/rl/workers/${ids[1]}/version`, { body: { weight_version: '1' } })).status).toBe(200);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it.each([
    { name: 'no header', headers: {}, expected: [0, 1] },
    { name: 'x-smg-version-policy: latest-only', headers: { 'x-smg-version-policy': 'latest-only' }, expected: [0] },
    { name: 'x-smg-version-policy: max-staleness:1', headers: { 'x-smg-version-policy': 'max-staleness:1' }, expected: [0, 1] },
    { name: 'x-rl-version-policy: latest-only', headers: { 'x-rl-version-policy': 'latest-only' }, expected: [0] },
    { name: 'padded x-smg-version-policy', headers: { 'x-smg-version-policy': '  latest-only  ' }, expected: [0] },
    { name: 'both valid, x-rl latest-only wins', headers: { 'x-smg-version-policy': 'any', 'x-rl-version-policy': 'latest-only' }, expected: [0] },
    { name: 'both valid, x-rl any wins', headers: { 'x-smg-version-policy': 'latest-only', 'x-rl-version-policy': 'any' }, expected: [0, 1] },
  ] as Array<{ name: string; headers: Record<string, string>; expected: number[] }>)('$name → reaches w$expected', async ({ headers, expected }) => {
    await clear(sims);
    await generate(t, 6, headers);
    expect(await reached(sims)).toEqual(urls(sims, ...expected));
  });

  it.each([
    { 'x-smg-version-policy': 'newest' },
    { 'x-smg-version-policy': 'freshest' },
    { 'x-rl-version-policy': 'Any' },
    { 'x-smg-version-policy': 'min-version:' },
    // Each header present is validated: a valid x-rl header does not excuse an invalid SMG one.
    { 'x-smg-version-policy': 'latest', 'x-rl-version-policy': 'latest-only' },
    { 'x-smg-version-policy': 'latest-only', 'x-rl-version-policy': 'max-staleness:-1' },
  ] as Array<Record<string, string>>)('%j → 400 invalid_version_policy before routing', async (headers) => {
    await clear(sims);
    const r = await t.http('POST', '/generate', { body: GEN, headers });
    expect(r.status).toBe(400);
    expect(r.json.error).toBe('invalid_version_policy');
    expect(typeof r.json.message).toBe('string');
    expect(r.headers['x-smg-routed-worker-id']).toBeUndefined();
    expect(await reached(sims)).toEqual([]);
  });

  it('a header value that is not UTF-8 → 400 invalid_version_policy', async () => {
    const r = await t.http('POST', '/generate', { body: GEN, headers: { 'x-smg-version-policy': 'min-version:\u00ff' } });
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ error: 'invalid_version_policy', message: 'header value is not UTF-8' });
  });

  it('the headers apply to chat completions too', async () => {
    await clear(sims);
    for (let i = 0; i < 4; i++) {
      const r = await t.http('POST', '/v1/chat/completions', {
        body: { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
        headers: { 'x-rl-version-policy': 'latest-only' },
      });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sims[0]!.url);
    }
    const chat = async (s: SimProcess) => (await s.requests()).filter((r) => r.path === '/v1/chat/completions').length;
    expect(await chat(sims[0]!)).toBe(4);
    expect(await chat(sims[1]!)).toBe(0);
  });
});

describe('min-version is an absolute floor; all paused → 503 and unroutable +1', () => {
  let sims: SimProcess[];
  let t: TestGateway;

  beforeAll(async () => {
    sims = await spawnSims(3);
    t = await startTestGateway({ rl: { versionPolicy: 'min-version:2' } });
    const ids = await t.register(sims.map((s) => s.url));
    expect((await t.http('POST', `/v1/rl/workers/${ids[1]}/version`, { body: { weight_version: '1' } })).status).toBe(200);
    expect((await t.http('POST', `/v1/rl/workers/${ids[2]}/version`, { body: { weight_version: '3' } })).status).toBe(200);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('w0 unversioned, w1 at 1, w2 at 3 → only w2', async () => {
    await clear(sims);
    await generate(t, 6);
    expect(await reached(sims)).toEqual(urls(sims, 2));
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="unversioned"}')).toBe(6);
    expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="stale"}')).toBe(6);
  });

  it('every engine paused → 503 no_available_workers (retryable), no routed header, unroutable +1', async () => {
    const before = await metric(t, 'rlgate_rl_requests_unroutable_total');
    expect((await t.http('POST', `${FANOUT}/pause_generation?${ALL}`, { body: {} })).status).toBe(200);
    try {
      await clear(sims);
      const r = await t.http('POST', '/generate', { body: GEN });
      expect(r.status).toBe(503);
      expect(r.json).toMatchObject({ error: 'no_available_workers', retryable: true });
      expect(r.headers['x-smg-routed-worker-id']).toBeUndefined();
      expect(await reached(sims)).toEqual([]);
      expect(await metric(t, 'rlgate_rl_requests_unroutable_total')).toBe(before + 1);
      expect(await metric(t, 'rlgate_rl_candidates_filtered_total{reason="paused"}')).toBe(3);
    } finally {
      expect((await t.http('POST', `${FANOUT}/continue_generation?${ALL}`, { body: {} })).status).toBe(200);
    }
    await clear(sims);
    await generate(t, 2);
    expect(await reached(sims)).toEqual(urls(sims, 2));
  });
});

describe('no candidate at all is not unroutable', () => {
  let t: TestGateway;

  beforeAll(async () => {
    t = await startTestGateway({ rl: { versionPolicy: 'latest-only' } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('an empty fleet → 503 no_available_workers, requests_unroutable_total stays absent', async () => {
    const r = await t.http('POST', '/generate', { body: GEN });
    expect(r.status).toBe(503);
    expect(r.json.error).toBe('no_available_workers');
    const text = (await t.http('GET', '/metrics')).text;
    expect(text).not.toMatch(/^rlgate_rl_requests_unroutable_total /m);
  });
});
