// The SGLang simulator under --cost-model realistic, in child processes over real HTTP: a repeated
// prompt reports the page-aligned cached prefix and its prefill is shorter, text and token-id
// prompts share the cache, a weight update flushes it unless `flush_cache: false`, the engine's
// own counts (/_sim/state, /v1/loads) agree with the cached_tokens its answers carry, and pauses,
// aborts and weight versions work as under the fixed model, freeing KV where SGLang frees it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encode } from '../../sim/core/tokens.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { get, post, track, until } from './sglang-http.ts';

const PAGE = 16;
// A small pool and fast steps keep the file quick; the prefill rate makes a long prompt's prefill
// last long enough to tell from a cached one's.
const REALISTIC = [
  '--cost-model',
  'realistic',
  '--page-size',
  String(PAGE),
  '--kv-cache-tokens',
  '4096',
  '--prefill-tokens-per-s',
  '4000',
  '--decode-step-ms',
  '1',
  '--decode-ms-per-request',
  '0.1',
];

/** ASCII text of `n` characters, different for each `tag`: n tokens for the byte tokenizer. */
function text(tag: string, n: number): string {
  return `${tag}:${'the cache keeps whole pages of every finished request. '.repeat(Math.ceil(n / 50))}`.slice(0, n);
}

const exact = (n: number) => ({ max_new_tokens: n, ignore_eos: true });
const alignedPrefix = (promptTokens: number): number => Math.floor((promptTokens - 1) / PAGE) * PAGE;

describe('cached prefixes', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(REALISTIC);
  });
  afterAll(() => sim?.stop());

  it('a repeated prompt reports the page-aligned prefix as cached_tokens and is prefilled faster', async () => {
    const prompt = text('repeat', 1000);
    const first = await post(sim.url, '/generate', { text: prompt, sampling_params: exact(4) });
    expect(first.status).toBe(200);
    expect(first.json.meta_info).toMatchObject({ prompt_tokens: 1000, completion_tokens: 4, cached_tokens: 0 });
    // Sent as token ids this time: the same ids, so the same cache entry.
    const second = await post(sim.url, '/generate', { input_ids: encode(prompt), sampling_params: exact(4) });
    expect(second.json.meta_info).toMatchObject({ prompt_tokens: 1000, completion_tokens: 4, cached_tokens: alignedPrefix(1000) });
    expect(alignedPrefix(1000)).toBe(992);
    expect(second.json.output_ids).toHaveLength(4);
    // 1000 uncached tokens at 4000/s are 250 ms of prefill; 8 of them are 2 ms.
    expect(first.json.meta_info.e2e_latency).toBeGreaterThan(0.25);
    expect(second.json.meta_info.e2e_latency).toBeLessThan(first.json.meta_info.e2e_latency / 2);
  });

  it('a prompt sharing a prefix hits that prefix only, in whole pages', async () => {
    const base = text('shared', 200);
    await post(sim.url, '/generate', { text: base, sampling_params: exact(1) });
    // The first 100 characters are the same, then the prompts part.
    const other = await post(sim.url, '/generate', { text: `${base.slice(0, 100)}#${base.slice(101)}`, sampling_params: exact(1) });
    expect(other.json.meta_info.cached_tokens).toBe(96);
  });

  it('without ignore_eos the engine stops by itself before max_new_tokens, with EOS as the matched token', async () => {
    const outs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(sim.url, '/generate', { text: text(`len${i}`, 40), sampling_params: { max_new_tokens: 1000 } })),
    );
    const lengths = outs.map((o) => o.json.meta_info.completion_tokens as number);
    for (const o of outs) {
      expect(o.json.meta_info.finish_reason).toEqual({ type: 'stop', matched: 2 });
      expect(o.json.output_ids[o.json.output_ids.length - 1]).toBe(2);
    }
    expect(new Set(lengths).size).toBeGreaterThan(1);
    expect(Math.max(...lengths)).toBeLessThan(1000);
  });
});

describe('weight updates and flush_cache', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(REALISTIC);
  });
  afterAll(() => sim?.stop());

  const prompt = text('weights', 100);
  const cachedOf = async (): Promise<number> => (await post(sim.url, '/generate', { text: prompt, sampling_params: exact(2) })).json.meta_info.cached_tokens;

  it('an update flushes the cache by default; flush_cache: false keeps it; /flush_cache empties it', async () => {
    expect(await cachedOf()).toBe(0);
    expect(await cachedOf()).toBe(96);

    const flushed = await post(sim.url, '/update_weights_from_disk', { model_path: '/models/next', weight_version: 'v2' });
    expect(flushed.json.success).toBe(true);
    expect((await sim.state()).cache).toMatchObject({ tokens: 0, flushes: 1 });
    expect(await cachedOf()).toBe(0);
    expect(await cachedOf()).toBe(96);

    const kept = await post(sim.url, '/update_weights_from_tensor', { serialized_named_tensors: [], weight_version: 'v3', flush_cache: false });
    expect(kept.json.success).toBe(true);
    expect((await sim.state()).cache.flushes).toBe(1);
    expect(await cachedOf()).toBe(96);

    const flush = await post(sim.url, '/flush_cache');
    expect(flush.status).toBe(200);
    expect((await sim.state()).cache).toMatchObject({ tokens: 0, flushes: 2 });
    expect(await cachedOf()).toBe(0);
  });
});

