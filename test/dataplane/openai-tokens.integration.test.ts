// OpenAI /v1/chat/completions and /v1/completions on TokenSpeed gRPC workers: messages rendered
// with the engine's jinja chat_template and tokenized with its GetTokenizer bundle, answers in
// OpenAI's shapes with `system_fingerprint` = engine-reported > table > label > "default" (buffered
// and on every streamed chunk), `x-smg-weight-version` = the table version. Expected ids and text
// come from the simulator's byte-level tokenizer and sampler.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { decode as refDecode, encode as refEncode, seedOf } from '../../sim/core/tokens.ts';
import { tokenAt } from '../../sim/tokenspeed/sampler.ts';

const MODEL = 'MODEL';
const MESSAGES = [
  { role: 'system', content: 'be brief' },
  { role: 'user', content: [{ type: 'text', text: 'hi' }] },
];
/** What the simulator's chat_template renders MESSAGES to (add_generation_prompt on). */
const RENDERED = '<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n';
const CHAT = { model: MODEL, messages: MESSAGES, max_tokens: 5, temperature: 0 };

/** The simulator's greedy output for a prompt: `k` tokens from the prompt-hashed corpus offset. */
function greedyText(promptIds: number[], k: number): string {
  const seed = seedOf(promptIds, 0);
  return refDecode(Array.from({ length: k }, (_, i) => tokenAt(seed, i)));
}

function sseEvents(text: string): { events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  return { events: datas.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)), done: datas.at(-1) === '[DONE]' };
}

async function generateCalls(sim: TokenspeedSimProcess): Promise<any[]> {
  return (await sim.rpcs()).filter((r) => r.rpc === 'Generate').map((r) => r.request);
}

describe('a non-stamping TokenSpeed worker, no version label', () => {
  let t: TestGateway;
  let sim: TokenspeedSimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnTokenspeedSim(['--model', MODEL, '--token-rate', '0', '--stamp-weight-version', 'none']);
    t = await startTestGateway();
    [id] = await t.register([{ url: sim.url, runtime_type: 'tokenspeed' }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('no version recorded → system_fingerprint "default", no x-smg-weight-version', async () => {
    await sim.clearRecords();
    const r = await t.http('POST', '/v1/chat/completions', { body: CHAT });
    expect(r.status, r.text).toBe(200);
    expect(r.json.system_fingerprint).toBe('default');
    expect(r.headers['x-smg-weight-version']).toBeUndefined();
    expect(r.headers['x-smg-routed-worker-id']).toBe(sim.url);
    // The chat template really ran: the engine got the rendered prompt's ids.
    const [call] = await generateCalls(sim);
    expect(call.tokenized.input_ids.map(Number)).toEqual(refEncode(RENDERED));
  });

  it('version 11 written → buffered chat: 200, OpenAI shape, content = detokenized output, fingerprint "11", header 11', async () => {
    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '11' } })).status).toBe(200);
    const r = await t.http('POST', '/v1/chat/completions', { body: CHAT });
    expect(r.status, r.text).toBe(200);
    expect(String(r.headers['content-type'])).toContain('application/json');
    expect(r.headers['x-smg-weight-version']).toBe('11');
    expect(r.headers['x-rl-weight-version']).toBe('11');
    expect(r.json).toMatchObject({ object: 'chat.completion', model: MODEL, system_fingerprint: '11' });
    expect(r.json.id).toMatch(/^chatcmpl-/);
    expect(typeof r.json.created).toBe('number');
    expect(r.json.choices).toHaveLength(1);
    const content = greedyText(refEncode(RENDERED), 5);
    expect(content).toHaveLength(5);
    expect(r.json.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant', content }, finish_reason: 'length' });
    expect(r.json.usage).toEqual({ prompt_tokens: refEncode(RENDERED).length, completion_tokens: 5, total_tokens: refEncode(RENDERED).length + 5 });
  });

  it('streamed chat: every chunk carries "system_fingerprint":"11", deltas add up to the content, ends data: [DONE]', async () => {
    const r = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stream: true } });
    expect(r.status).toBe(200);
    expect(String(r.headers['content-type'])).toContain('text/event-stream');
    expect(r.headers['x-smg-weight-version']).toBe('11');
    const { events, done } = sseEvents(r.text);
    expect(done).toBe(true);
    expect(events.length).toBeGreaterThanOrEqual(3);
    for (const e of events) {
      expect(e).toMatchObject({ object: 'chat.completion.chunk', model: MODEL, system_fingerprint: '11' });
      expect(e.id).toBe(events[0].id);
    }
    expect(r.text.split('data: {').length - 1).toBe(r.text.split('"system_fingerprint":"11"').length - 1);
    expect(events[0].choices[0].delta.role).toBe('assistant');
    const text = events.map((e) => e.choices[0].delta.content ?? '').join('');
    expect(text).toBe(greedyText(refEncode(RENDERED), 5));
    expect(events.at(-1).choices[0].finish_reason).toBe('length');
    expect(events.slice(0, -1).every((e) => e.choices[0].finish_reason === null)).toBe(true);
  });

  it('sampling maps onto the wire: max_completion_tokens, top_p, n, seed, stop_token_ids', async () => {
    await sim.clearRecords();
    const r = await t.http('POST', '/v1/chat/completions', {
      body: { messages: MESSAGES, max_completion_tokens: 3, top_p: 0.5, temperature: 0.7, n: 2, seed: 42, stop_token_ids: [200] },
    });
    expect(r.status, r.text).toBe(200);
    // No `model` in the request: the worker's model id.
    expect(r.json.model).toBe(MODEL);
    expect(r.json.choices.map((c: any) => c.index)).toEqual([0, 1]);
    for (const c of r.json.choices) expect(c.message.content).toHaveLength(3);
    expect(r.json.usage.completion_tokens).toBe(6);
    const [call] = await generateCalls(sim);
    expect(call.sampling_params).toMatchObject({ max_new_tokens: 3, n: 2, stop_token_ids: [200] });
    expect(call.sampling_params.top_p).toBeCloseTo(0.5);
    expect(call.sampling_params.temperature).toBeCloseTo(0.7);
    expect(Number(call.sampling_params.sampling_seed)).toBe(42);
  });

  it('an engine-side abort mid-generation → 200 with the partial content and finish_reason "abort", buffered and streamed', async () => {
    const content = greedyText(refEncode(RENDERED), 20);
    await sim.setFaults({ rpc: 'Generate', times: 1, abortAfterTokens: 3 });
    const r = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, max_tokens: 20 } });
    expect(r.status, r.text).toBe(200);
    expect(r.json.choices[0].finish_reason).toBe('abort');
    expect(r.json.choices[0].message.content.length).toBeLessThan(20);
    expect(content.startsWith(r.json.choices[0].message.content)).toBe(true);
    expect(r.json.system_fingerprint).toBe('11');

    await sim.setFaults({ rpc: 'Generate', times: 1, abortAfterTokens: 3 });
    const s = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, max_tokens: 20, stream: true } });
    expect(s.status).toBe(200);
    const { events, done } = sseEvents(s.text);
    expect(done).toBe(true);
    expect(events.at(-1).choices[0].finish_reason).toBe('abort');
    for (const e of events) expect(e.system_fingerprint).toBe('11');
    await sim.clearFaults();
  });

  it('string stops go on the gRPC wire (SamplingParams.stop)', async () => {
    await sim.clearRecords();
    const r = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stop: ['\n'] } });
    expect(r.status, r.text).toBe(200);
    expect((await generateCalls(sim))[0].sampling_params.stop).toEqual(['\n']);
  });
});

