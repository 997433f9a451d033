// Four gaps of the token-engine data plane (TokenSpeed gRPC, the ZMQ lane), over real sockets:
// a sampling parameter the wire cannot carry is refused (never dropped) and one it can carry goes
// on it; string `stop` on the OpenAI routes goes on the gRPC wire (trimmed from the content as
// SGLang does) and is refused on ZMQ; an engine that fails before its first event is retried once
// on another engine of any wire; and `text` prefers engines that can tokenize it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestGateway } from '../fixtures/gateway.ts';
import type { SimProcess } from '../fixtures/sglang-sim.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';
import type { TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import type { ZmqSimProcess } from '../fixtures/zmq-sim.ts';
import type { ZmqEngineClient } from '../../src/engines/zmq.ts';

const MESSAGES = [{ role: 'user', content: 'hi' }];

/** Every `data:` event of an SSE body, raw and parsed, and whether it ended with `[DONE]`. */
function sse(text: string): { raw: string[]; events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  const raw = datas.filter((d) => d !== '[DONE]');
  return { raw, events: raw.map((d) => JSON.parse(d)), done: datas.at(-1) === '[DONE]' };
}

async function generateCalls(sim: TokenspeedSimProcess): Promise<any[]> {
  return (await sim.rpcs()).filter((r) => r.rpc === 'Generate').map((r) => r.request);
}

/** Polls `check` until it holds; the deadline only bounds a hang, it asserts no speed. */
async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('sampling a wire cannot carry is refused; what it can carry goes on it (gRPC model TS, ZMQ model ZQ)', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let ts: TokenspeedSimProcess;
  let zmq: ZmqSimProcess | undefined;
  const GEN = { model: 'TS', input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 4 } };
  const ZGEN = { ...GEN, model: 'ZQ' };

  beforeAll(async () => {
    fleet = await startTokenFleet({ tokenspeed: [['--model', 'TS', '--token-rate', '0']], zmq: { model: 'ZQ' } });
    ({
      t,
      zmq,
      ts: [ts],
    } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  it('gRPC /generate: logit_bias, structural_tag and custom_params go on the wire', async () => {
    await ts.clearRecords();
    const sp = {
      ...GEN.sampling_params,
      logit_bias: { '5': 2.5, '17': -100 },
      structural_tag: '{"structures":[]}',
      custom_params: { alpha: 0.5, tags: ['a', true, null], nested: { k: 'v' } },
    };
    const r = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: sp } });
    expect(r.status, r.text).toBe(200);
    const [call] = await generateCalls(ts);
    expect(call.sampling_params.logit_bias).toEqual({ '5': 2.5, '17': -100 });
    expect(call.sampling_params.structural_tag).toBe('{"structures":[]}');
    const fields = call.sampling_params.custom_params.fields;
    expect(fields.alpha).toMatchObject({ numberValue: 0.5 });
    expect(fields.tags.listValue.values.map((v: any) => v.stringValue ?? v.boolValue ?? v.nullValue)).toEqual(['a', true, 'NULL_VALUE']);
    expect(fields.nested.structValue.fields.k).toMatchObject({ stringValue: 'v' });
  });

  it('ZMQ /generate: each of them is 400 invalid_request pointing at it; the engine is never called', async () => {
    const before = (await zmq!.requests()).length;
    const cases: Array<[string, unknown]> = [
      ['logit_bias', { '5': 2.5 }],
      ['structural_tag', '{"structures":[]}'],
      ['custom_params', { alpha: 0.5 }],
      ['stop', 'ab'],
    ];
    for (const [key, value] of cases) {
      const r = await t.http('POST', '/generate', { body: { ...ZGEN, sampling_params: { ...ZGEN.sampling_params, [key]: value } } });
      expect(r.status, `${key}: ${r.text}`).toBe(400);
      expect(r.json).toMatchObject({ error: 'invalid_request', field: `/sampling_params/${key}` });
      expect(r.json.message).toContain('ZMQ');
    }
    expect((await zmq!.requests()).length).toBe(before);
    // Streamed the same, and unset (or empty) values are no parameter at all.
    const s = await t.http('POST', '/generate', { body: { ...ZGEN, stream: true, sampling_params: { ...ZGEN.sampling_params, logit_bias: { '1': 1 } } } });
    expect(s.status).toBe(400);
    expect((await zmq!.requests()).length).toBe(before);
    const ok = await t.http('POST', '/generate', {
      body: { ...ZGEN, sampling_params: { ...ZGEN.sampling_params, logit_bias: {}, stop: [], structural_tag: null } },
    });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.output_ids).toHaveLength(4);
  });

  it('a malformed logit_bias, or two grammar constraints, is 400 on any wire before an engine call', async () => {
    await ts.clearRecords();
    for (const bias of [{ abc: 1 }, { '5': 'x' }, [1, 2]]) {
      const r = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: { ...GEN.sampling_params, logit_bias: bias } } });
      expect(r.status, r.text).toBe(400);
      expect(r.json.field).toBe('/sampling_params/logit_bias');
    }
    const two = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: { ...GEN.sampling_params, regex: 'a+', json_schema: '{}' } } });
    expect(two.status).toBe(400);
    expect(two.json.field).toBe('/sampling_params/json_schema');
    expect(await generateCalls(ts)).toEqual([]);
  });

  it('OpenAI routes: gRPC carries logit_bias and response_format; ZMQ refuses logit_bias and stop pointing at them', async () => {
    await ts.clearRecords();
    const schema = { type: 'object', properties: { a: { type: 'integer' } } };
    const r = await t.http('POST', '/v1/completions', {
      body: {
        model: 'TS',
        prompt: [5, 6, 7],
        max_tokens: 3,
        logit_bias: { '9': 3 },
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
      },
    });
    expect(r.status, r.text).toBe(200);
    const [call] = await generateCalls(ts);
    expect(call.sampling_params.logit_bias).toEqual({ '9': 3 });
    expect(JSON.parse(call.sampling_params.json_schema)).toEqual(schema);

    const before = (await zmq!.requests()).length;
    const bias = await t.http('POST', '/v1/completions', { body: { model: 'ZQ', prompt: [5, 6, 7], max_tokens: 3, logit_bias: { '9': 3 } } });
    expect(bias.status, bias.text).toBe(400);
    expect(bias.json).toMatchObject({ error: 'invalid_request', field: '/logit_bias' });
    const stop = await t.http('POST', '/v1/chat/completions', { body: { model: 'ZQ', messages: MESSAGES, stop: ['\n'] } });
    expect(stop.status, stop.text).toBe(400);
    expect(stop.json).toMatchObject({ error: 'invalid_request', field: '/stop' });
    expect(stop.json.message).toContain('stop_token_ids');
    const format = await t.http('POST', '/v1/completions', { body: { model: 'TS', prompt: [5], response_format: { type: 'yaml' } } });
    expect(format.status).toBe(400);
    expect(format.json.field).toBe('/response_format/type');
    expect((await zmq!.requests()).length).toBe(before);
  });
});

