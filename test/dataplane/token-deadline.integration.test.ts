// `--request-timeout-secs` on token engines (TokenSpeed gRPC): a request that outlives it is
// cancelled on the engine and answered — 504 `upstream_timeout` before the first token, an abort
// partial (then `data: [DONE]` when streamed) after it — on /generate and the OpenAI routes. Each
// timeout is a breaker failure against the slow engine; the gateway keeps serving the others.
// Also string `stop` on /generate: sent on the gRPC wire (SamplingParams.stop), refused on ZMQ.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestGateway } from '../fixtures/gateway.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';
import type { TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

/** Polls `check` until it holds; the deadline only bounds a hang, it asserts no speed. */
async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The JSON payloads of an SSE body, and whether it ended with `[DONE]`. */
function sse(text: string): { events: any[]; done: boolean } {
  const lines = text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => l.slice(6));
  const done = lines.at(-1) === '[DONE]';
  return { events: lines.filter((l) => l !== '[DONE]').map((l) => JSON.parse(l)), done };
}

describe('request deadline on a TokenSpeed engine (slow: 5 tokens/s; fast: unpaced)', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let slow: TokenspeedSimProcess;
  let fast: TokenspeedSimProcess;
  let slowId = '';

  const breaker = async (): Promise<string> => (await t.http('GET', `/v1/rl/workers/${slowId}`)).json.breaker;
  const slowIdle = async () => {
    const s = await slow.state();
    return s.running === 0 && s.waiting === 0;
  };

  beforeAll(async () => {
    fleet = await startTokenFleet({
      tokenspeed: [
        ['--model', 'SLOW', '--token-rate', '5'],
        ['--model', 'FAST', '--token-rate', '0'],
      ],
      // Four timeouts below, one per case: the breaker opens on the fourth and not before.
      gateway: { requestTimeoutSecs: 1, breakerThreshold: 4, breakerCooldownSecs: 3600 },
    });
    ({
      t,
      ts: [slow, fast],
    } = fleet);
    [slowId] = fleet.ids.ts;
  });
  afterAll(async () => {
    await slow?.releaseHung().catch(() => undefined);
    await fleet?.close();
  });

  it('buffered /generate with no token before the deadline: 504 upstream_timeout, the call cancelled', async () => {
    await slow.setFaults([{ rpc: 'Generate', hang: true, times: 1 }]);
    const res = await t.http('POST', '/generate', { body: { model: 'SLOW', input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 4 } } });
    expect(res.status, res.text).toBe(504);
    expect(res.text).toContain('upstream_timeout');
    expect(res.text).toContain('timed out after 1s');
    expect(await breaker()).toBe('closed');
  });

  it('streamed /generate past the deadline: tokens, then an abort partial and [DONE]; the engine stops', async () => {
    await slow.clearFaults();
    const res = await t.http('POST', '/generate', { body: { model: 'SLOW', input_ids: [5, 6, 7], stream: true, sampling_params: { max_new_tokens: 500 } } });
    expect(res.status, res.text).toBe(200);
    const { events, done } = sse(res.text);
    expect(done).toBe(true);
    const last = events.at(-1);
    expect(last.meta_info.finish_reason).toEqual({ type: 'abort', message: 'timed out after 1s' });
    expect(last.output_ids.length).toBeGreaterThan(0);
    expect(last.output_ids.length).toBeLessThan(500);
    for (const e of events.slice(0, -1)) expect(e.meta_info.finish_reason).toBeNull();
    await waitFor('the slow engine to drop the cancelled request', slowIdle);
  });

  it('buffered /v1/completions past the deadline after tokens: 200 with finish_reason abort', async () => {
    const res = await t.http('POST', '/v1/completions', { body: { model: 'SLOW', prompt: 'hello', max_tokens: 500 } });
    expect(res.status, res.text).toBe(200);
    expect(res.json.choices[0].finish_reason).toBe('abort');
    expect(res.json.choices[0].text.length).toBeGreaterThan(0);
    expect(res.json.usage.completion_tokens).toBeLessThan(500);
    await waitFor('the slow engine to drop the cancelled request', slowIdle);
    expect(await breaker()).toBe('closed');
  });

  it('streamed /v1/chat/completions with no token before the deadline: 504, then the breaker is open', async () => {
    await slow.setFaults([{ rpc: 'Generate', hang: true, times: 1 }]);
    const res = await t.http('POST', '/v1/chat/completions', { body: { model: 'SLOW', messages: [{ role: 'user', content: 'hi' }], stream: true } });
    expect(res.status, res.text).toBe(504);
    expect(res.text).toContain('timed out after 1s');
    await slow.releaseHung();
    await slow.clearFaults();
    // Four timeouts, four failures: the slow engine is out of rotation.
    expect(await breaker()).toBe('open');
  });

  it('the gateway keeps serving: the fast engine answers /generate and a streamed /v1/completions', async () => {
    const gen = await t.http('POST', '/generate', { body: { model: 'FAST', input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 4 } } });
    expect(gen.status, gen.text).toBe(200);
    expect(gen.json.output_ids).toHaveLength(4);
    expect(gen.json.meta_info.finish_reason.type).toBe('length');
    const cmpl = await t.http('POST', '/v1/completions', { body: { model: 'FAST', prompt: 'hello', max_tokens: 4, stream: true } });
    expect(cmpl.status, cmpl.text).toBe(200);
    const { events, done } = sse(cmpl.text);
    expect(done).toBe(true);
    expect(events.at(-1).choices[0].finish_reason).toBe('length');
  });
});

