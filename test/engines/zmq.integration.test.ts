// The gateway's ZMQ client against the ZMQ engine simulator in child processes, over real ZMQ
// sockets (SMG's ZMQ lane, TokenSpeed dialect): handshake → discovery facts, streamed tokens and
// logprobs, aborts from both sides, liveness (kill, sentinel, silence, undecodable outputs), rid
// multiplexing, DP ranks sharing one socket set, and a tcp:// worker URL.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZmqEngineClient } from '../../src/engines/zmq.ts';
import { GenerationError, type TokenEvent, type TokenRequest } from '../../src/engines/generation.ts';
import { labelsFromServerInfo } from '../../src/fleet/labels.ts';
import { spawnZmqSim, tempIpcUrl, type ZmqSimProcess } from '../fixtures/zmq-sim.ts';
import { until } from '../sim/sglang-http.ts';

function request(rid: string, over: Partial<TokenRequest> = {}, sampling: TokenRequest['sampling'] = {}): TokenRequest {
  return { rid, inputIds: [10, 11, 12], sampling: { max_new_tokens: 6, ...sampling }, returnLogprob: false, topLogprobsNum: 0, stream: true, ...over };
}

/** Drains a generation: the events and the error that ended it (null when it completed). */
async function drain(it: AsyncIterable<TokenEvent>, onEvent?: (e: TokenEvent) => void): Promise<{ events: TokenEvent[]; error: any }> {
  const events: TokenEvent[] = [];
  try {
    for await (const e of it) {
      events.push(e);
      onEvent?.(e);
    }
    return { events, error: null };
  } catch (error) {
    return { events, error };
  }
}

const chunkIds = (events: TokenEvent[], index = 0): number[] => events.flatMap((e) => (e.kind === 'chunk' && e.index === index ? e.tokenIds : []));
const complete = (events: TokenEvent[], index = 0) =>
  events.find((e) => e.kind === 'complete' && e.index === index) as Extract<TokenEvent, { kind: 'complete' }>;

interface Rig {
  client: ZmqEngineClient;
  sim: ZmqSimProcess;
  cleanup(): Promise<void>;
}

async function rig(args: string[], opts: ConstructorParameters<typeof ZmqEngineClient>[1] = {}): Promise<Rig> {
  const tmp = tempIpcUrl();
  const client = new ZmqEngineClient(tmp.url, { handshakeAddress: 'tcp://127.0.0.1:0', modelId: 'zmq-model', ...opts });
  const { handshake } = await client.open();
  const sim = await spawnZmqSim({ url: tmp.url, handshake, args });
  await client.discover(AbortSignal.timeout(15_000));
  return {
    client,
    sim,
    cleanup: async () => {
      await sim.stop();
      await client.close();
      tmp.cleanup();
    },
  };
}

