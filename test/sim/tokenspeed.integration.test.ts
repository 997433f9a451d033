// The TokenSpeed simulator's gRPC face (python profile) over real gRPC, in child processes:
// Generate streamed and unary with weight_version on chunk (7) and complete (12), n > 1, logprobs,
// stop tokens, engine-side aborts ending the stream with a mapped error status, the Abort RPC,
// GetServerInfo's rl.* advertisement, model/server facts, loads, tokenizer bundle, health.

import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { post, until } from './sglang-http.ts';
import { collect, grpcStatus, healthClient, open, plain, schedulerClient, unary, type Client } from './tokenspeed-grpc.ts';

const gen = (rid: string, extra: Record<string, unknown> = {}, sp: Record<string, unknown> = {}) => ({
  request_id: rid,
  tokenized: { input_ids: [10, 11, 12] },
  sampling_params: { max_new_tokens: 4, ...sp },
  ...extra,
});

describe('python profile, as fast as possible', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim([
      '--token-rate',
      '0',
      '--model',
      'MODEL',
      '--weight-version',
      'v1',
      '--attn-tp-size',
      '2',
      '--rl-control-port',
      '0',
      '--rl-control-api-key',
      'ts-secret',
      '--enable-output-logprobs',
      '--server-arg',
      'hf_token=abc',
      '--server-arg',
      'db_password=p',
    ]);
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });

  it('streams chunks then a complete, each stamped with weight_version', async () => {
    const r = await collect(c, 'Generate', gen('s1', { stream: true }));
    expect(r.error).toBeNull();
    const chunks = r.messages.filter((m) => m.response === 'chunk');
    const completes = r.messages.filter((m) => m.response === 'complete');
    expect(chunks.length).toBeGreaterThan(0);
    expect(completes).toHaveLength(1);
    expect(r.messages[r.messages.length - 1].response).toBe('complete');
    for (const m of r.messages) expect(m.request_id).toBe('s1');
    for (const ch of chunks) expect(ch.chunk.weight_version).toBe('v1');
    const done = completes[0].complete;
    expect(done).toMatchObject({ finish_reason: 'length', prompt_tokens: 3, completion_tokens: 4, index: 0, weight_version: 'v1' });
    expect(chunks.flatMap((ch) => ch.chunk.token_ids)).toEqual(done.output_ids);
    expect(chunks[chunks.length - 1].chunk.completion_tokens).toBe(4);
  });

  it('answers stream=false with complete messages only, one per choice for n > 1', async () => {
    const one = await collect(c, 'Generate', gen('u1'));
    expect(one.messages.map((m) => m.response)).toEqual(['complete']);
    expect(one.messages[0].complete.weight_version).toBe('v1');
    expect(one.messages[0].complete.output_ids).toHaveLength(4);

    const n = await collect(c, 'Generate', gen('u2', {}, { n: 3 }));
    expect(n.error).toBeNull();
    expect(n.messages.map((m) => m.complete.index).sort()).toEqual([0, 1, 2]);
    for (const m of n.messages) expect(m.request_id).toBe('u2');
    const rpcs = await sim.rpcs();
    expect(rpcs.some((r) => r.rpc === 'Generate' && r.request.request_id === 'u2' && r.request.sampling_params.n === 3)).toBe(true);
  });

  it('is deterministic, strips a matched stop token and reports it', async () => {
    const a = await collect(c, 'Generate', gen('d1', {}, { max_new_tokens: 10 }));
    const ids: number[] = a.messages[0].complete.output_ids;
    const stop = ids[3];
    const first = ids.indexOf(stop);
    const b = await collect(c, 'Generate', gen('d2', {}, { max_new_tokens: 10, stop_token_ids: [stop] }));
    const done = b.messages[0].complete;
    expect(done.finish_reason).toBe('stop');
    expect(done.matched_stop).toBe('matched_token_id');
    expect(done.matched_token_id).toBe(stop);
    expect(done.output_ids).toEqual(ids.slice(0, first));
    expect(done.completion_tokens).toBe(first + 1);
    const kept = await collect(c, 'Generate', gen('d3', {}, { max_new_tokens: 10, stop_token_ids: [stop], no_stop_trim: true }));
    expect(kept.messages[0].complete.output_ids).toEqual(ids.slice(0, first + 1));
  });

  it('returns output logprobs per token when asked (ranked top-k included)', async () => {
    const r = await collect(c, 'Generate', gen('l1', { return_logprob: true, top_logprobs_num: 2 }));
    const done = r.messages[0].complete;
    expect(done.output_logprobs.token_ids).toEqual(done.output_ids);
    expect(done.output_logprobs.token_logprobs).toHaveLength(4);
    for (const lp of done.output_logprobs.token_logprobs) expect(lp).toBeLessThan(0);
    expect(done.output_logprobs.top_logprobs.map((t: any) => t.token_ids.length)).toEqual([2, 2, 2, 2]);
    const none = await collect(c, 'Generate', gen('l2'));
    expect(none.messages[0].complete.output_logprobs).toBeNull();
  });

  it('refuses malformed requests with INVALID_ARGUMENT', async () => {
    const empty = await collect(c, 'Generate', { request_id: 'e1', tokenized: { input_ids: [] } });
    expect(empty.error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
    const missing = await collect(c, 'Generate', { request_id: 'e2' });
    expect(missing.error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
  });

  it('advertises rl.* keys, redacts secrets and reports facts in GetServerInfo', async () => {
    const r = await unary(c, 'GetServerInfo');
    expect(r.error).toBeNull();
    const args = plain(r.value.server_args);
    expect(args).toMatchObject({
      model: 'MODEL',
      served_model_name: 'MODEL',
      attn_tp_size: 2,
      weight_version: 'v1',
      'rl.control_url': sim.controlUrl,
      'rl.pause_modes': 'wait,abort,keep',
      'rl.update_from': 'distributed',
      'rl.abort': 'true',
      'rl.flush_cache': 'true',
      'rl.sleep_wake': 'true',
      'rl.reports_weight_version': 'true',
    });
    expect(args.rl_control_port).toBe(Number(new URL(sim.controlUrl!).port));
    for (const k of ['rl_control_api_key', 'api_key', 'hf_token', 'db_password']) expect(k in args).toBe(false);
    expect(JSON.stringify(r.value)).not.toContain('ts-secret');
    expect(r.value.is_paused).toBe(false);
    expect(r.value.tokenspeed_version).toBe('0.2.0');
    expect(plain(r.value.scheduler_info)).toHaveProperty('shm_namespace_id');
    expect(Number(r.value.start_time.seconds)).toBeGreaterThan(0);
    const mi = await unary(c, 'GetModelInfo');
    expect(mi.value).toMatchObject({ model_path: 'MODEL', served_model_name: 'MODEL', weight_version: 'v1', eos_token_ids: [2], vocab_size: 259 });
  });

  it('answers health, loads, flush, profiling; KV events are off without --kv-events-config', async () => {
    expect((await unary(c, 'HealthCheck')).value).toEqual({ healthy: true, message: 'Health check passed' });
    const h = healthClient(sim.address);
    expect((await unary(h, 'Check', { service: '' })).value.status).toBe('SERVING');
    expect((await unary(h, 'Check', { service: 'tokenspeed.grpc.scheduler.TokenSpeedScheduler' })).value.status).toBe('SERVING');
    expect((await unary(h, 'Check', { service: 'nope' })).error?.code).toBe(grpcStatus.NOT_FOUND);
    h.close();
    const loads = await unary(c, 'GetLoads', { include: ['all'] });
    expect(loads.value).toMatchObject({ version: 'tokenspeed', dp_rank_count: 1 });
    expect(loads.value.loads[0]).toHaveProperty('memory');
    expect((await unary(c, 'FlushCache', {})).value).toMatchObject({ success: true });
    expect((await unary(c, 'StartProfile', {})).value.success).toBe(true);
    expect((await unary(c, 'StopProfile', {})).value.success).toBe(true);
    expect((await unary(c, 'StopProfile', {})).error?.code).toBe(grpcStatus.INTERNAL);
    const kv = await collect(c, 'SubscribeKvEvents', {});
    expect(kv.error?.code).toBe(grpcStatus.UNIMPLEMENTED);
  });

  it('streams its tokenizer files as a zip with the sha256 on the last chunk', async () => {
    const r = await collect(c, 'GetTokenizer', {});
    expect(r.error).toBeNull();
    const zip = Buffer.concat(r.messages.map((m) => m.data));
    const last = r.messages[r.messages.length - 1];
    expect(last.sha256).toBe(createHash('sha256').update(zip).digest('hex'));
    for (const m of r.messages.slice(0, -1)) expect(m.sha256).toBe('');
    // Walk the stored (uncompressed) local file headers.
    const files = new Map<string, Buffer>();
    for (let at = 0; zip.readUInt32LE(at) === 0x04034b50; ) {
      const size = zip.readUInt32LE(at + 18);
      const nameLen = zip.readUInt16LE(at + 26);
      const start = at + 30 + nameLen + zip.readUInt16LE(at + 28);
      files.set(zip.subarray(at + 30, at + 30 + nameLen).toString(), zip.subarray(start, start + size));
      at = start + size;
    }
    expect([...files.keys()]).toEqual(expect.arrayContaining(['tokenizer.json', 'tokenizer_config.json', 'config.json']));
    const tok = JSON.parse(files.get('tokenizer.json')!.toString());
    expect(tok.model.type).toBe('BPE');
    expect(tok.model.vocab.h).toBe('h'.charCodeAt(0) + 3);
    expect(tok.added_tokens.map((t: any) => t.content)).toEqual(['<pad>', '<s>', '</s>']);
    expect(JSON.parse(files.get('tokenizer_config.json')!.toString()).eos_token).toBe('</s>');
  });

  it('GetModelInfo and chunks follow the live version (python)', async () => {
    const r = await post(sim.controlUrl!, '/update_weight_version', { new_version: 'v2' }, { authorization: 'Bearer ts-secret' });
    expect(r.status).toBe(200);
    expect((await unary(c, 'GetModelInfo')).value.weight_version).toBe('v2');
    expect(plain((await unary(c, 'GetServerInfo')).value.server_args).weight_version).toBe('v2');
    const g = await collect(c, 'Generate', gen('v2', { stream: true }));
    expect(g.messages.every((m) => m[m.response].weight_version === 'v2')).toBe(true);
  });
});