describe('string `stop` on /generate: on the gRPC wire, refused on ZMQ', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let ts: TokenspeedSimProcess;
  const GEN = { model: 'TS', input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 40, temperature: 0 } };

  beforeAll(async () => {
    fleet = await startTokenFleet({ tokenspeed: [['--model', 'TS', '--token-rate', '0']], zmq: { model: 'ZQ' } });
    ({
      t,
      ts: [ts],
    } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  const sentStops = async (): Promise<unknown[]> =>
    (await ts.rpcs()).filter((r) => r.rpc === 'Generate').map((r) => (r.request as any).sampling_params?.stop ?? []);

  it('gRPC: a stop string (string or list) goes on the wire and ends the choice with matched', async () => {
    const plain = await t.http('POST', '/generate', { body: GEN });
    expect(plain.status, plain.text).toBe(200);
    const full: string = plain.json.text;
    expect(full.length).toBe(40);
    const stop = full.slice(20, 23);
    for (const asSent of [stop, [stop, 'never-in-the-corpus']]) {
      await ts.clearRecords();
      const r = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: { ...GEN.sampling_params, stop: asSent } } });
      expect(r.status, r.text).toBe(200);
      expect(r.json.meta_info.finish_reason).toEqual({ type: 'stop', matched: stop });
      expect(r.json.output_ids.length).toBeLessThan(40);
      expect(await sentStops()).toEqual([typeof asSent === 'string' ? [asSent] : asSent]);
    }
  });

  it('gRPC: no stop sends none; a malformed stop is a 400 before any engine call', async () => {
    await ts.clearRecords();
    expect((await t.http('POST', '/generate', { body: GEN })).status).toBe(200);
    expect(await sentStops()).toEqual([[]]);
    await ts.clearRecords();
    const bad = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: { ...GEN.sampling_params, stop: [1, 2] } } });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toContain('`sampling_params.stop`');
    expect(await sentStops()).toEqual([]);
  });

  it('ZMQ: a string stop is a 400 naming stop_token_ids; without it the engine answers', async () => {
    const body = { ...GEN, model: 'ZQ' };
    const r = await t.http('POST', '/generate', { body: { ...body, sampling_params: { ...body.sampling_params, stop: ['ab'] } } });
    expect(r.status, r.text).toBe(400);
    expect(r.json.error).toBe('invalid_request');
    expect(r.json.message).toContain('ZMQ');
    expect(r.json.message).toContain('stop_token_ids');
    const ok = await t.http('POST', '/generate', { body });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.output_ids).toHaveLength(40);
  });
});
