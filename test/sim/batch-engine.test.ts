// One DP rank of the realistic cost model (sim/core/batch-engine.ts), stepped by the test: the
// step-time formula, continuous batching with chunked prefill, cached tokens as page-aligned
// prefixes, requests waiting while KV is full, eviction only under shortage and in LRU order,
// lock refs keeping a running request's prefix, retraction on a decode shortage, exact lengths
// with ignore_eos, and flush. No timer: the clock is a number the test moves.

import { describe, expect, it } from 'vitest';
import { BatchEngine, type Step } from '../../sim/core/batch-engine.ts';
import { COST_MODEL_DEFAULTS, resolveCostModel, stepMs, type CostModel } from '../../sim/core/cost-model.ts';
import { outputLength } from '../../sim/core/output-length.ts';
import { Sequence } from '../../sim/core/sequence.ts';
import { EOS_TOKEN_ID, seedOf, toyModel } from '../../sim/core/tokens.ts';

const model = toyModel('abcdefghijklmnopqrstuvwxyz', 7);
const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

/** Page 4, 64 KV tokens, 1000 prefill tokens/s (1 ms a token), decode 5 ms + 1 ms a request. */
const SMALL: CostModel = resolveCostModel({
  costModel: 'realistic',
  pageSize: 4,
  kvCacheTokens: 64,
  prefillTokensPerS: 1000,
  decodeStepMs: 5,
  decodeMsPerRequest: 1,
  chunkedPrefillSize: 1000,
});

let rids = 0;
function seq(prompt: number[], maxNewTokens: number, opts: { ignoreEos?: boolean; eosAt?: number } = {}): Sequence {
  const s = new Sequence(
    {
      rid: `r${rids++}`,
      promptIds: prompt,
      promptHash: seedOf(prompt, 0),
      seed: seedOf(prompt, 0),
      maxNewTokens,
      minNewTokens: 0,
      stopTokenIds: null,
      stopStrings: null,
      noStopTrim: false,
      ignoreEos: opts.ignoreEos ?? true,
      dpRank: 0,
    },
    model.tokenAt,
  );
  if (opts.eosAt !== undefined) s.eosAt = opts.eosAt;
  return s;
}

/** An engine on a clock the test moves; `step()` runs one whole step and says what it did. */
function rig(m: CostModel = SMALL, maxRunningRequests = 16) {
  let now = 0;
  const engine = new BatchEngine({ model: m, maxRunningRequests, now: () => now });
  const step = (): { step: Step; finished: Sequence[]; progressed: Sequence[] } | null => {
    const { step: s, aborted } = engine.begin(true);
    expect(aborted).toEqual([]);
    if (!s) return null;
    now += s.durationMs;
    return { step: s, ...engine.end(s) };
  };
  /** Steps until nothing is left; returns every step's duration. */
  const drain = (limit = 10_000): number[] => {
    const durations: number[] = [];
    for (let i = 0; i < limit; i++) {
      const r = step();
      if (!r) return durations;
      durations.push(r.step.durationMs);
    }
    throw new Error('did not drain');
  };
  return { engine, step, drain, now: () => now };
}