describe('string `stop` on the OpenAI routes of a gRPC engine', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let ts: TokenspeedSimProcess;
  const CHAT = { model: 'TS', messages: MESSAGES, max_tokens: 30, temperature: 0 };

  beforeAll(async () => {
    fleet = await startTokenFleet({ tokenspeed: [['--model', 'TS', '--token-rate', '0']] });
    ({
      t,
      ts: [ts],
    } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  /** The greedy content without a stop, and a stop string taken from its middle. */
  async function fullAndStop(): Promise<{ full: string; stop: string; cut: number }> {
    const plain = await t.http('POST', '/v1/chat/completions', { body: CHAT });
    expect(plain.status, plain.text).toBe(200);
    const full: string = plain.json.choices[0].message.content;
    expect(full).toHaveLength(30);
    const stop = full.slice(12, 15);
    return { full, stop, cut: full.indexOf(stop) };
  }

  it('buffered: the stop goes on the wire, the choice stops on it, the content ends before it', async () => {
    const { full, stop, cut } = await fullAndStop();
    await ts.clearRecords();
    const r = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stop } });
    expect(r.status, r.text).toBe(200);
    expect(r.json.choices[0]).toMatchObject({ finish_reason: 'stop', message: { content: full.slice(0, cut) } });
    const [call] = await generateCalls(ts);
    expect(call.sampling_params.stop).toEqual([stop]);
    // no_stop_trim keeps it, as SGLang does.
    const kept = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stop: [stop, 'never-in-the-corpus'], no_stop_trim: true } });
    expect(kept.json.choices[0]).toMatchObject({ finish_reason: 'stop', message: { content: full.slice(0, cut + stop.length) } });
  });

  it('streamed chat and completions: no delta carries any of the stop string; deltas add up to the trimmed content', async () => {
    const { full, stop, cut } = await fullAndStop();
    const chat = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stop, stream: true } });
    expect(chat.status).toBe(200);
    const c = sse(chat.text);
    expect(c.done).toBe(true);
    expect(c.events.map((e) => e.choices[0].delta.content ?? '').join('')).toBe(full.slice(0, cut));
    expect(c.events.at(-1).choices[0].finish_reason).toBe('stop');

    const promptIds = [5, 6, 7];
    const plain = await t.http('POST', '/v1/completions', { body: { model: 'TS', prompt: promptIds, max_tokens: 30, temperature: 0 } });
    const text: string = plain.json.choices[0].text;
    const s2 = text.slice(10, 12);
    const comp = await t.http('POST', '/v1/completions', { body: { model: 'TS', prompt: promptIds, max_tokens: 30, temperature: 0, stop: s2, stream: true } });
    const e = sse(comp.text);
    expect(e.done).toBe(true);
    expect(e.events.map((x) => x.choices[0].text).join('')).toBe(text.slice(0, text.indexOf(s2)));
    expect(e.events.at(-1).choices[0].finish_reason).toBe('stop');
  });

  it('/generate trims the matched stop string from `text` too (SGLang), keeping output_ids', async () => {
    const body = { model: 'TS', input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 30, temperature: 0 } };
    const plain = await t.http('POST', '/generate', { body });
    const full: string = plain.json.text;
    const stop = full.slice(8, 10);
    const r = await t.http('POST', '/generate', { body: { ...body, sampling_params: { ...body.sampling_params, stop } } });
    expect(r.json.meta_info.finish_reason).toEqual({ type: 'stop', matched: stop });
    expect(r.json.text).toBe(full.slice(0, full.indexOf(stop)));
    expect(r.json.output_ids.length).toBe(full.indexOf(stop) + stop.length);
  });

  it('streamed chunks keep their key order and are JSON.stringify-exact, the fingerprint in every one', async () => {
    const r = await t.http('POST', '/v1/chat/completions', { body: { ...CHAT, stream: true, stream_options: { include_usage: true } } });
    const { raw, events } = sse(r.text);
    expect(events.length).toBeGreaterThan(2);
    for (const [i, line] of raw.entries()) {
      expect(JSON.stringify(JSON.parse(line))).toBe(line);
      expect(Object.keys(events[i]).slice(0, 6)).toEqual(['id', 'created', 'model', 'object', 'system_fingerprint', 'choices']);
      expect(events[i].system_fingerprint).toBe(events[0].system_fingerprint);
    }
    expect(events.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 30 } });
    const g = await t.http('POST', '/generate', { body: { input_ids: [1, 2], stream: true, sampling_params: { max_new_tokens: 5 } } });
    for (const line of sse(g.text).raw) expect(JSON.stringify(JSON.parse(line))).toBe(line);
  });
});