describe('handshake, discovery and generation', () => {
  let r: Rig;
  beforeAll(async () => {
    r = await rig(['--token-rate', '0', '--tp-size', '2', '--context-length', '4096', '--weight-version', 'v1']);
  });
  afterAll(() => r?.cleanup());

  it('discovers facts synthesized from the handshake, with no rl.* keys and no weight version', async () => {
    const facts = await r.client.discover(AbortSignal.timeout(5_000));
    expect(facts.serverInfo).toMatchObject({ model: 'zmq-model', served_model_name: 'zmq-model', tp_size: 2, pp_size: 1, dp_size: 1, context_length: 4096 });
    expect(facts.modelInfo).toMatchObject({ model_path: 'zmq-model', max_context_length: 4096 });
    const labels = labelsFromServerInfo(facts.serverInfo, facts.modelInfo);
    expect(labels).toMatchObject({ model: 'zmq-model', tp_size: '2', dp_size: '1', context_length: '4096' });
    expect(Object.keys(labels).filter((k) => k.startsWith('rl.'))).toEqual([]);
    expect(labels.weight_version).toBeUndefined();
    await expect(r.client.probe(AbortSignal.timeout(1_000))).resolves.toBeUndefined();
    expect(r.client.health()).toEqual({ healthy: true, message: 'ok' });
    const state = await r.sim.state();
    expect(state.zmq.link).toBe('registered');
    expect(state.zmq.linkAddresses.input).toMatch(/-in\.sock$/);
  });

  it('streams chunks whose tokens add up to the completion, with logprobs when asked', async () => {
    const { events, error } = await drain(r.client.generate(request('lp-1', { returnLogprob: true }), AbortSignal.timeout(10_000)));
    expect(error).toBeNull();
    const done = complete(events);
    expect(done.finishReason).toEqual({ type: 'length', length: 6 });
    expect(chunkIds(events)).toEqual(done.outputIds);
    expect(done.outputIds).toHaveLength(6);
    expect(done.logprobs).toHaveLength(6);
    for (const lp of done.logprobs!) expect(lp).toBeLessThan(0);
    for (const e of events) if (e.kind === 'chunk') expect(e.logprobs).toHaveLength(e.tokenIds.length);
    // The ZMQ wire carries no weight version: the gateway stamps from its table.
    expect(events.every((e) => e.weightVersion === undefined)).toBe(true);

    const plain = await drain(r.client.generate(request('lp-2'), AbortSignal.timeout(10_000)));
    expect(complete(plain.events).logprobs).toBeUndefined();
    expect(plain.events.every((e) => e.kind !== 'chunk' || e.logprobs === undefined)).toBe(true);
  });

  it('sends one normalized ADD per choice, as the engine decodes it', async () => {
    await drain(r.client.generate(request('norm', {}, { temperature: 0, stop_token_ids: [], max_new_tokens: 2 }), AbortSignal.timeout(10_000)));
    const add = (await r.sim.requests()).find((a) => a.rid === 'norm')!;
    expect(add).toMatchObject({ arity: 11, inputIds: [10, 11, 12], stream: true, returnLogprob: false, logprobStartLen: -1, topLogprobsNum: 0, refused: null });
    expect(add.sampling).toMatchObject({ maxNewTokens: 2, temperature: 1, topK: 1, stopTokenIds: null, n: 1, seed: null, isNormalized: true });
  });

  it('answers a non-streamed request with the completion only', async () => {
    const { events } = await drain(r.client.generate(request('ns', { stream: false }), AbortSignal.timeout(10_000)));
    expect(events.map((e) => e.kind)).toEqual(['complete']);
    expect(complete(events).outputIds).toHaveLength(6);
  });

  it('fans n > 1 out as <rid>-<i> with seed + i, and stops on stop_token_ids', async () => {
    const { events } = await drain(r.client.generate(request('fan', {}, { n: 2, sampling_seed: 7 }), AbortSignal.timeout(10_000)));
    expect(
      events
        .filter((e) => e.kind === 'complete')
        .map((e) => e.index)
        .sort(),
    ).toEqual([0, 1]);
    const adds = (await r.sim.requests()).filter((a) => a.rid.startsWith('fan-'));
    expect(adds.map((a) => [a.rid, a.sampling.seed]).sort()).toEqual([
      ['fan-0', 7],
      ['fan-1', 8],
    ]);
    expect(complete(events, 0).outputIds).not.toEqual(complete(events, 1).outputIds);

    const stopAt = complete(events, 0).outputIds[3];
    const first = complete(events, 0).outputIds.indexOf(stopAt);
    const stopped = await drain(r.client.generate(request('stop', {}, { sampling_seed: 7, stop_token_ids: [stopAt] }), AbortSignal.timeout(10_000)));
    expect(complete(stopped.events).finishReason).toEqual({ type: 'stop', matched: null });
    expect(complete(stopped.events).outputIds).toEqual(complete(events, 0).outputIds.slice(0, first + 1));
  });

  it('generates other tokens after the engine changes weight version (control app)', async () => {
    const run = async (rid: string) =>
      complete((await drain(r.client.generate(request(rid, {}, { sampling_seed: 3 }), AbortSignal.timeout(10_000)))).events).outputIds;
    const before = await run('wv-a');
    expect(await run('wv-b')).toEqual(before);
    const set = await r.sim.control('POST', '/update_weight_version', { new_version: 'v2' });
    expect(set).toMatchObject({ status: 200, json: { success: true, new_version: 'v2' } });
    expect((await r.sim.control('GET', '/get_weight_version')).json).toEqual({ weight_version: 'v2' });
    expect(await run('wv-c')).not.toEqual(before);
  });

  it('refuses what the wire cannot carry before sending anything', async () => {
    const { error } = await drain(r.client.generate(request('tlp', { topLogprobsNum: 3 }), AbortSignal.timeout(5_000)));
    expect(error).toBeInstanceOf(GenerationError);
    expect(error).toMatchObject({ code: 'invalid_argument', beforeFirstEvent: true });
    expect((await r.sim.requests()).some((a) => a.rid === 'tlp')).toBe(false);
  });

  it('maps an engine refusal (a terminal abort output) to GenerationError aborted', async () => {
    const { events, error } = await drain(r.client.generate(request('bad-topk', {}, { top_k: 500 }), AbortSignal.timeout(5_000)));
    expect(events).toEqual([]);
    expect(error).toMatchObject({ code: 'aborted', beforeFirstEvent: true });
    expect((await r.sim.requests()).find((a) => a.rid === 'bad-topk')?.refused).toMatch(/top_k/);
  });
});