describe('the engine’s counts', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(REALISTIC);
  });
  afterAll(() => sim?.stop());

  it('/_sim/state and /v1/loads agree with the cached_tokens the answers carry', async () => {
    const prompts = [text('a', 40), text('b', 75), text('c', 130)];
    const answers: any[] = [];
    for (let round = 0; round < 2; round++) {
      for (const p of prompts) answers.push((await post(sim.url, '/generate', { text: p, sampling_params: exact(3) })).json);
    }
    const batch = await post(sim.url, '/generate', { text: prompts, sampling_params: exact(3) });
    answers.push(...batch.json);
    const cached = answers.reduce((n, a) => n + a.meta_info.cached_tokens, 0);
    const prompted = answers.reduce((n, a) => n + a.meta_info.prompt_tokens, 0);
    expect(answers.slice(3).map((a) => a.meta_info.cached_tokens)).toEqual([32, 64, 128, 32, 64, 128]);

    const state = await sim.state();
    expect(state.costModel).toBe('realistic');
    expect(state.cache).toMatchObject({ requests: answers.length, hitTokens: cached, promptTokens: prompted });
    // What stays cached: each prompt and its output with KV (prompt + 2), in whole pages.
    const held = prompts.reduce((n, p) => n + Math.floor((p.length + 2) / PAGE) * PAGE, 0);
    expect(state.cache.tokens).toBe(held);
    // Nothing runs, so every cached token is evictable and the pool holds only the cache.
    expect(state.kv).toMatchObject({ running: 0, waiting: 0, heldTokens: 0, usedTokens: held, totalTokens: 4096, pageSize: PAGE });

    const loads = (await get(sim.url, '/v1/loads')).json;
    expect(loads.loads).toHaveLength(1);
    expect(loads.loads[0]).toMatchObject({ num_used_tokens: 0, max_total_num_tokens: 4096, token_usage: 0 });
    expect(loads.loads[0].cache_hit_rate).toBeCloseTo(cached / prompted, 12);
    const info = (await get(sim.url, '/server_info')).json;
    expect(info).toMatchObject({ max_total_num_tokens: 4096, page_size: PAGE, chunked_prefill_size: 8192 });
  });

  it('/v1/loads counts the KV a running request holds', async () => {
    const stream = fetch(`${sim.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: text('running', 300), sampling_params: exact(2000), stream: true }),
    });
    const res = await stream;
    const reader = res.body!.getReader();
    await reader.read();
    const loads = (await get(sim.url, '/v1/loads')).json.loads[0];
    // At least its 300 prompt tokens, in whole pages, and never the whole pool.
    expect(loads.num_running_reqs).toBe(1);
    expect(loads.num_used_tokens).toBeGreaterThanOrEqual(304);
    expect(loads.num_used_tokens % PAGE).toBe(0);
    expect(loads.token_usage).toBeCloseTo(loads.num_used_tokens / 4096, 12);
    await reader.cancel();
  });
});

describe('pauses, aborts and versions', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim([...REALISTIC, '--weight-version', 'w0']);
  });
  afterAll(() => sim?.stop());

  const tokensOf = async (rid: string): Promise<number> => (await sim.state()).sequences.find((s: any) => s.rid === rid)?.outputTokens ?? -1;

  it('retract frees the running request’s KV; after continue it recomputes and ends at exactly max_new_tokens', async () => {
    const r = post(sim.url, '/generate', { text: text('retract', 64), rid: 'rt', sampling_params: exact(300) });
    await until(async () => (await tokensOf('rt')) >= 5, 'rt producing');
    await post(sim.url, '/pause_generation', { mode: 'retract' });
    const paused = await sim.state();
    expect(paused.kv).toMatchObject({ running: 0, waiting: 1, heldTokens: 0 });
    await post(sim.url, '/continue_generation', {});
    const done = (await r).json.meta_info;
    expect(done).toMatchObject({ completion_tokens: 300, total_retractions: 1, finish_reason: { type: 'length', length: 300 } });
  });

  it('in_place stops the running request where it is until continue', async () => {
    const r = track(post(sim.url, '/generate', { text: text('inplace', 64), rid: 'ip', sampling_params: exact(300) }));
    await until(async () => (await tokensOf('ip')) >= 5, 'ip producing');
    await post(sim.url, '/pause_generation', { mode: 'in_place' });
    const at = await tokensOf('ip');
    await new Promise((res) => setTimeout(res, 100));
    expect(await tokensOf('ip')).toBe(at);
    expect(r.settled()).toBe(false);
    expect((await sim.state()).kv.running).toBe(1);
    await post(sim.url, '/continue_generation', {});
    expect((await r.promise).json.meta_info).toMatchObject({ completion_tokens: 300, total_retractions: 0 });
  });

  it('abort_request ends a running request and frees its KV and its lock on the cache', async () => {
    const prompt = text('abort', 64);
    await post(sim.url, '/generate', { text: prompt, sampling_params: exact(1) });
    const r = post(sim.url, '/generate', { text: prompt, rid: 'ab', sampling_params: exact(100_000) });
    await until(async () => (await tokensOf('ab')) >= 2, 'ab producing');
    expect((await sim.state()).cache.evictableTokens).toBeLessThan((await sim.state()).cache.tokens);
    await post(sim.url, '/abort_request', { rid: 'ab' });
    const out = (await r).json.meta_info;
    expect(out.finish_reason.type).toBe('abort');
    expect(out.cached_tokens).toBe(48);
    const after = await sim.state();
    expect(after.kv).toMatchObject({ running: 0, heldTokens: 0 });
    expect(after.cache.evictableTokens).toBe(after.cache.tokens);
  });

  it('stamps the live weight version on every answer', async () => {
    const before = await post(sim.url, '/generate', { text: 'v', sampling_params: exact(2) });
    expect(before.json.meta_info.weight_version).toBe('w0');
    await post(sim.url, '/update_weight_version', { new_version: 'w1' });
    const after = await post(sim.url, '/generate', { text: 'v', sampling_params: exact(2) });
    expect(after.json.meta_info.weight_version).toBe('w1');
  });
});