describe('one retry before the first event on token engines (probes off, so a dead engine stays routable)', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let tsA: TokenspeedSimProcess;
  let tsB: TokenspeedSimProcess;
  const id = { a: '', b: '' };
  const GEN = { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };
  const failures = (wid: string) => t.gw.services.host.snapshot(wid)!.context.breakerFailures;

  beforeAll(async () => {
    const args = ['--model', 'MODEL', '--token-rate', '0'];
    fleet = await startTokenFleet({ tokenspeed: [args, args], gateway: { probeIntervalSecs: 0, breakerThreshold: 1000, breakerCooldownSecs: 3600 } });
    ({
      t,
      ts: [tsA, tsB],
    } = fleet);
    [id.a, id.b] = fleet.ids.ts;
  }, 60_000);
  afterAll(() => fleet?.close());

  /** /generate buffered and streamed, /v1/completions buffered and streamed: all must be 200 from `url`. */
  async function allServedBy(url: string, rounds: number): Promise<void> {
    for (let i = 0; i < rounds; i++) {
      const g = await t.http('POST', '/generate', { body: GEN });
      expect(g.status, g.text).toBe(200);
      expect(g.json.output_ids).toHaveLength(3);
      expect(g.headers['x-smg-routed-worker-id']).toBe(url);
      const s = await t.http('POST', '/generate', { body: { ...GEN, stream: true } });
      expect(s.status, s.text).toBe(200);
      const { events, done } = sse(s.text);
      expect(done).toBe(true);
      expect(events.at(-1).output_ids).toHaveLength(3);
      expect(s.headers['x-smg-routed-worker-id']).toBe(url);
      const c = await t.http('POST', '/v1/completions', { body: { prompt: [1, 2, 3], max_tokens: 3, stream: i % 2 === 1 } });
      expect(c.status, c.text).toBe(200);
      expect(c.headers['x-smg-routed-worker-id']).toBe(url);
    }
  }

  it('UNAVAILABLE before the first event → answered by the other engine; the failure counts on the first', async () => {
    await Promise.all([tsA.clearRecords(), tsB.clearRecords()]);
    await tsA.setFaults({ rpc: 'Generate', code: 'UNAVAILABLE', message: 'down for the test' });
    await allServedBy(tsB.url, 3);
    expect((await generateCalls(tsA)).length).toBeGreaterThan(0);
    expect(failures(id.a)).toBeGreaterThan(0);
    expect(failures(id.b)).toBe(0);
    await tsA.clearFaults();
  });

  it('only once: both engines UNAVAILABLE → 502 upstream_unreachable after exactly two calls', async () => {
    await Promise.all(
      [tsA, tsB].map(async (s) => {
        await s.clearRecords();
        await s.setFaults({ rpc: 'Generate', code: 'UNAVAILABLE' });
      }),
    );
    for (const stream of [false, true]) {
      await Promise.all([tsA.clearRecords(), tsB.clearRecords()]);
      const r = await t.http('POST', '/generate', { body: { ...GEN, stream } });
      expect(r.status, r.text).toBe(502);
      expect(r.json.error).toBe('upstream_unreachable');
      expect(r.headers['x-smg-routed-worker-id']).toBeUndefined();
      const calls = [(await generateCalls(tsA)).length, (await generateCalls(tsB)).length];
      expect(calls).toEqual([1, 1]);
    }
    await Promise.all([tsA.clearFaults(), tsB.clearFaults()]);
  });

  it('a refusal (INVALID_ARGUMENT) or an engine abort after tokens is never retried', async () => {
    await Promise.all(
      [tsA, tsB].map(async (s) => {
        await s.clearRecords();
        await s.setFaults({ rpc: 'Generate', code: 'INVALID_ARGUMENT', message: 'no' });
      }),
    );
    const r = await t.http('POST', '/generate', { body: GEN });
    expect(r.status).toBe(400);
    expect((await generateCalls(tsA)).length + (await generateCalls(tsB)).length).toBe(1);
    await Promise.all(
      [tsA, tsB].map(async (s) => {
        await s.clearRecords();
        await s.setFaults({ rpc: 'Generate', abortAfterTokens: 2 });
      }),
    );
    const p = await t.http('POST', '/generate', { body: { ...GEN, sampling_params: { max_new_tokens: 10 } } });
    expect(p.status).toBe(200);
    expect(p.json.meta_info.finish_reason.type).toBe('abort');
    expect((await generateCalls(tsA)).length + (await generateCalls(tsB)).length).toBe(1);
    await Promise.all([tsA.clearFaults(), tsB.clearFaults()]);
  });

  it('an engine abort (ABORTED) before the first event: 200 with the abort partial, buffered and streamed, as SGLang answers', async () => {
    await Promise.all(
      [tsA, tsB].map(async (s) => {
        await s.clearRecords();
        await s.setFaults({ rpc: 'Generate', code: 'ABORTED', message: 'aborted by the test' });
      }),
    );
    const b = await t.http('POST', '/generate', { body: GEN });
    expect(b.status, b.text).toBe(200);
    expect(b.json.meta_info.finish_reason.type).toBe('abort');
    expect(b.json.output_ids).toEqual([]);
    const s = await t.http('POST', '/generate', { body: { ...GEN, stream: true } });
    expect(s.status, s.text).toBe(200);
    const { events, done } = sse(s.text);
    expect(done).toBe(true);
    expect(events).toHaveLength(1);
    expect(events[0].meta_info.finish_reason.type).toBe('abort');
    expect(events[0].output_ids).toEqual([]);
    await Promise.all([tsA.clearFaults(), tsB.clearFaults()]);
  });

  it('an engine killed while still routed: every request answers 200 from the other, buffered and streamed', async () => {
    const before = failures(id.a);
    await tsA.kill();
    await allServedBy(tsB.url, 4);
    expect(failures(id.a)).toBeGreaterThan(before);
    // The gateway still holds it as serving: it was routed to, and the retry covered it.
    expect((await t.http('GET', `/v1/rl/workers/${id.a}`)).json.state).toBe('serving');
  });
});

