// The realistic cost model inside the shared scheduler (sim/core/batch-pacer.ts under SGLang's
// scheduler), on vitest's fake clock: tokens arrive when their step's time is up and not before,
// a pause drops the step under way and produces nothing until continue, retract and abort free
// KV and cache locks, flush is refused while anything runs, the output length is drawn and
// capped, and the KV hooks hear of stored and evicted pages.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { outputLength } from '../../sim/core/output-length.ts';
import { resolveCostModel, type CostModelOptions } from '../../sim/core/cost-model.ts';
import { Sequence } from '../../sim/core/sequence.ts';
import { EOS_TOKEN_ID, seedOf } from '../../sim/core/tokens.ts';
import { Scheduler } from '../../sim/sglang/scheduler.ts';
import { tokenAt } from '../../sim/sglang/tokens.ts';

const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Page 4, 64 KV tokens, 1000 prefill tokens/s, decode 10 ms + 0 per request. */
function scheduler(extra: CostModelOptions = {}): Scheduler {
  return new Scheduler({
    tokenRate: 2000,
    maxRunningRequests: 16,
    dpSize: 1,
    cost: resolveCostModel({
      costModel: 'realistic',
      pageSize: 4,
      kvCacheTokens: 64,
      prefillTokensPerS: 1000,
      decodeStepMs: 10,
      decodeMsPerRequest: 0,
      ...extra,
    }),
  });
}

let rids = 0;
function seq(prompt: number[], maxNewTokens: number, ignoreEos = true): Sequence {
  const s = new Sequence(
    {
      rid: `p${rids++}`,
      promptIds: prompt,
      promptHash: seedOf(prompt, 0),
      seed: seedOf(prompt, 0),
      maxNewTokens,
      minNewTokens: 0,
      stopTokenIds: null,
      stopStrings: null,
      noStopTrim: false,
      ignoreEos,
      dpRank: 0,
    },
    tokenAt,
  );
  s.onUpdate = () => undefined;
  return s;
}

const state = (s: Scheduler): any => s.view();

describe('steps on the clock', () => {
  it('the first token comes when the prefill step ends, each next one a decode step later', async () => {
    const sched = scheduler();
    const s = seq(range(100, 50), 3);
    sched.submit([s]);
    await vi.advanceTimersByTimeAsync(49);
    expect(s.outputIds).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.outputIds).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(9);
    expect(s.outputIds).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.outputIds).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(10);
    expect(s.done).toBe(true);
    expect(sched.idle).toBe(true);
    sched.close();
  });

  it('steps shorter than a timer tick still add up: a thousand tokens of 0.1 ms take 100 ms', async () => {
    const sched = scheduler({ decodeStepMs: 0.1, kvCacheTokens: 4096 });
    const s = seq(range(1, 1), 1000);
    sched.submit([s]);
    await vi.advanceTimersByTimeAsync(95);
    expect(s.done).toBe(false);
    await vi.advanceTimersByTimeAsync(10);
    expect(s.outputIds).toHaveLength(1000);
    sched.close();
  });
});

