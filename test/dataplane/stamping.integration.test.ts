// `x-smg-weight-version` carries the routed engine's table version on every routed answer (buffered
// and streamed, /generate and chat, HTTP and gRPC workers) and is absent while the engine is
// unversioned; `x-smg-mixed-version` flags a buffered JSON /generate whose body names another
// version, without touching the body.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type HttpAnswer, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const GEN = { text: 'hi', sampling_params: { max_new_tokens: 2 } };
const CHAT = { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

/** Value of one metric series (0 when the series does not exist yet). */
async function metric(t: TestGateway, series: string): Promise<number> {
  const text = (await t.http('GET', '/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

function expectNoMixed(r: HttpAnswer, what: string): void {
  expect(r.headers['x-smg-mixed-version'], what).toBeUndefined();
  expect(r.headers['x-rl-mixed-version'], what).toBeUndefined();
}

function expectMixed(r: HttpAnswer, what: string): void {
  expect(r.headers['x-smg-mixed-version'], what).toBe('true');
  expect(r.headers['x-rl-mixed-version'], what).toBe('true');
}

describe('the version a fan-out update_weight_version records is stamped on the next chat completion', () => {
  let sims: SimProcess[];
  let t: TestGateway;

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('fan-out {"new_version":"7"} → every row 7/passthrough/active; chat → x-smg-weight-version: 7', async () => {
    const before = await t.http('POST', '/v1/chat/completions', { body: CHAT });
    expect(before.status).toBe(200);
    expect(before.headers['x-smg-weight-version']).toBeUndefined();

    const fan = await t.http('POST', '/v1/rl/engine/update_weight_version?selector=engine%3Dsglang', { body: { new_version: '7', abort_all_requests: false } });
    expect(fan.status, fan.text).toBe(200);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<Record<string, unknown>>;
    expect(rows).toHaveLength(2);
    for (const row of rows) expect(row).toMatchObject({ weight_version: '7', version_source: 'passthrough', control: 'active' });

    const urls = new Set<string>();
    for (let i = 0; i < 2; i++) {
      const r = await t.http('POST', '/v1/chat/completions', { body: CHAT });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-weight-version']).toBe('7');
      expect(r.headers['x-rl-weight-version']).toBe('7');
      urls.add(r.headers['x-smg-routed-worker-id'] as string);
    }
    expect([...urls].sort()).toEqual(sims.map((s) => s.url).sort());
  });
});

describe('one SGLang simulator', () => {
  let sim: SimProcess;
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    [id] = await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('unversioned → no x-smg-weight-version; after version 9 every answer carries it, buffered and streamed', async () => {
    const bare = await t.http('POST', '/generate', { body: GEN });
    expect(bare.status).toBe(200);
    expect(bare.headers['x-smg-weight-version']).toBeUndefined();
    expect(bare.headers['x-rl-weight-version']).toBeUndefined();
    expect(bare.headers['x-rl-admitted-version']).toBeUndefined();
    expect(bare.headers['x-smg-routed-worker-id']).toBe(sim.url);
    // The simulator reports `default`, but with no table version there is nothing to differ from.
    expect(bare.json.meta_info.weight_version).toBe('default');
    expectNoMixed(bare, 'unversioned');

    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '9' } })).status).toBe(200);
    const cases: Array<[string, string, Record<string, unknown>, string]> = [
      ['buffered /generate', '/generate', GEN, 'application/json'],
      ['streamed /generate', '/generate', { ...GEN, stream: true }, 'text/event-stream'],
      ['buffered chat', '/v1/chat/completions', CHAT, 'application/json'],
      ['streamed chat', '/v1/chat/completions', { ...CHAT, stream: true }, 'text/event-stream'],
    ];
    await sim.clearRequests();
    for (const [what, path, body, type] of cases) {
      const r = await t.http('POST', path, { body });
      expect(r.status, what).toBe(200);
      expect(String(r.headers['content-type']), what).toContain(type);
      expect(r.headers['x-smg-weight-version'], what).toBe('9');
      expect(r.headers['x-rl-weight-version'], what).toBe('9');
      // No refit while it ran: admitted on the version it was answered on.
      expect(r.headers['x-rl-admitted-version'], what).toBe('9');
      expect(r.headers['x-smg-routed-worker-id'], what).toBe(sim.url);
      if (type === 'text/event-stream') expect(r.text, what).toContain('data: [DONE]');
    }
    const seen = (await sim.requests()).filter((r) => r.path === '/generate' || r.path === '/v1/chat/completions');
    expect(seen.map((r) => r.path)).toEqual(['/generate', '/generate', '/v1/chat/completions', '/v1/chat/completions']);
  });

  it('mixed spans and a differing weight_version are flagged, equal ones are not, streams never', async () => {
    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '9' } })).status).toBe(200);
    const mixedBefore = await metric(t, 'rlgate_rl_mixed_version_total');
    const gen = (mock: unknown, extra: Record<string, unknown> = {}) => t.http('POST', '/generate', { body: { ...GEN, ...extra, mock_meta_info: mock } });

    const spans = [{ version: '8' }, { version: '9' }];
    const twoSpans = await gen({ weight_version: '9', weight_versions: spans });
    expect(twoSpans.status).toBe(200);
    expectMixed(twoSpans, 'two spans');
    expect(twoSpans.headers['x-smg-weight-version']).toBe('9');
    // The body is the engine's, untouched: both spans are still there, and the length matches.
    expect(twoSpans.json.meta_info.weight_versions).toEqual(spans);
    expect(twoSpans.json.meta_info.weight_version).toBe('9');
    expect(Number(twoSpans.headers['content-length'])).toBe(Buffer.byteLength(twoSpans.text));

    expectNoMixed(await gen({ weight_version: '9' }), 'equal version');
    expectMixed(await gen({ weight_version: '7' }), 'older version');
    expectNoMixed(await gen({ weight_version: '009' }), '"009" equals "9"');
    expectNoMixed(await gen({ weight_version: 9 }), 'a number equal to the table version');
    expectMixed(await gen({ weight_version: 'default' }), '"default" differs from "9"');
    expectNoMixed(await gen({ weight_version: '9', weight_versions: [{ version: '9' }] }), 'one span');
    // An array body is mixed when any element is (two prompts, both merged with the mock). A
    // batch goes as input_ids: a `text` list is refused with 422.
    const batch = await gen({ weight_version: '7' }, { text: undefined, input_ids: [[1, 2], [3]] });
    expect(batch.status).toBe(200);
    expect(Array.isArray(batch.json)).toBe(true);
    expectMixed(batch, 'array body');

    const streamed = await gen({ weight_versions: [1, 2] }, { stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.text).toContain('"weight_versions":[1,2]');
    expect(streamed.headers['x-smg-weight-version']).toBe('9');
    expectNoMixed(streamed, 'streamed');

    // Flagged: two spans, "7", "default", the array body.
    expect(await metric(t, 'rlgate_rl_mixed_version_total')).toBe(mixedBefore + 4);
  });

  it('a non-2xx /generate answer is not inspected but is still stamped', async () => {
    await sim.setFaults({ route: 'generate', status: 500, body: { meta_info: { weight_version: '7' } }, times: 1 });
    try {
      const r = await t.http('POST', '/generate', { body: GEN });
      expect(r.status).toBe(500);
      expect(r.json.meta_info.weight_version).toBe('7');
      expect(r.headers['x-smg-weight-version']).toBe('9');
      expectNoMixed(r, 'non-2xx');
    } finally {
      await sim.clearFaults();
    }
  });

  it('an unparsable JSON body is not mixed and reaches the caller byte for byte', async () => {
    const broken = '{"meta_info": {"weight_version": "7"';
    await sim.setFaults({ route: 'generate', status: 200, body: broken, contentType: 'application/json', times: 1 });
    try {
      const r = await t.http('POST', '/generate', { body: GEN });
      expect(r.status).toBe(200);
      expect(r.text).toBe(broken);
      expect(r.headers['x-smg-weight-version']).toBe('9');
      expectNoMixed(r, 'unparsable');
    } finally {
      await sim.clearFaults();
    }
  });

  it("stamp headers an engine sends never pass through as the gateway's", async () => {
    const spoof = {
      'x-smg-weight-version': 'spoofed',
      'x-rl-weight-version': 'spoofed',
      'x-smg-mixed-version': 'true',
      'x-rl-mixed-version': 'true',
      'x-smg-routed-worker-id': 'http://elsewhere:1',
      'x-rl-routed-worker-id': 'http://elsewhere:1',
    };
    const body = { text: 'x', meta_info: { weight_version: '9' } };
    await sim.setFaults([
      { route: 'generate', status: 200, body, headers: spoof, times: 1 },
      { route: 'v1/chat/completions', status: 200, body: { choices: [] }, headers: spoof, times: 1 },
    ]);
    try {
      for (const path of ['/generate', '/v1/chat/completions']) {
        const r = await t.http('POST', path, { body: path === '/generate' ? GEN : CHAT });
        expect(r.status, path).toBe(200);
        expect(r.headers['x-smg-weight-version'], path).toBe('9');
        expect(r.headers['x-rl-weight-version'], path).toBe('9');
        expect(r.headers['x-smg-routed-worker-id'], path).toBe(sim.url);
        expect(r.headers['x-rl-routed-worker-id'], path).toBeUndefined();
        expectNoMixed(r, path);
      }
    } finally {
      await sim.clearFaults();
    }
  });
});