describe('a mixed fleet: SGLang over HTTP + a ZMQ engine without a tokenizer (probes off)', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let sg: SimProcess;
  let zmq: ZmqSimProcess | undefined;
  let ipc: { url: string };
  let zmqId = '';

  beforeAll(async () => {
    fleet = await startTokenFleet({
      sglang: ['--token-rate', '0', '--model', 'MODEL'],
      zmq: { model: 'MODEL' },
      gateway: { probeIntervalSecs: 0, breakerThreshold: 1000, breakerCooldownSecs: 3600 },
    });
    ({ t, zmq } = fleet);
    sg = fleet.sg!;
    zmqId = fleet.ids.zmq!;
    ipc = zmq!; // the lane's URL, the one the worker is registered under
  }, 60_000);
  afterAll(() => fleet?.close());

  it('20 text requests all answer 200 from the HTTP engine; the ZMQ engine never sees one', async () => {
    await sg.clearRequests();
    const before = (await zmq!.requests()).length;
    for (let i = 0; i < 20; i++) {
      const r = await t.http('POST', '/generate', { body: { text: `prompt ${i}`, stream: i % 4 === 3, sampling_params: { max_new_tokens: 3 } } });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    }
    expect((await sg.requests()).filter((q) => q.path === '/generate')).toHaveLength(20);
    expect((await zmq!.requests()).length).toBe(before);
    // OpenAI routes need the tokenizer on a token engine: they go to the HTTP engine too.
    for (let i = 0; i < 4; i++) {
      const c = await t.http('POST', '/v1/chat/completions', { body: { messages: MESSAGES, max_tokens: 3 } });
      expect(c.status, c.text).toBe(200);
      expect(c.headers['x-smg-routed-worker-id']).toBe(sg.url);
    }
    expect((await zmq!.requests()).length).toBe(before);
    expect(t.gw.services.host.snapshot(zmqId)!.context.breakerFailures).toBe(0);
  });

  it('input_ids requests are still served by both engines', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } } });
      expect(r.status, r.text).toBe(200);
      seen.add(String(r.headers['x-smg-routed-worker-id']));
    }
    expect([...seen].sort()).toEqual([ipc.url, sg.url].sort());
  });

  it('a field no token wire has (return_routed_experts) goes to the HTTP engine, never a 400, no breaker count', async () => {
    const before = (await zmq!.requests()).length;
    for (let i = 0; i < 6; i++) {
      const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], return_routed_experts: true, sampling_params: { max_new_tokens: 3 } } });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    }
    expect((await zmq!.requests()).length).toBe(before);
    expect(t.gw.services.host.snapshot(zmqId)!.context.breakerFailures).toBe(0);
  });

  it('a ZMQ lane that died (ENGINE_CORE_DEAD) before the first event: retried on the HTTP engine', async () => {
    await zmq!.fault({ kind: 'dead' });
    const lane = t.gw.services.host.client(zmqId) as ZmqEngineClient;
    await waitFor('the lane to see the engine dead', () => !lane.health().healthy);
    const before = t.gw.services.host.snapshot(zmqId)!.context.breakerFailures;
    for (let i = 0; i < 6; i++) {
      const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], stream: i % 2 === 1, sampling_params: { max_new_tokens: 3 } } });
      expect(r.status, r.text).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    }
    expect(t.gw.services.host.snapshot(zmqId)!.context.breakerFailures).toBeGreaterThan(before);
  });
});
