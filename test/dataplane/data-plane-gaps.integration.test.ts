// Three data-plane gaps: `return_logprob` on a TokenSpeed engine without logprobs fails with
// 502 logprobs_unavailable, before any byte, unless `--synthesize-logprobs`; answers to a request
// with `Origin` expose the stamping headers (CORS); a version change while the engine has
// requests in flight counts in `rlgate_rl_version_change_with_inflight_total`.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const LP_BODY = { input_ids: [1, 2, 3], return_logprob: true, sampling_params: { max_new_tokens: 3 } };
const INFLIGHT = 'rlgate_rl_version_change_with_inflight_total';

/** Every `data:` event of an SSE body, parsed, and whether it ended with `[DONE]`. */
function sseEvents(text: string): { events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  return { events: datas.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)), done: datas.at(-1) === '[DONE]' };
}

async function metric(t: TestGateway, series: string): Promise<number> {
  const text = (await t.http('GET', '/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

describe('return_logprob on a TokenSpeed engine without --enable-output-logprobs', () => {
  let ts: TokenspeedSimProcess;
  let strict: TestGateway;
  let lenient: TestGateway;

  beforeAll(async () => {
    ts = await spawnTokenspeedSim(['--token-rate', '0']);
    [strict, lenient] = await Promise.all([startTestGateway(), startTestGateway({ synthesizeLogprobs: true })]);
    await strict.register([{ url: ts.url, runtime_type: 'tokenspeed' }]);
    await lenient.register([{ url: ts.url, runtime_type: 'tokenspeed' }]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([strict?.close(), lenient?.close()]);
    await ts?.stop();
  });

  it('buffered: 502 logprobs_unavailable naming the engine flag and the gateway opt-in', async () => {
    const r = await strict.http('POST', '/generate', { body: LP_BODY });
    expect(r.status, r.text).toBe(502);
    expect(r.json.error).toBe('logprobs_unavailable');
    expect(r.json.message).toContain('--enable-output-logprobs');
    expect(r.json.message).toContain('--synthesize-logprobs');
  });

  it('streamed: the same 502 before the stream starts (no other engine could answer), no chunk', async () => {
    const r = await strict.http('POST', '/generate', { body: { ...LP_BODY, stream: true } });
    expect(r.status).toBe(502);
    expect(r.headers['content-type']).toContain('application/json');
    expect(r.json.error).toBe('logprobs_unavailable');
    expect(r.json.message).toContain('--enable-output-logprobs');
  });

  it('without return_logprob the same engine answers normally', async () => {
    const r = await strict.http('POST', '/generate', { body: { ...LP_BODY, return_logprob: false } });
    expect(r.status, r.text).toBe(200);
    expect(r.json.output_ids).toHaveLength(3);
  });

  it('--synthesize-logprobs: buffered and streamed answer [0.0, id, null] per token', async () => {
    const r = await lenient.http('POST', '/generate', { body: LP_BODY });
    expect(r.status, r.text).toBe(200);
    expect(r.json.meta_info.output_token_logprobs).toEqual(r.json.output_ids.map((id: number) => [0, id, null]));

    const s = await lenient.http('POST', '/generate', { body: { ...LP_BODY, stream: true } });
    const { events, done } = sseEvents(s.text);
    expect(done).toBe(true);
    expect(events.length).toBeGreaterThan(0);
    for (const ev of events) {
      expect(ev.error).toBeUndefined();
      expect(ev.meta_info.output_token_logprobs).toEqual(ev.output_ids.map((id: number) => [0, id, null]));
    }
  });
});

describe('return_logprob on a TokenSpeed engine with --enable-output-logprobs', () => {
  let fleet: TokenFleet;
  let t: TestGateway;

  beforeAll(async () => {
    fleet = await startTokenFleet({ tokenspeed: [['--token-rate', '0', '--enable-output-logprobs']] });
    t = fleet.t;
  }, 60_000);
  afterAll(() => fleet?.close());

  it('the engine logprobs are relayed, buffered and streamed', async () => {
    const r = await t.http('POST', '/generate', { body: LP_BODY });
    expect(r.status, r.text).toBe(200);
    const lps = r.json.meta_info.output_token_logprobs as Array<[number, number, null]>;
    expect(lps.map((x) => x[1])).toEqual(r.json.output_ids);
    for (const [lp] of lps) expect(typeof lp).toBe('number');
    expect(lps.some(([lp]) => lp !== 0)).toBe(true);

    const s = await t.http('POST', '/generate', { body: { ...LP_BODY, stream: true } });
    const { events, done } = sseEvents(s.text);
    expect(done).toBe(true);
    const last = events.at(-1);
    expect(last.error).toBeUndefined();
    expect(last.meta_info.output_token_logprobs.map((x: unknown[]) => x[1])).toEqual(last.output_ids);
    for (const [lp] of last.meta_info.output_token_logprobs) expect(typeof lp).toBe('number');
  });
});

describe('CORS exposed headers and the in-flight version-change counter (SGLang simulator)', () => {
  let sim: SimProcess;
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '20']);
    // A browser's write is refused unless its origin is allowed (test/http/writes-json-origin).
    t = await startTestGateway({ allowedOrigins: ['http://example.test'] });
    [id] = await t.register([sim.url]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('with an allowed Origin, answers expose the stamping headers; without, no expose header', async () => {
    const body = { text: 'hi', sampling_params: { max_new_tokens: 1 } };
    const withOrigin = await t.http('POST', '/generate', { body, headers: { origin: 'http://example.test' } });
    expect(withOrigin.status).toBe(200);
    const exposed = String(withOrigin.headers['access-control-expose-headers'])
      .split(',')
      .map((h) => h.trim());
    expect(exposed.sort()).toEqual(
      [
        'x-smg-weight-version',
        'x-smg-mixed-version',
        'x-smg-routed-worker-id',
        'x-rl-weight-version',
        'x-rl-mixed-version',
        'x-rl-routed-worker-id',
        'x-rl-admitted-version',
        'x-rl-stale',
        'x-request-id',
      ].sort(),
    );
    // The allowed origin is named back (--allowed-origins decides which may write).
    expect(withOrigin.headers['access-control-allow-origin']).toBe('http://example.test');
    const plain = await t.http('POST', '/generate', { body });
    expect(plain.headers['access-control-expose-headers']).toBeUndefined();
  });

  it('a version write counts only while the engine has requests in flight', async () => {
    const idle = await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '4' } });
    expect(idle.status, idle.text).toBe(200);
    expect(await metric(t, INFLIGHT)).toBe(0);

    const ctrl = new AbortController();
    const res = await request(`${t.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: 'hi', stream: true, sampling_params: { max_new_tokens: 2000 } }),
      signal: ctrl.signal,
    });
    expect(res.statusCode).toBe(200);
    try {
      // One chunk read: the request is being served, and will be for a long while (20 tokens/s).
      // (`readable`, not a read loop: leaving a loop would destroy the stream and end the request.)
      await new Promise((resolve) => res.body.once('readable', resolve));
      const busy = await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '5' } });
      expect(busy.status, busy.text).toBe(200);
      expect(await metric(t, INFLIGHT)).toBe(1);
      // Writing the same version again is no change.
      await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '5' } });
      expect(await metric(t, INFLIGHT)).toBe(1);
    } finally {
      ctrl.abort();
      await res.body.dump().catch(() => undefined);
    }
  });
});