describe('fixed stamp (fixture G), small context, no tokenizer', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim([
      '--token-rate',
      '0',
      '--stamp-weight-version',
      'v7',
      '--weight-version',
      'live-1',
      '--context-length',
      '8',
      '--no-tokenizer',
    ]);
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });

  it('stamps v7 on every chunk and complete whatever the live version', async () => {
    await sim.setWeightVersion('live-2');
    const r = await collect(c, 'Generate', gen('g1', { stream: true }));
    expect(r.messages.length).toBeGreaterThan(1);
    for (const m of r.messages) expect(m[m.response].weight_version).toBe('v7');
    expect((await unary(c, 'GetModelInfo')).value.weight_version).toBe('live-2');
  });

  it('aborts a prompt longer than the context (code 400 → INVALID_ARGUMENT); no tokenizer → FAILED_PRECONDITION', async () => {
    const long = await collect(c, 'Generate', { request_id: 'big', tokenized: { input_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9] }, stream: true });
    expect(long.error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
    expect(long.error?.details).toContain('context length');
    expect((await collect(c, 'GetTokenizer', {})).error?.code).toBe(grpcStatus.FAILED_PRECONDITION);
  });

  it('restarts on the same port with the same flags (the live version starts over)', async () => {
    const pid = sim.pid;
    await sim.restart();
    expect(sim.pid).not.toBe(pid);
    const r = await unary(c, 'GetModelInfo');
    expect(r.error).toBeNull();
    expect(r.value.weight_version).toBe('live-1');
  });
});

