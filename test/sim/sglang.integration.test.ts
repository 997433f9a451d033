// The SGLang simulator over real HTTP, in child processes: the /generate object-vs-list rule,
// SSE, logprobs, pause modes, abort_request, flush_cache, and weight routes (version changes only
// on success; NCCL group lifetime in metadata-only transport).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGroup } from '../../sim/broadcast/master.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { get, post, track, until } from './sglang-http.ts';

describe('generation (as fast as possible)', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--model', 'MODEL']);
  });
  afterAll(() => sim?.stop());

  it('answers one object for a single prompt and a list for a batch or n > 1', async () => {
    const single = await post(sim.url, '/generate', { text: 'hi', sampling_params: { max_new_tokens: 4 } });
    expect(single.status).toBe(200);
    expect(Array.isArray(single.json)).toBe(false);
    expect(single.json.output_ids).toHaveLength(4);
    expect(single.json.meta_info).toMatchObject({
      finish_reason: { type: 'length', length: 4 },
      completion_tokens: 4,
      prompt_tokens: 2,
      weight_version: 'default',
    });

    const batch = await post(sim.url, '/generate', { text: ['a', 'b'], rid: 'B', sampling_params: { max_new_tokens: 2 } });
    expect(batch.json).toHaveLength(2);
    expect(batch.json.map((o: any) => o.meta_info.id)).toEqual(['B_0', 'B_1']);

    const ids = await post(sim.url, '/generate', { input_ids: [[1, 2], [3]], sampling_params: { max_new_tokens: 1 } });
    expect(ids.json).toHaveLength(2);

    const n2 = await post(sim.url, '/generate', { input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 3, n: 2 } });
    expect(n2.json).toHaveLength(2);
  });

  it('is deterministic and honours stop_token_ids', async () => {
    const body = { text: 'determinism', sampling_params: { max_new_tokens: 12 } };
    const a = await post(sim.url, '/generate', body);
    const b = await post(sim.url, '/generate', body);
    expect(b.json.output_ids).toEqual(a.json.output_ids);
    const stopAt = a.json.output_ids[5];
    const first = a.json.output_ids.indexOf(stopAt);
    const stopped = await post(sim.url, '/generate', { ...body, sampling_params: { max_new_tokens: 12, stop_token_ids: [stopAt] } });
    expect(stopped.json.meta_info.finish_reason).toEqual({ type: 'stop', matched: stopAt });
    expect(stopped.json.output_ids).toEqual(a.json.output_ids.slice(0, first + 1));
  });

  it('returns output_token_logprobs as [logprob, token_id, null], one per generated token', async () => {
    const r = await post(sim.url, '/generate', { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 7 }, return_logprob: true });
    const m = r.json.meta_info;
    expect(m.output_token_logprobs).toHaveLength(m.completion_tokens);
    expect(m.output_token_logprobs.map((e: unknown[]) => e[1])).toEqual(r.json.output_ids);
    for (const [lp, id, text] of m.output_token_logprobs) {
      expect(typeof lp).toBe('number');
      expect(lp).toBeLessThan(0);
      expect(Number.isInteger(id)).toBe(true);
      expect(text).toBeNull();
    }
    const plain = await post(sim.url, '/generate', { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 2 } });
    expect(plain.json.meta_info.output_token_logprobs).toBeUndefined();
  });

  it('streams cumulative SSE events ending with data: [DONE]', async () => {
    const r = await post(sim.url, '/generate', { text: 'stream me', stream: true, sampling_params: { max_new_tokens: 5 } });
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = r.text.split('\n\n').filter(Boolean);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const objs = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')));
    expect(objs.length).toBeGreaterThan(1);
    const last = objs[objs.length - 1];
    expect(last.meta_info.finish_reason).toEqual({ type: 'length', length: 5 });
    for (const o of objs) expect(last.output_ids.slice(0, o.output_ids.length)).toEqual(o.output_ids);
    expect(objs.slice(0, -1).every((o) => o.meta_info.finish_reason === null)).toBe(true);
  });

  it('merges mock_meta_info into meta_info (fixture H)', async () => {
    const mock = { weight_version: '9', weight_versions: [{ version: '8' }, { version: '9' }] };
    const r = await post(sim.url, '/generate', { text: 'hi', sampling_params: { max_new_tokens: 2 }, mock_meta_info: mock });
    expect(r.json.meta_info).toMatchObject(mock);
    const s = await post(sim.url, '/generate', {
      text: 'hi',
      stream: true,
      sampling_params: { max_new_tokens: 2 },
      mock_meta_info: { weight_versions: [1, 2] },
    });
    expect(s.text).toContain('"weight_versions":[1,2]');
  });

  it('rejects requests without a prompt or with bad sampling params (400)', async () => {
    expect((await post(sim.url, '/generate', { sampling_params: {} })).status).toBe(400);
    expect((await post(sim.url, '/generate', { text: 'x', sampling_params: { max_new_tokens: -1 } })).status).toBe(400);
    expect((await post(sim.url, '/generate', 'not json')).status).toBe(400);
  });

  it('serves OpenAI chat/completions buffered and streamed, and /v1/models', async () => {
    const chat = await post(sim.url, '/v1/chat/completions', { model: 'MODEL', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    expect(chat.json.object).toBe('chat.completion');
    expect(chat.json.choices[0].finish_reason).toBe('length');
    expect(chat.json.usage.completion_tokens).toBe(4);
    expect(chat.json.metadata).toEqual({ weight_version: 'default' });
    const stream = await post(sim.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true });
    expect(stream.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(stream.text).toContain('"object":"chat.completion.chunk"');
    const comp = await post(sim.url, '/v1/completions', { prompt: 'abc', max_tokens: 2, logprobs: 1 });
    expect(comp.json.choices[0].text).toHaveLength(2);
    expect(comp.json.choices[0].logprobs.token_logprobs).toHaveLength(2);
    const withLp = await post(sim.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, logprobs: true, top_logprobs: 2 });
    expect(withLp.json.choices[0].logprobs.content).toHaveLength(3);
    expect(withLp.json.choices[0].logprobs.content[0].top_logprobs).toHaveLength(2);
    const models = await get(sim.url, '/v1/models');
    expect(models.json.data[0].id).toBe('MODEL');
  });

  it('reports server_info flat with the checklist fields, and model_info', async () => {
    for (const path of ['/server_info', '/get_server_info']) {
      const r = await get(sim.url, path);
      expect(r.json).toMatchObject({
        tp_size: 1,
        dp_size: 1,
        pp_size: 1,
        model_path: 'MODEL',
        served_model_name: 'MODEL',
        weight_version: 'default',
        enable_memory_saver: true,
      });
      expect(typeof r.json.version).toBe('string');
      expect(r.json.internal_states).toHaveLength(1);
    }
    for (const path of ['/model_info', '/get_model_info']) {
      expect((await get(sim.url, path)).json).toMatchObject({ model_path: 'MODEL', weight_version: 'default', is_generation: true });
    }
    expect((await get(sim.url, '/get_weight_version')).status).toBe(404);
    const health = await get(sim.url, '/health_generate');
    expect(health.status).toBe(200);
    expect(health.headers.get('content-type')).toBeNull();
  });
});