describe('gRPC worker: /generate through the token relay is stamped the same way', () => {
  let ts: TokenspeedSimProcess;
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    ts = await spawnTokenspeedSim(['--model', 'MODEL', '--token-rate', '0', '--stamp-weight-version', 'v7']);
    t = await startTestGateway();
    [id] = await t.register([{ url: ts.url, runtime_type: 'tokenspeed' }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await ts?.stop();
  });

  it('unversioned → no header; at "v7" → header, not mixed; at "11" → header and mixed (the engine stamps v7)', async () => {
    const body = { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };
    const bare = await t.http('POST', '/generate', { body });
    expect(bare.status, bare.text).toBe(200);
    expect(bare.headers['x-smg-weight-version']).toBeUndefined();
    expect(bare.headers['x-smg-routed-worker-id']).toBe(ts.url);

    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: 'v7' } })).status).toBe(200);
    const same = await t.http('POST', '/generate', { body });
    expect(same.status).toBe(200);
    expect(same.headers['x-smg-weight-version']).toBe('v7');
    expectNoMixed(same, 'engine stamp equals the table version');

    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '11' } })).status).toBe(200);
    const other = await t.http('POST', '/generate', { body });
    expect(other.status).toBe(200);
    expect(other.json.meta_info.weight_version).toBe('v7');
    expect(other.headers['x-smg-weight-version']).toBe('11');
    expectMixed(other, 'engine stamp v7 against table 11');

    const streamed = await t.http('POST', '/generate', { body: { ...body, stream: true } });
    expect(streamed.status).toBe(200);
    expect(streamed.headers['x-smg-weight-version']).toBe('11');
    expectNoMixed(streamed, 'streamed');
  });
});