describe('multiplexing', () => {
  let r: Rig;
  beforeAll(async () => {
    r = await rig(['--token-rate', '400']);
  });
  afterAll(() => r?.cleanup());

  it('keeps 24 concurrent requests apart by rid', async () => {
    const reqs = Array.from({ length: 24 }, (_, i) => request(`mx-${i}`, { inputIds: [100 + i, 7, 9] }, { max_new_tokens: 3 + (i % 5), sampling_seed: i }));
    const together = await Promise.all(reqs.map((q) => drain(r.client.generate(q, AbortSignal.timeout(20_000)))));
    for (let i = 0; i < reqs.length; i++) {
      expect(together[i].error).toBeNull();
      const done = complete(together[i].events);
      expect(done.outputIds).toHaveLength(3 + (i % 5));
      expect(chunkIds(together[i].events)).toEqual(done.outputIds);
    }
    // Each request alone gives the same tokens: nothing crossed between streams.
    for (const i of [0, 5, 11, 23]) {
      const alone = await drain(r.client.generate({ ...reqs[i], rid: `alone-${i}` }, AbortSignal.timeout(10_000)));
      expect(complete(alone.events).outputIds).toEqual(complete(together[i].events).outputIds);
    }
    expect(new Set(together.map((t) => complete(t.events).outputIds.join(','))).size).toBeGreaterThan(12);
  });

  it('refuses a rid that is already in flight', async () => {
    const ctl = new AbortController();
    const first = r.client.generate(request('dup', {}, { max_new_tokens: 10_000 }), ctl.signal)[Symbol.asyncIterator]();
    await first.next();
    const { error } = await drain(r.client.generate(request('dup'), AbortSignal.timeout(5_000)));
    expect(error).toMatchObject({ code: 'invalid_argument', beforeFirstEvent: true });
    ctl.abort();
    await first.next().catch(() => undefined);
  });
});

describe('aborts', () => {
  let r: Rig;
  beforeAll(async () => {
    r = await rig(['--token-rate', '50']);
  });
  afterAll(() => r?.cleanup());
  const long = (rid: string) => request(rid, {}, { max_new_tokens: 100_000 });

  it('sends ABORT when the signal aborts, and the engine stops the request', async () => {
    const ctl = new AbortController();
    const { events, error } = await drain(r.client.generate(long('sig'), ctl.signal), () => ctl.abort());
    expect(events.length).toBeGreaterThanOrEqual(1);
    expect(error?.name).toBe('AbortError');
    await until(async () => (await r.sim.aborts()).includes('sig'), 'the engine to see ABORT sig');
    await until(async () => !(await r.sim.state()).sequences.some((s: any) => s.rid === 'sig'), 'the engine to drop sig');
  });

  it('sends ABORT when the consumer stops reading before the end', async () => {
    for await (const e of r.client.generate(long('drop'), AbortSignal.timeout(10_000))) if (e.kind === 'chunk') break;
    await until(async () => (await r.sim.aborts()).includes('drop'), 'the engine to see ABORT drop');
  });

  it('ends with GenerationError aborted when the engine aborts the rid (abort_request)', async () => {
    const res = drain(r.client.generate(long('eng'), AbortSignal.timeout(15_000)));
    await until(async () => (await r.sim.state()).sequences.find((s: any) => s.rid === 'eng' && s.outputTokens > 0), 'eng to produce tokens');
    expect(await r.sim.control('POST', '/abort_request', { rid: 'eng' })).toMatchObject({ status: 200, json: { success: true } });
    const { events, error } = await res;
    expect(error).toBeInstanceOf(GenerationError);
    expect(error).toMatchObject({ code: 'aborted', beforeFirstEvent: false });
    expect(chunkIds(events).length).toBeGreaterThan(0);
    expect((await r.sim.aborts()).includes('eng')).toBe(false);
  });

  it('ends every in-flight request with aborted on pause_generation mode abort', async () => {
    const runs = ['p1', 'p2', 'p3'].map((rid) => drain(r.client.generate(long(rid), AbortSignal.timeout(15_000))));
    await until(async () => (await r.sim.state()).running === 3, 'three running requests');
    expect(await r.sim.control('POST', '/pause_generation', { mode: 'abort' })).toMatchObject({ status: 200, json: { success: true, mode: 'abort' } });
    for (const { error } of await Promise.all(runs)) expect(error).toMatchObject({ code: 'aborted' });
    expect((await r.sim.control('POST', '/continue_generation', {})).status).toBe(200);
    const after = await drain(r.client.generate(request('after-pause'), AbortSignal.timeout(10_000)));
    expect(after.error).toBeNull();
  });
});