describe('--stream-interval', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--stream-interval', '4']);
  });
  afterAll(() => sim?.stop());

  it('a streamed answer sends an event at the first token, every 4th and the last, as SGLang streams', async () => {
    const r = await post(sim.url, '/generate', { input_ids: [1, 2, 3], stream: true, sampling_params: { max_new_tokens: 10, ignore_eos: true } });
    const events = r.text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const lengths = events.slice(0, -1).map((e) => (JSON.parse(e.replace(/^data: /, '')) as { output_ids: number[] }).output_ids.length);
    expect(lengths).toEqual([1, 4, 8, 10]);
  });
});

describe('pause, abort and flush (timer-paced generation)', () => {
  let sim: SimProcess;
  const long = (rid: string) => ({ text: `prompt ${rid}`, rid, sampling_params: { max_new_tokens: 100_000 } });
  const running = async (n: number) => until(async () => (await sim.state()).running === n, `${n} running`);
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '20', '--health-check-timeout', '300']);
  });
  afterAll(() => sim?.stop());

  it('pause_generation without a body is 400; with {} it pauses (mode abort) and continue resumes', async () => {
    const bare = await post(sim.url, '/pause_generation');
    expect(bare.status).toBe(400);
    expect((await sim.state()).paused).toBeNull();
    const ok = await post(sim.url, '/pause_generation', {});
    expect(ok.json).toEqual({ message: 'Generation paused successfully.', status: 'ok' });
    expect((await sim.state()).paused).toBe('abort');
    expect((await get(sim.url, '/ready')).status).toBe(503);
    expect((await get(sim.url, '/health_generate')).status).toBe(503);
    const cont = await post(sim.url, '/continue_generation', {});
    expect(cont.json).toEqual({ message: 'Generation continued successfully.', status: 'ok' });
    expect((await sim.state()).paused).toBeNull();
    expect((await get(sim.url, '/health_generate')).status).toBe(200);
  });

  it('pause abort returns the in-flight request as a partial with finish_reason abort', async () => {
    const inflight = post(sim.url, '/generate', long('pa'));
    await until(async () => (await sim.state()).sequences.some((s: any) => s.rid === 'pa' && s.outputTokens >= 2), 'tokens');
    await post(sim.url, '/pause_generation', { mode: 'abort' });
    const r = await inflight;
    expect(r.status).toBe(200);
    expect(r.json.meta_info.finish_reason.type).toBe('abort');
    expect(r.json.meta_info.completion_tokens).toBeGreaterThanOrEqual(2);
    expect(r.json.output_ids).toHaveLength(r.json.meta_info.completion_tokens);
    await post(sim.url, '/continue_generation', {});
  });

  it('in_place keeps running requests and holds new ones until continue', async () => {
    const first = track(post(sim.url, '/generate', { text: 'ip1', rid: 'ip1', sampling_params: { max_new_tokens: 6 } }));
    await until(async () => (await sim.state()).sequences.some((s: any) => s.rid === 'ip1' && s.outputTokens >= 1), 'ip1 running');
    await post(sim.url, '/pause_generation', { mode: 'in_place' });
    const second = track(post(sim.url, '/generate', { text: 'ip2', rid: 'ip2', sampling_params: { max_new_tokens: 3 } }));
    const st = await until(async () => {
      const s = await sim.state();
      return s.held === 1 ? s : null;
    }, 'ip2 held');
    expect(st.running).toBe(1);
    expect(st.paused).toBe('in_place');
    // A flush while paused in place fails: the running request still holds its KV.
    const flush = await get(sim.url, '/flush_cache');
    expect(flush.status).toBe(400);
    expect(flush.headers.get('content-type')).toBeNull();
    expect(first.settled()).toBe(false);
    expect(second.settled()).toBe(false);
    await post(sim.url, '/continue_generation', {});
    const [a, b] = await Promise.all([first.promise, second.promise]);
    expect(a.json.meta_info.finish_reason).toEqual({ type: 'length', length: 6 });
    expect(b.json.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
  });

  it('retract sends running requests back to the waiting queue; they finish after continue', async () => {
    const r = post(sim.url, '/generate', { text: 'rt', rid: 'rt', sampling_params: { max_new_tokens: 6 } });
    await until(async () => (await sim.state()).sequences.some((s: any) => s.rid === 'rt' && s.outputTokens >= 1), 'rt running');
    await post(sim.url, '/pause_generation', { mode: 'retract' });
    const st = await sim.state();
    expect(st.running).toBe(0);
    expect(st.waiting).toBe(1);
    const loads = await get(sim.url, '/v1/loads');
    expect(loads.json.loads[0]).toMatchObject({ dp_rank: 0, num_running_reqs: 0, num_waiting_reqs: 1, num_total_reqs: 1 });
    await post(sim.url, '/continue_generation', {});
    const done = await r;
    expect(done.json.meta_info.finish_reason).toEqual({ type: 'length', length: 6 });
    expect(done.json.meta_info.total_retractions).toBe(1);
  });

  it('flush_cache answers plain text without content-type: 400 while busy, 200 when idle', async () => {
    const inflight = post(sim.url, '/generate', long('fc'));
    await running(1);
    const busy = await post(sim.url, '/flush_cache');
    expect(busy.status).toBe(400);
    expect(busy.headers.get('content-type')).toBeNull();
    await post(sim.url, '/abort_request', { rid: 'fc' });
    expect((await inflight).json.meta_info.finish_reason.type).toBe('abort');
    const idle = await get(sim.url, '/flush_cache');
    expect(idle.status).toBe(200);
    expect(idle.headers.get('content-type')).toBeNull();
    expect(idle.text.startsWith('Cache flushed.')).toBe(true);
  });

  it('flush_cache?timeout=<s> waits for the scheduler to go idle first', async () => {
    const short = post(sim.url, '/generate', { text: 'ft', rid: 'ft', sampling_params: { max_new_tokens: 3 } });
    await running(1);
    const flush = await post(sim.url, '/flush_cache?timeout=20');
    expect(flush.status).toBe(200);
    expect((await short).json.meta_info.finish_reason.type).toBe('length');
  });

  it('abort_request: empty 200, exact-rid gate, then prefix match over children; abort_all', async () => {
    const texts = Array.from({ length: 12 }, (_, i) => `t${i}`);
    const batch = post(sim.url, '/generate', { text: texts, rid: 'X', sampling_params: { max_new_tokens: 100_000 } });
    await running(12);
    const parent = await post(sim.url, '/abort_request', { rid: 'X' });
    expect(parent.status).toBe(200);
    expect(parent.text).toBe('');
    expect(parent.headers.get('content-type')).toBeNull();
    expect((await sim.state()).running).toBe(12); // "X" itself is not a live rid: ignored
    await post(sim.url, '/abort_request', { rid: 'X_1' }); // X_1, X_10, X_11
    expect((await sim.state()).running).toBe(9);
    expect((await post(sim.url, '/abort_request', { rid: 'nope' })).status).toBe(200);
    expect((await post(sim.url, '/abort_request')).status).toBe(400);
    await post(sim.url, '/abort_request', { abort_all: true });
    const out = (await batch).json;
    expect(out).toHaveLength(12);
    expect(out.every((o: any) => o.meta_info.finish_reason.type === 'abort')).toBe(true);
  });

  it('update_weight_version aborts in-flight requests by default and relabels', async () => {
    const inflight = post(sim.url, '/generate', long('uv'));
    await running(1);
    const r = await post(sim.url, '/update_weight_version', { new_version: '7' });
    expect(r.json).toEqual({ success: true, message: 'Weight version updated to 7', new_version: '7' });
    expect((await inflight).json.meta_info.finish_reason.type).toBe('abort');
    expect((await get(sim.url, '/model_info')).json.weight_version).toBe('7');
    const next = await post(sim.url, '/generate', { text: 'v', sampling_params: { max_new_tokens: 1 } });
    expect(next.json.meta_info.weight_version).toBe('7');
    const kept = post(sim.url, '/generate', long('uv2'));
    await running(1);
    await post(sim.url, '/update_weight_version', { new_version: '8', abort_all_requests: false });
    expect((await sim.state()).running).toBe(1);
    await post(sim.url, '/abort_request', { rid: 'uv2' });
    expect((await kept).json.meta_info.weight_version).toBe('8');
  });
});