describe('step time', () => {
  it('is prefill tokens over the prefill rate, plus decode_step_ms and decode_ms_per_request per decoding request', () => {
    const d = COST_MODEL_DEFAULTS;
    expect(stepMs(d, 8000, 0)).toBe(1000);
    expect(stepMs(d, 0, 1)).toBeCloseTo(6.35, 10);
    expect(stepMs(d, 0, 100)).toBeCloseTo(41, 10);
    expect(stepMs(d, 800, 10)).toBeCloseTo(100 + 6 + 3.5, 10);
  });

  it('follows from each step batch: prefill alone first, then one decode token per running request', () => {
    const { engine, step } = rig();
    engine.enqueue(seq(range(100, 10), 3));
    engine.enqueue(seq(range(200, 6), 3));
    // Both prompts prefill in one step (16 tokens, 1 ms each); nothing decodes yet.
    const first = step()!;
    expect(first.step.prefillTokens).toBe(16);
    expect(first.step.decode).toHaveLength(0);
    expect(first.step.durationMs).toBe(16);
    expect(first.progressed.map((s) => s.outputIds.length)).toEqual([1, 1]);
    // Then every running request decodes one token per step: 5 ms + 2 × 1 ms.
    const second = step()!;
    expect(second.step.prefillTokens).toBe(0);
    expect(second.step.decode).toHaveLength(2);
    expect(second.step.durationMs).toBe(7);
  });

  it('a newcomer is prefilled in the same step as the others decode', () => {
    const { engine, step } = rig();
    engine.enqueue(seq(range(100, 8), 5));
    step();
    engine.enqueue(seq(range(300, 12), 5));
    const mixed = step()!;
    expect(mixed.step.prefillTokens).toBe(12);
    expect(mixed.step.decode).toHaveLength(1);
    expect(mixed.step.durationMs).toBe(12 + 5 + 1);
  });

  it('splits a long prompt into chunks of --chunked-prefill-size, the first token after the last chunk', () => {
    const { engine, step } = rig(resolveCostModel({ ...SMALL, costModel: 'realistic', chunkedPrefillSize: 16 }));
    const s = seq(range(1, 40), 2);
    engine.enqueue(s);
    const chunks = [step()!, step()!, step()!];
    expect(chunks.map((c) => c.step.prefillTokens)).toEqual([16, 16, 8]);
    expect(chunks.map((c) => c.progressed.length)).toEqual([0, 0, 1]);
    expect(s.outputIds).toHaveLength(1);
  });
});

describe('prefix cache through the engine', () => {
  it('a repeated prompt reports the page-aligned cached prefix and prefills only the rest', () => {
    const { engine, step, drain } = rig();
    const prompt = range(10, 10);
    const a = seq(prompt, 3);
    engine.enqueue(a);
    drain();
    expect(a.cachedTokens).toBe(0);
    // a finished with 10 + 3 tokens, 12 of them with KV: three whole pages went into the cache.
    expect(engine.cacheStats().tokens).toBe(12);
    const b = seq(prompt, 3);
    engine.enqueue(b);
    const first = step()!;
    // At least the last prompt token is computed: 9 matchable tokens, 8 of them whole pages.
    expect(b.cachedTokens).toBe(8);
    expect(first.step.prefillTokens).toBe(2);
    const stats = engine.cacheStats();
    expect(stats).toMatchObject({ requests: 2, promptTokens: 20, hitTokens: 8 });
    drain();
    // The work done: a's 10 prompt tokens and b's 2 uncached ones prefilled; each request's first
    // token comes out of its prefill, its other two from decode steps.
    expect(engine.cacheStats()).toMatchObject({ prefilledTokens: 12, decodedTokens: 4 });
  });

  it('text and token requests share the cache: only the ids count', () => {
    const { engine, drain } = rig();
    const a = seq(range(40, 9), 1);
    engine.enqueue(a);
    drain();
    const b = seq([...range(40, 8), 99, 98, 97], 1);
    engine.enqueue(b);
    drain();
    expect(b.cachedTokens).toBe(8);
  });
});