describe('liveness', () => {
  let r: Rig;
  // A silence window far beyond the test timeout: a kill must be noticed by the disconnect.
  beforeAll(async () => {
    r = await rig(['--token-rate', '50'], { silenceMs: 120_000 });
  });
  afterAll(() => r?.cleanup());
  const long = (rid: string) => request(rid, {}, { max_new_tokens: 100_000 });

  async function revive(): Promise<void> {
    await r.sim.restart();
    await r.client.discover(AbortSignal.timeout(15_000));
    expect(r.client.health().healthy).toBe(true);
  }

  it('fails a stream with unavailable when the engine is killed mid-stream, then recovers on restart', async () => {
    const { events, error } = await drain(r.client.generate(long('kill'), AbortSignal.timeout(60_000)), (e) => {
      if (e.kind === 'chunk' && e.completionTokens === 2) void r.sim.kill();
    });
    expect(events.length).toBeGreaterThan(0);
    expect(error).toBeInstanceOf(GenerationError);
    expect(error).toMatchObject({ code: 'unavailable', beforeFirstEvent: false });
    await expect(r.client.probe(AbortSignal.timeout(1_000))).rejects.toThrow(/disconnected/);
    const refused = await drain(r.client.generate(request('while-dead'), AbortSignal.timeout(5_000)));
    expect(refused.error).toMatchObject({ code: 'unavailable', beforeFirstEvent: true });
    await revive();
    expect((await drain(r.client.generate(request('revived'), AbortSignal.timeout(10_000)))).error).toBeNull();
  });

  it('fails every in-flight request on the ENGINE_CORE_DEAD sentinel', async () => {
    const runs = ['d1', 'd2'].map((rid) => drain(r.client.generate(long(rid), AbortSignal.timeout(20_000))));
    await until(async () => (await r.sim.state()).running === 2, 'two running requests');
    await r.sim.fault({ kind: 'dead' });
    for (const { error } of await Promise.all(runs)) expect(error).toMatchObject({ code: 'unavailable', message: 'engine core dead' });
    expect(r.client.health()).toEqual({ healthy: false, message: 'engine core dead' });
    await expect(r.client.probe(AbortSignal.timeout(1_000))).rejects.toThrow('engine core dead');
    await revive();
  });

  it('declares the engine dead after 3 consecutive undecodable outputs, not fewer', async () => {
    const run = drain(r.client.generate(long('garbled'), AbortSignal.timeout(20_000)));
    await until(async () => (await r.sim.state()).running === 1, 'one running request');
    await r.sim.fault({ kind: 'garbage', count: 2 });
    // Two bad frames are survivable: the stream keeps going.
    const ok = await drain(r.client.generate(request('still-ok'), AbortSignal.timeout(10_000)));
    expect(ok.error).toBeNull();
    await r.sim.fault({ kind: 'garbage', count: 3 });
    expect((await run).error).toMatchObject({ code: 'unavailable' });
    expect((await run).error.message).toMatch(/3 consecutive undecodable/);
    await revive();
  });

  it('treats a ragged batch as undecodable (protocol error)', async () => {
    const run = drain(r.client.generate(long('ragged'), AbortSignal.timeout(20_000)));
    await until(async () => (await r.sim.state()).running === 1, 'one running request');
    await r.sim.fault({ kind: 'ragged', times: 3 });
    expect((await run).error.message).toMatch(/ragged/);
    await r.sim.clearFaults();
    await revive();
  });
});