describe('weight routes (metadata-only transport)', () => {
  let sim: SimProcess;
  const version = async () => (await get(sim.url, '/model_info')).json.weight_version;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--transport', 'metadata', '--tp-size', '2']);
  });
  afterAll(() => sim?.stop());

  it('changes the version only when an update succeeds', async () => {
    const missing = await post(sim.url, '/update_weights_from_disk', { weight_version: '41' });
    expect(missing.status).toBe(400);
    expect(missing.json.success).toBe(false);
    expect(await version()).toBe('default');

    await sim.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false, message: 'boom' }, times: 1 });
    const failed = await post(sim.url, '/update_weights_from_disk', { model_path: '/m', weight_version: '41' });
    expect(failed.status).toBe(500);
    expect(await version()).toBe('default');

    const ok = await post(sim.url, '/update_weights_from_disk', { model_path: '/models/x', weight_version: '42', flush_cache: true });
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ success: true, num_paused_requests: 0 });
    expect(ok.json.message.endsWith(' Weight version updated to 42.')).toBe(true);
    expect(await version()).toBe('42');
    expect((await get(sim.url, '/model_info')).json.model_path).toBe('/models/x');
    const gen = await post(sim.url, '/generate', { text: 'after', sampling_params: { max_new_tokens: 1 } });
    expect(gen.json.meta_info.weight_version).toBe('42');

    const noVersion = await post(sim.url, '/update_weights_from_disk', { model_path: '/models/y' });
    expect(noVersion.json.message).toBe('Succeeded to update model weights.');
    expect(await version()).toBe('42');
    expect((await post(sim.url, '/update_weight_version', { abort_all_requests: false })).status).toBe(400);
  });

  it('keeps NCCL group lifetime rules and records what each chunk loaded', async () => {
    const init = { master_address: '127.0.0.1', master_port: 29500, rank_offset: 1, world_size: 3, group_name: 'g1', backend: 'nccl' };
    const bad = await post(sim.url, '/init_weights_update_group', { master_address: '127.0.0.1' });
    expect(bad.status).toBe(400);
    expect(bad.json.success).toBe(false);
    const tooSmall = await post(sim.url, '/init_weights_update_group', { ...init, world_size: 2 });
    expect(tooSmall.json.success).toBe(false);

    expect((await post(sim.url, '/init_weights_update_group', init)).json).toEqual({ success: true, message: 'Succeeded to initialize custom process group.' });
    const dup = await post(sim.url, '/init_weights_update_group', init);
    expect(dup.status).toBe(400);
    expect(dup.json.success).toBe(false);

    const chunk = { names: ['w.a', 'w.b'], dtypes: ['bfloat16', 'float32'], shapes: [[2, 3], [4]], group_name: 'g1', flush_cache: false };
    const unknown = await post(sim.url, '/update_weights_from_distributed', { ...chunk, group_name: 'nope', weight_version: 'x' });
    expect(unknown.status).toBe(400);
    expect(unknown.json.success).toBe(false);
    const mismatch = await post(sim.url, '/update_weights_from_distributed', { ...chunk, dtypes: ['bfloat16'], weight_version: 'x' });
    expect(mismatch.status).toBe(400);
    expect((await sim.state()).weightVersion).not.toBe('x');

    const ok = await post(sim.url, '/update_weights_from_distributed', { ...chunk, weight_version: '1' });
    expect(ok.status).toBe(200);
    expect(ok.json.message).toBe('Succeeded to update parameter online. Weight version updated to 1.');
    const st = await sim.state();
    expect(st.weightVersion).toBe('1');
    const tensors = Object.fromEntries(st.weights.tensors.map((t: any) => [t.name, t]));
    expect(tensors['w.a']).toMatchObject({ bytes: 12, checksum: null, group: 'g1', weightVersion: '1' });
    expect(tensors['w.b']).toMatchObject({ bytes: 16 });
    expect(st.weights.groups[0]).toMatchObject({ name: 'g1', ranks: [1, 2], worldSize: 3, transport: 'metadata' });

    // "Claims success without applying": 200 and the version, but nothing loaded.
    await sim.setFaults({ route: 'update_weights_from_distributed', claimSuccessWithoutApplying: true, times: 1 });
    const claimed = await post(sim.url, '/update_weights_from_distributed', {
      names: ['w.c'],
      dtypes: ['int8'],
      shapes: [[5]],
      group_name: 'g1',
      weight_version: '2',
    });
    expect(claimed.status).toBe(200);
    const after = await sim.state();
    expect(after.weights.tensors.map((t: any) => t.name)).not.toContain('w.c');
    expect(after.weights.claimedLoads).toBe(1);

    expect((await post(sim.url, '/destroy_weights_update_group', { group_name: 'g1' })).json.success).toBe(true);
    expect((await post(sim.url, '/destroy_weights_update_group', { group_name: 'g1' })).status).toBe(200);
    const gone = await post(sim.url, '/update_weights_from_distributed', { ...chunk, weight_version: '3' });
    expect(gone.status).toBe(400);
    expect((await post(sim.url, '/init_weights_update_group', init)).status).toBe(200);
  });

  it('release/resume memory occupation hold new requests until weights come back', async () => {
    const rel = await post(sim.url, '/release_memory_occupation', { tags: ['weights'] });
    expect(rel.status).toBe(200);
    const held = track(post(sim.url, '/generate', { text: 'm', sampling_params: { max_new_tokens: 1 } }));
    await until(async () => (await sim.state()).held === 1, 'held while released');
    expect(held.settled()).toBe(false);
    expect((await post(sim.url, '/release_memory_occupation', { tags: ['bogus'] })).status).toBe(400);
    await post(sim.url, '/resume_memory_occupation', { tags: ['weights'] });
    expect((await held.promise).status).toBe(200);
  });

  it('reports one load entry per DP rank', async () => {
    const dp = await spawnSglangSim(['--dp-size', '2', '--transport', 'metadata']);
    try {
      const loads = (await get(dp.url, '/v1/loads')).json.loads;
      expect(loads.map((l: any) => l.dp_rank)).toEqual([0, 1]);
      expect((await get(dp.url, '/server_info')).json.dp_size).toBe(2);
    } finally {
      await dp.stop();
    }
  });
});