describe('pauses, aborts and flush', () => {
  it('in_place drops the step under way and produces nothing until continue', async () => {
    const sched = scheduler();
    const s = seq(range(100, 20), 5);
    sched.submit([s]);
    await vi.advanceTimersByTimeAsync(25);
    expect(s.outputIds).toHaveLength(1);
    sched.pause('in_place');
    await vi.advanceTimersByTimeAsync(500);
    expect(s.outputIds).toHaveLength(1);
    expect(state(sched).kv).toMatchObject({ running: 1 });
    sched.resume();
    await vi.advanceTimersByTimeAsync(40);
    expect(s.outputIds).toHaveLength(5);
    expect(s.finish).toEqual({ type: 'length' });
    sched.close();
  });

  it('retract frees every running request’s KV; after continue they recompute and finish exactly', async () => {
    const sched = scheduler();
    const a = seq(range(100, 20), 6);
    const b = seq(range(200, 12), 6);
    sched.submit([a, b]);
    await vi.advanceTimersByTimeAsync(45);
    expect(a.outputIds.length).toBeGreaterThan(0);
    sched.pause('retract');
    expect(state(sched).kv).toMatchObject({ running: 0, waiting: 2, heldTokens: 0 });
    expect([a.retractions, b.retractions]).toEqual([1, 1]);
    sched.resume();
    await vi.advanceTimersByTimeAsync(200);
    expect([a.outputIds.length, b.outputIds.length]).toEqual([6, 6]);
    expect(state(sched).kv).toMatchObject({ running: 0, waiting: 0, heldTokens: 0 });
    sched.close();
  });

  it('an aborted request frees its pages and its lock on the cached prefix', async () => {
    const sched = scheduler();
    const first = seq(range(100, 20), 1);
    sched.submit([first]);
    await vi.advanceTimersByTimeAsync(30);
    expect(first.done).toBe(true);
    const again = seq(range(100, 22), 50);
    sched.submit([again]);
    await vi.advanceTimersByTimeAsync(30);
    expect(again.cachedTokens).toBe(20);
    expect(state(sched).cache.evictableTokens).toBe(0);
    expect(sched.abort(again.rid, false)).toBe(1);
    expect(again.finish).toMatchObject({ type: 'abort' });
    expect(state(sched).kv).toMatchObject({ running: 0, heldTokens: 0 });
    expect(state(sched).cache).toMatchObject({ tokens: 20, evictableTokens: 20 });
    sched.close();
  });

  it('flush is refused while a request runs and empties the cache when idle', async () => {
    const sched = scheduler();
    let flushed = 0;
    sched.hooks = { flushed: () => flushed++ };
    const s = seq(range(100, 20), 4);
    sched.submit([s]);
    await vi.advanceTimersByTimeAsync(25);
    expect(sched.flushCache()).toBe(false);
    expect(flushed).toBe(0);
    await vi.advanceTimersByTimeAsync(100);
    expect(state(sched).cache.tokens).toBe(20);
    expect(sched.flushCache()).toBe(true);
    expect(flushed).toBe(1);
    expect(state(sched).cache).toMatchObject({ tokens: 0, flushes: 1 });
    sched.close();
  });
});

describe('lengths and hooks', () => {
  it('without ignore_eos a request ends with EOS at its drawn length, or by length when that is shorter', async () => {
    const sched = scheduler({ outputLenMedian: 8, outputLenSigma: 0.5, randomSeed: 11, kvCacheTokens: 4096 });
    const seqs = range(0, 12).map((i) => seq(range(100 * i + 1, 6), 10, false));
    sched.submit(seqs);
    await vi.advanceTimersByTimeAsync(1000);
    for (const s of seqs) {
      const drawn = outputLength(11, s.params.seed, 8, 0.5);
      if (drawn <= 10) {
        expect(s.outputIds).toHaveLength(drawn);
        expect(s.finish).toEqual({ type: 'stop', matched: EOS_TOKEN_ID });
      } else {
        expect(s.outputIds).toHaveLength(10);
        expect(s.finish).toEqual({ type: 'length' });
      }
    }
    // Both ends happened, so neither branch above went untested.
    expect(new Set(seqs.map((s) => s.finish?.type))).toEqual(new Set(['stop', 'length']));
    sched.close();
  });

  it('the KV hooks hear stored pages at a request’s end and removed ones at eviction', async () => {
    const sched = scheduler();
    const stored: Array<[number[], number]> = [];
    const removed: Array<[number[], number]> = [];
    sched.hooks = {
      stored: (tokens, from) => stored.push([[...tokens], from]),
      removed: (tokens, from) => removed.push([[...tokens], from]),
    };
    const a = seq(range(100, 40), 1);
    sched.submit([a]);
    await vi.advanceTimersByTimeAsync(100);
    expect(stored).toEqual([[range(100, 40), 0]]);
    const b = seq(range(300, 40), 1);
    sched.submit([b]);
    await vi.advanceTimersByTimeAsync(100);
    expect(removed).toEqual([[range(100, 40), 0]]);
    expect(stored[1]).toEqual([range(300, 40), 0]);
    sched.close();
  });
});