describe('KV capacity', () => {
  it('a request waits while the pool cannot hold its prompt and first decode page, and starts when room frees', () => {
    const { engine, step } = rig();
    const a = seq(range(100, 40), 3);
    const b = seq(range(200, 24), 3);
    engine.enqueue(a);
    engine.enqueue(b);
    // a holds 44 tokens (41 rounded up to pages); b needs 28 of the 20 left.
    const first = step()!;
    expect(first.step.prefill.map((c) => c.admitted.seq)).toEqual([a]);
    expect(b.state).toBe('waiting');
    expect(engine.kvStats()).toMatchObject({ running: 1, waiting: 1, usedTokens: 44 });
    step();
    expect(b.state).toBe('waiting');
    step();
    expect(a.done).toBe(true);
    // a left 40 tokens in the cache (24 free): b is short of 4 and evicts that node, whole.
    expect(engine.cacheStats()).toMatchObject({ tokens: 40, evictions: 0 });
    const next = step()!;
    expect(next.step.prefill.map((c) => c.admitted.seq)).toEqual([b]);
    // a's 40 evicted; b's prompt, once prefilled, is in the tree (SGLang's cache_unfinished_req).
    expect(engine.cacheStats()).toMatchObject({ tokens: 24, evictions: 1, evictedTokens: 40 });
  });

  it('a request the whole pool could never hold is aborted with SGLang’s message', () => {
    const { engine } = rig();
    const huge = seq(range(1, 64), 1);
    engine.enqueue(huge);
    const { step, aborted } = engine.begin(true);
    expect(step).toBeNull();
    expect(aborted.map((a) => [a.seq, a.finish.statusCode])).toEqual([[huge, 400]]);
    expect(aborted[0].finish.message).toMatch(/^Input length \(64 tokens\) exceeds the maximum allowed length \(63 tokens\)/);
    expect(engine.waitingCount).toBe(0);
  });

  it('evicts only when short, least recently used first', () => {
    const { engine, drain } = rig();
    const old = seq(range(100, 8), 1);
    const recent = seq(range(200, 8), 1);
    engine.enqueue(old);
    drain();
    engine.enqueue(recent);
    drain();
    expect(engine.cacheStats().tokens).toBe(16);
    // 48 tokens are free: a request that needs 12 evicts nothing.
    const fits = seq(range(300, 8), 1);
    engine.enqueue(fits);
    drain();
    expect(engine.cacheStats()).toMatchObject({ evictions: 0, tokens: 24 });
    // Touch `old` again: now `recent` is the least recently used.
    const again = seq(range(100, 8), 1);
    engine.enqueue(again);
    drain();
    expect(again.cachedTokens).toBe(4);
    // 40 free: a request needing 44 must evict 4, and takes `recent` (8 tokens, whole node).
    const big = seq(range(400, 40), 1);
    engine.enqueue(big);
    drain();
    expect(engine.cache.peek(range(200, 8))).toBe(0);
    expect(engine.cache.peek(range(100, 8))).toBe(8);
    expect(engine.cacheStats()).toMatchObject({ evictions: 1, evictedTokens: 8 });
  });

  it('a running request’s prefix is locked: a newcomer waits rather than evict it', () => {
    const { engine, step, drain } = rig();
    engine.enqueue(seq(range(100, 24), 1));
    drain();
    expect(engine.cacheStats().tokens).toBe(24);
    // Reuses all 24 cached tokens (locked while it runs) and holds 4 of its own: 36 free.
    const user = seq(range(100, 26), 6);
    engine.enqueue(user);
    step();
    expect(user.cachedTokens).toBe(24);
    expect(engine.cacheStats().evictableTokens).toBe(0);
    // Needs 40: evicting the cached prefix would make room, but it is locked.
    const newcomer = seq(range(500, 39), 1);
    engine.enqueue(newcomer);
    step();
    expect(newcomer.state).toBe('waiting');
    expect(engine.cache.peek(range(100, 24))).toBe(24);
    expect(engine.cacheStats().evictions).toBe(0);
    while (!user.done) step();
    // user's end unlocks the prefix (and adds a page of its own to it): now the newcomer can evict.
    drain();
    expect(newcomer.done).toBe(true);
    expect(engine.cacheStats().evictions).toBeGreaterThan(0);
  });

  it('a decode that finds no free page retracts the request with the fewest output tokens; both still finish exactly', () => {
    const { engine, drain } = rig();
    const a = seq(range(100, 24), 12);
    const b = seq(range(200, 20), 12);
    engine.enqueue(a);
    engine.enqueue(b);
    drain();
    expect(a.outputIds).toHaveLength(12);
    expect(b.outputIds).toHaveLength(12);
    expect(a.retractions + b.retractions).toBeGreaterThan(0);
    expect(engine.kvStats().retractions).toBe(a.retractions + b.retractions);
    expect(engine.kvStats()).toMatchObject({ running: 0, waiting: 0 });
  });
});