describe('engine-side aborts end the Generate stream with an error status', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  const slow = (rid: string, extra: Record<string, unknown> = {}) => gen(rid, { stream: true, ...extra }, { max_new_tokens: 100_000 });
  beforeAll(async () => {
    sim = await spawnTokenspeedSim(['--token-rate', '50', '--rl-control-port', '0']);
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });
  afterEach(async () => {
    await sim.clearFaults();
    await post(sim.controlUrl!, '/continue_generation');
  });

  it('pause_generation mode abort → INTERNAL, with the chunks sent before it', async () => {
    const s = open(c, 'Generate', slow('p1'));
    await s.first;
    expect((await post(sim.controlUrl!, '/pause_generation', { mode: 'abort' })).status).toBe(200);
    const r = await s.result;
    expect(r.error?.code).toBe(grpcStatus.INTERNAL);
    expect(r.messages.length).toBeGreaterThan(0);
    expect(r.messages.every((m) => m.response === 'chunk')).toBe(true);
    expect((await post(sim.controlUrl!, '/continue_generation')).status).toBe(200);
  });

  it('maps the abort code: 400 → INVALID_ARGUMENT, 429 → RESOURCE_EXHAUSTED, 504 → DEADLINE_EXCEEDED', async () => {
    for (const [code, expected] of [
      [400, grpcStatus.INVALID_ARGUMENT],
      [429, grpcStatus.RESOURCE_EXHAUSTED],
      [504, grpcStatus.DEADLINE_EXCEEDED],
    ] as const) {
      const s = open(c, 'Generate', slow(`m${code}`));
      await s.first;
      expect(await sim.abort({ rid: `m${code}`, status_code: code })).toBe(1);
      expect((await s.result).error?.code).toBe(expected);
    }
  });

  it('the Abort RPC aborts the rid and its -n<i> children; unknown rids are reported', async () => {
    const s = open(c, 'Generate', slow('kids', {}));
    const n2 = open(c, 'Generate', { ...slow('kids2'), sampling_params: { max_new_tokens: 100_000, n: 2 } });
    await Promise.all([s.first, n2.first]);
    const state = await sim.state();
    expect(state.sequences.map((q: any) => q.rid).sort()).toEqual(['kids', 'kids2-n0', 'kids2-n1']);
    const a = await unary(c, 'Abort', { request_id: 'kids2', reason: 'Stream dropped' });
    expect(a.value).toEqual({ success: true, message: 'Aborted 2 request(s) for kids2' });
    expect((await n2.result).error?.code).toBe(grpcStatus.INTERNAL);
    expect((await unary(c, 'Abort', { request_id: 'kids' })).value.success).toBe(true);
    expect((await s.result).error?.code).toBe(grpcStatus.INTERNAL);
    expect((await unary(c, 'Abort', { request_id: 'ghost' })).value).toEqual({ success: false, message: 'Request ghost not found' });
  });

  it('a client that cancels its stream aborts the engine request', async () => {
    const s = open(c, 'Generate', slow('gone'));
    await s.first;
    s.call.cancel();
    expect((await s.result).error?.code).toBe(grpcStatus.CANCELLED);
    await until(async () => (await sim.state()).sequences.length === 0, 'the cancelled request to leave the engine');
  });

  it('an abortAfterTokens fault aborts mid-stream', async () => {
    await sim.setFaults({ rpc: 'Generate', times: 1, abortAfterTokens: 3, abortStatus: 408 });
    const r = await collect(c, 'Generate', gen('f1', { stream: true }, { max_new_tokens: 50 }));
    expect(r.error?.code).toBe(grpcStatus.DEADLINE_EXCEEDED);
    expect(r.messages.flatMap((m) => m.chunk.token_ids).length).toBeLessThan(50);
  });
});
