// `return_logprob` in a mixed fleet (an SGLang HTTP engine and a TokenSpeed gRPC engine launched
// without --enable-output-logprobs): a request one engine cannot serve goes to another eligible
// engine before it fails. An engine whose discovered `enable_output_logprobs` is false is not
// asked at all; one that says nothing (or says true but answers without logprobs) is tried and
// the request moves on before anything reaches the caller. Only when no eligible engine can
// answer is the request refused with 502 logprobs_unavailable.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/gateway/config.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';

const LP_BODY = { input_ids: [1, 2, 3], return_logprob: true, sampling_params: { max_new_tokens: 3 } };

function sseEvents(text: string): { events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  return { events: datas.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)), done: datas.at(-1) === '[DONE]' };
}

/** Every generated token has its [logprob, id, null] entry. */
function expectLogprobs(out: any): void {
  const lps = out.meta_info.output_token_logprobs;
  expect(lps).toHaveLength(out.meta_info.completion_tokens);
  expect(lps.map((e: unknown[]) => e[1])).toEqual(out.output_ids);
  for (const e of lps) {
    expect(typeof e[0]).toBe('number');
    expect(e[2]).toBeNull();
  }
}

describe('return_logprob in a fleet of SGLang and TokenSpeed-without-logprobs', () => {
  let fleet: TokenFleet;
  let sgUrl: string;

  /** Generate RPCs the TokenSpeed engine received with return_logprob set. */
  const logprobRpcs = async () => (await fleet.ts[0]!.rpcs()).filter((r) => r.rpc === 'Generate' && r.request.return_logprob === true).length;

  beforeAll(async () => {
    // Plain registrations: nothing about logprobs is given by hand.
    fleet = await startTokenFleet({
      sglang: ['--model', 'MODEL', '--token-rate', '0'],
      tokenspeed: [['--model', 'MODEL', '--token-rate', '0']],
      tokenspeedRegistration: [{ runtime_type: undefined }],
      // A policy that rotates whatever the engines' timings, so the engine without logprobs is
      // sure to be tried: this file is about the fallback, not about how a pick is made.
      gateway: { routing: { ...defaultConfig().routing, policy: 'least_inflight' } },
    });
    sgUrl = fleet.sg!.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("discovery reads the engine's enable_output_logprobs", async () => {
    const rows = (await fleet.t.http('GET', '/v1/rl/workers')).json.workers;
    const ts = rows.find((r: { id: string }) => r.id === fleet.ids.ts[0]);
    expect(ts.labels.enable_output_logprobs).toBe('false');
  });

  it('buffered: every request succeeds on the engine that gives logprobs; the other is not asked', async () => {
    await fleet.ts[0]!.clearRecords();
    for (let i = 0; i < 12; i++) {
      const r = await fleet.t.http('POST', '/generate', { body: LP_BODY });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sgUrl);
      expectLogprobs(r.json);
    }
    expect(await logprobRpcs()).toBe(0);
  });

  it('streamed: the same, every chunk with its logprobs and no error event', async () => {
    for (let i = 0; i < 6; i++) {
      const r = await fleet.t.http('POST', '/generate', { body: { ...LP_BODY, stream: true } });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sgUrl);
      const { events, done } = sseEvents(r.text);
      expect(done).toBe(true);
      expect(events.length).toBeGreaterThan(0);
      for (const ev of events) {
        expect(ev.error).toBeUndefined();
        expectLogprobs(ev);
      }
    }
    expect(await logprobRpcs()).toBe(0);
  });

  it('without return_logprob both engines take requests', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 12; i++) {
      const r = await fleet.t.http('POST', '/generate', { body: { ...LP_BODY, return_logprob: false } });
      expect(r.status, r.text).toBe(200);
      seen.add(String(r.headers['x-smg-routed-worker-id']));
    }
    expect(seen).toEqual(new Set([sgUrl, fleet.ts[0]!.url]));
  });

  it('an engine that claims logprobs but answers without them is tried, and the request moves on', async () => {
    // A caller label wins over discovery: the gateway now believes the engine gives logprobs.
    const id = fleet.ids.ts[0]!;
    const put = await fleet.t.http('PUT', `/workers/${id}`, { body: { labels: { enable_output_logprobs: 'true' } } });
    expect(put.status, put.text).toBe(200);
    await fleet.t.waitReady(2);
    await fleet.ts[0]!.clearRecords();
    for (let i = 0; i < 12; i++) {
      const stream = i % 2 === 1;
      const r = await fleet.t.http('POST', '/generate', { body: { ...LP_BODY, stream } });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sgUrl);
      if (stream) {
        const { events, done } = sseEvents(r.text);
        expect(done).toBe(true);
        for (const ev of events) expectLogprobs(ev);
      } else {
        expectLogprobs(r.json);
      }
    }
    // The engine was asked (least_inflight rotates between two idle engines) and its answer dropped.
    expect(await logprobRpcs()).toBeGreaterThan(0);
    // It counted no failure: it is as routable as before.
    const row = (await fleet.t.http('GET', `/v1/rl/workers/${id}`)).json;
    expect(row.breaker).toBe('closed');
    expect((await fleet.t.http('PUT', `/workers/${id}`, { body: { labels: {} } })).status).toBe(200);
    await fleet.t.waitReady(2);
  });

  it('with no engine able to answer, 502 logprobs_unavailable before any byte, buffered or streamed', async () => {
    const sgId = fleet.ids.sg!;
    expect((await fleet.t.http('POST', `/v1/rl/workers/${sgId}/state`, { body: { control: 'paused' } })).status).toBe(200);
    try {
      for (const stream of [false, true]) {
        const r = await fleet.t.http('POST', '/generate', { body: { ...LP_BODY, stream } });
        expect(r.status, r.text).toBe(502);
        expect(r.json.error).toBe('logprobs_unavailable');
        expect(r.json.message).toContain('--enable-output-logprobs');
        expect(r.headers['x-smg-routed-worker-id']).toBeUndefined();
      }
      // The rest of the fleet still serves what it can.
      const plain = await fleet.t.http('POST', '/generate', { body: { ...LP_BODY, return_logprob: false } });
      expect(plain.status).toBe(200);
      expect(plain.headers['x-smg-routed-worker-id']).toBe(fleet.ts[0]!.url);
    } finally {
      await fleet.t.http('POST', `/v1/rl/workers/${sgId}/state`, { body: { control: 'active' } });
    }
  });
});