describe('refit over the TCP broadcast group (sim/broadcast)', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--tp-size', '2', '--group-timeout', '10000']);
  });
  afterAll(() => sim?.stop());

  it('receives every tensor on every rank and keeps the checksums rank 0 sent', async () => {
    const master = await openGroup({ worldSize: 3, groupName: 'tcp', timeoutMs: 10_000 });
    try {
      const init = post(sim.url, '/init_weights_update_group', {
        master_address: '127.0.0.1',
        master_port: master.port,
        rank_offset: 1,
        world_size: 3,
        group_name: 'tcp',
      });
      await master.ready;
      expect((await init).json.success).toBe(true);
      expect(master.members()).toEqual([1, 2]);

      const specs = [
        { name: 'layer.0.w', dtype: 'bfloat16', shape: [64, 32] },
        { name: 'layer.0.b', dtype: 'float32', shape: [32] },
      ];
      const update = post(sim.url, '/update_weights_from_distributed', {
        names: specs.map((s) => s.name),
        dtypes: specs.map((s) => s.dtype),
        shapes: specs.map((s) => s.shape),
        group_name: 'tcp',
        weight_version: '1',
        flush_cache: false,
      });
      const sent = await master.broadcast(specs, { version: '1' });
      const r = await update;
      expect(r.status).toBe(200);
      const st = await sim.state();
      expect(st.weightVersion).toBe('1');
      const got = Object.fromEntries(st.weights.tensors.map((t: any) => [t.name, t]));
      for (const t of sent) {
        expect(got[t.name].checksum).toBe(t.checksum);
        expect(got[t.name].bytes).toBe(t.bytes);
      }
      expect(st.weights.groups[0]).toMatchObject({ name: 'tcp', transport: 'tcp' });
    } finally {
      master.close();
      await post(sim.url, '/destroy_weights_update_group', { group_name: 'tcp' });
    }
  });

  it('fails the chunk (400, version kept) when rank 0 is gone', async () => {
    const master = await openGroup({ worldSize: 3, groupName: 'gone', timeoutMs: 10_000 });
    const init = post(sim.url, '/init_weights_update_group', {
      master_address: '127.0.0.1',
      master_port: master.port,
      rank_offset: 1,
      world_size: 3,
      group_name: 'gone',
    });
    await master.ready;
    expect((await init).json.success).toBe(true);
    const before = (await sim.state()).weightVersion;
    master.close();
    const r = await post(sim.url, '/update_weights_from_distributed', {
      names: ['x'],
      dtypes: ['float16'],
      shapes: [[8]],
      group_name: 'gone',
      weight_version: 'never',
      flush_cache: false,
    });
    expect(r.status).toBe(400);
    expect(r.json.success).toBe(false);
    expect((await sim.state()).weightVersion).toBe(before);
    await post(sim.url, '/destroy_weights_update_group', { group_name: 'gone' });
  });
});