describe('output lengths', () => {
  it('ignore_eos with max_new_tokens gives exactly that many tokens, finishing by length', () => {
    const { engine, drain } = rig();
    const seqs = [1, 7, 30].map((n, i) => seq(range(10 * i + 1, 5), n));
    for (const s of seqs) engine.enqueue(s);
    drain();
    expect(seqs.map((s) => s.outputIds.length)).toEqual([1, 7, 30]);
    expect(seqs.map((s) => s.finish)).toEqual([{ type: 'length' }, { type: 'length' }, { type: 'length' }]);
  });

  it('without ignore_eos the model stops with its EOS token at the drawn length, capped by max_new_tokens', () => {
    const { engine, drain } = rig();
    const early = seq(range(1, 5), 20, { ignoreEos: false, eosAt: 6 });
    const capped = seq(range(50, 5), 4, { ignoreEos: false, eosAt: 9 });
    engine.enqueue(early);
    engine.enqueue(capped);
    drain();
    expect(early.outputIds).toHaveLength(6);
    expect(early.outputIds[5]).toBe(EOS_TOKEN_ID);
    expect(early.finish).toEqual({ type: 'stop', matched: EOS_TOKEN_ID });
    expect(capped.outputIds).toHaveLength(4);
    expect(capped.finish).toEqual({ type: 'length' });
  });

  it('the drawn length is seeded: the same seeds give the same length, and the median is about right', () => {
    expect(outputLength(3, 12345, 64, 1)).toBe(outputLength(3, 12345, 64, 1));
    const draws = Array.from({ length: 2001 }, (_, i) => outputLength(0, i * 7919, 64, 1)).sort((x, y) => x - y);
    expect(draws[1000]).toBeGreaterThan(48);
    expect(draws[1000]).toBeLessThan(85);
    expect(new Set(draws).size).toBeGreaterThan(100);
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(1);
    // Sigma 0: every draw is the median.
    expect(outputLength(9, 9, 64, 0)).toBe(64);
  });
});

describe('flush and release', () => {
  it('flush empties the cache, is refused while a request runs, and later repeats miss', () => {
    const { engine, step, drain } = rig();
    const prompt = range(10, 12);
    engine.enqueue(seq(prompt, 2));
    step();
    expect(() => engine.flush()).toThrow(/while requests run/);
    drain();
    expect(engine.cacheStats().tokens).toBe(12);
    engine.flush();
    expect(engine.cacheStats()).toMatchObject({ tokens: 0, flushes: 1 });
    const again = seq(prompt, 2);
    engine.enqueue(again);
    drain();
    expect(again.cachedTokens).toBe(0);
  });

  it('a removed running request frees its own pages and its lock; its prompt, cached once prefilled, stays evictable', () => {
    const { engine, step } = rig();
    const a = seq(range(100, 30), 50);
    engine.enqueue(a);
    step();
    step();
    expect(engine.kvStats().usedTokens).toBe(32);
    // Prefilled: its 28 whole prompt tokens went into the tree at once, held by it.
    expect(engine.cacheStats()).toMatchObject({ tokens: 28, evictableTokens: 0 });
    expect(engine.remove(a)).toBe(true);
    expect(engine.kvStats()).toMatchObject({ usedTokens: 28, running: 0 });
    expect(engine.cacheStats()).toMatchObject({ tokens: 28, evictableTokens: 28 });
    expect(engine.begin(true).step).toBeNull();
  });

  it('a prompt is reusable once prefilled: a sibling admitted while the first still decodes hits it', () => {
    const { engine, step } = rig();
    const prompt = range(10, 20);
    const a = seq(prompt, 20);
    engine.enqueue(a);
    step(); // a prefilled; its 20 whole prompt tokens are in the tree
    const b = seq(prompt, 2);
    engine.enqueue(b);
    step();
    expect(a.done).toBe(false);
    // 19 matchable tokens (the last is always computed), 16 of them whole pages.
    expect(b.cachedTokens).toBe(16);
  });

  it('a step completed after its request left is skipped for that request', () => {
    const { engine } = rig();
    const a = seq(range(100, 8), 5);
    const b = seq(range(200, 8), 5);
    engine.enqueue(a);
    engine.enqueue(b);
    const { step } = engine.begin(true);
    engine.remove(a);
    const ended = engine.end(step!);
    expect(ended.progressed).toEqual([b]);
    expect(a.outputIds).toHaveLength(0);
  });
});