describe('output silence', () => {
  let r: Rig;
  beforeAll(async () => {
    r = await rig(['--token-rate', '50'], { silenceMs: 800 });
  });
  afterAll(() => r?.cleanup());

  it('fails requests when a connected engine stays silent past the window', async () => {
    let stalled = false;
    const { events, error } = await drain(r.client.generate(request('quiet', {}, { max_new_tokens: 100_000 }), AbortSignal.timeout(20_000)), () => {
      if (!stalled) {
        stalled = true;
        void r.sim.fault({ kind: 'stall' });
      }
    });
    expect(events.length).toBeGreaterThan(0);
    expect(error).toMatchObject({ code: 'unavailable', beforeFirstEvent: false });
    expect(error.message).toMatch(/no output for/);
  });
});

describe('DP ranks share one socket set; tcp:// worker URLs', () => {
  it('routes pinned clients to their rank and unpinned ones to a live rank', async () => {
    const tmp = tempIpcUrl();
    const opts = { handshakeAddress: 'tcp://127.0.0.1:0', modelId: 'dp' };
    const c0 = new ZmqEngineClient(`${tmp.url}@0`, opts);
    const c1 = new ZmqEngineClient(`${tmp.url}@1`, opts);
    const any = new ZmqEngineClient(tmp.url, opts);
    const { handshake } = await c0.open();
    expect((await c1.open()).handshake).toBe(handshake); // one socket set for the three clients
    const sims = await Promise.all(
      [0, 1].map((rank) => spawnZmqSim({ url: tmp.url, handshake, args: ['--token-rate', '0', '--dp-rank', String(rank), '--dp-size', '2'] })),
    );
    try {
      expect((await c1.discover(AbortSignal.timeout(15_000))).serverInfo).toMatchObject({ dp_size: 2, zmq: { engine_index: 1 } });
      await c0.discover(AbortSignal.timeout(15_000));
      for (let i = 0; i < 3; i++) {
        expect((await drain(c0.generate(request(`r0-${i}`), AbortSignal.timeout(10_000)))).error).toBeNull();
        expect((await drain(c1.generate(request(`r1-${i}`), AbortSignal.timeout(10_000)))).error).toBeNull();
      }
      expect((await drain(any.generate(request('free'), AbortSignal.timeout(10_000)))).error).toBeNull();
      const [seen0, seen1] = await Promise.all(sims.map(async (s) => (await s.requests()).map((a) => a.rid)));
      expect(seen0.filter((x) => x.startsWith('r'))).toEqual(['r0-0', 'r0-1', 'r0-2']);
      expect(seen1.filter((x) => x.startsWith('r'))).toEqual(['r1-0', 'r1-1', 'r1-2']);
      expect([...seen0, ...seen1].filter((x) => x === 'free')).toHaveLength(1);
    } finally {
      await Promise.all(sims.map((s) => s.stop()));
      await Promise.all([c0.close(), c1.close(), any.close()]);
      tmp.cleanup();
    }
  });

  it('binds the same addresses again right after a client closes (a replaced worker)', async () => {
    const tmp = tempIpcUrl();
    const first = new ZmqEngineClient(tmp.url, { handshakeAddress: 'tcp://127.0.0.1:0' });
    const { handshake } = await first.open();
    void first.close(); // not awaited: engine-host replaces a client and moves on
    const second = new ZmqEngineClient(tmp.url, { handshakeAddress: handshake });
    expect((await second.open()).handshake).toBe(handshake);
    const sim = await spawnZmqSim({ url: tmp.url, handshake, args: ['--token-rate', '0'] });
    try {
      await second.discover(AbortSignal.timeout(15_000));
      expect((await drain(second.generate(request('rebound'), AbortSignal.timeout(10_000)))).error).toBeNull();
    } finally {
      await sim.stop();
      await second.close();
      tmp.cleanup();
    }
  });

  it('serves a tcp://127.0.0.1 worker URL (handshake at the URL, data plane on free ports)', async () => {
    const client = new ZmqEngineClient('tcp://127.0.0.1:0', { modelId: 'tcp-model' });
    const { handshake, input } = await client.open();
    expect(input).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const sim = await spawnZmqSim({ url: handshake, handshake, args: ['--token-rate', '0'] });
    try {
      await client.discover(AbortSignal.timeout(15_000));
      const { events, error } = await drain(client.generate(request('over-tcp'), AbortSignal.timeout(10_000)));
      expect(error).toBeNull();
      expect(complete(events).outputIds).toHaveLength(6);
    } finally {
      await sim.stop();
      await client.close();
    }
  });
});