describe('an engine stamping v7 (python profile), registered with label weight_version "registered"', () => {
  let t: TestGateway;
  let sim: TokenspeedSimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnTokenspeedSim(['--model', MODEL, '--token-rate', '0', '--servicer-impl', 'python', '--stamp-weight-version', 'v7']);
    t = await startTestGateway();
    [id] = await t.register([{ url: sim.url, runtime_type: 'tokenspeed', labels: { weight_version: 'registered' } }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('chat buffered and streamed → system_fingerprint "v7" (engine stamp beats the label)', async () => {
    const r = await t.http('POST', '/v1/chat/completions', { body: CHAT });
    expect(r.status, r.text).toBe(200);
    expect(r.json.system_fingerprint).toBe('v7');
    const s = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stream: true } });
    const { events, done } = sseEvents(s.text);
    expect(done).toBe(true);
    for (const e of events) expect(e.system_fingerprint).toBe('v7');
  });

  it('/v1/completions buffered: a string prompt and a token-id prompt', async () => {
    const prompt = 'hello, wörld';
    const r = await t.http('POST', '/v1/completions', { body: { model: MODEL, prompt, max_tokens: 4, temperature: 0 } });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toMatchObject({ object: 'text_completion', model: MODEL, system_fingerprint: 'v7' });
    expect(r.json.id).toMatch(/^cmpl-/);
    expect(r.json.choices[0]).toMatchObject({ index: 0, text: greedyText(refEncode(prompt), 4), finish_reason: 'length' });
    expect(r.json.usage).toMatchObject({ prompt_tokens: refEncode(prompt).length, completion_tokens: 4 });

    const ids = [5, 6, 7];
    const byIds = await t.http('POST', '/v1/completions', { body: { prompt: ids, max_tokens: 3, temperature: 0 } });
    expect(byIds.status, byIds.text).toBe(200);
    expect(byIds.json.choices[0].text).toBe(greedyText(ids, 3));
    // A version written to the table is the header; the engine's stamp stays the fingerprint.
    expect((await t.http('POST', `/v1/rl/workers/${id}/version`, { body: { weight_version: '12' } })).status).toBe(200);
    const after = await t.http('POST', '/v1/completions', { body: { prompt: ids, max_tokens: 3, temperature: 0 } });
    expect(after.headers['x-smg-weight-version']).toBe('12');
    expect(after.json.system_fingerprint).toBe('v7');
  });

  it('/v1/completions streamed: text deltas add up, every chunk stamped, ends data: [DONE]', async () => {
    const r = await t.http('POST', '/v1/completions', { body: { prompt: [5, 6, 7], max_tokens: 4, temperature: 0, stream: true } });
    expect(r.status).toBe(200);
    const { events, done } = sseEvents(r.text);
    expect(done).toBe(true);
    for (const e of events) expect(e).toMatchObject({ object: 'text_completion', system_fingerprint: 'v7' });
    expect(events.map((e) => e.choices[0].text).join('')).toBe(greedyText([5, 6, 7], 4));
    expect(events.at(-1).choices[0].finish_reason).toBe('length');
  });

  it('a batch of prompts is refused with 400 (one prompt per engine call)', async () => {
    const r = await t.http('POST', '/v1/completions', { body: { prompt: ['a', 'b'], max_tokens: 2 } });
    expect(r.status).toBe(400);
    expect(r.json.error).toBe('invalid_request');
  });
});
