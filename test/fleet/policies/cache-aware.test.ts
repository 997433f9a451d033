// cache_aware (src/fleet/policies/cache-aware.ts) on the cases SMG's own tests and docs give: the
// imbalance switch needs both thresholds; a match above the cache threshold goes to its engine,
// one at or below it to the least loaded; the tree holds routed prompts only, even while
// imbalanced; each tenant is cut to max_tree_size at the eviction interval, least recently used
// first; a removed or flushed engine's prefixes are forgotten; and the event-driven mode over a
// hand-fed KV-event index (most leading blocks, ties by load then blocks held; no overlap or an
// imbalance: the least loaded; an empty index: the tree).

import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy, type CacheAwareSettings } from '../../../src/fleet/policies/cache-aware.ts';
import type { KvEventIndex, KvOverlap } from '../../../src/fleet/policies/kv-event-index.ts';
import type { Candidate, RoutingInputs } from '../../../src/fleet/policies/policy.ts';
import { fleet, loads, request, steppedClock } from '../../fixtures/policy-fleet.ts';

const SETTINGS: CacheAwareSettings = { cacheThreshold: 0.5, balanceAbsThreshold: 5, balanceRelThreshold: 2, evictionIntervalSecs: 60, maxTreeSize: 1000 };

function policy(patch: Partial<CacheAwareSettings> = {}, kvIndex?: KvEventIndex, clock = steppedClock()) {
  return new CacheAwarePolicy({ ...SETTINGS, ...patch }, { clock, kvIndex });
}

/** What the router does: pick, then record the request as routed. */
function route(p: CacheAwarePolicy, candidates: Candidate[], inputs: RoutingInputs, inFlight = loads()) {
  const d = p.pick(request(candidates, inputs, inFlight))!;
  p.routed(d.worker.id, inputs);
  return d;
}

const ws = fleet(3);

describe('balanced: the approximate tree', () => {
  it('the same prompt and its prefixes go where the first went (SMG: test_cache_aware_with_balanced_load)', () => {
    const p = policy();
    const first = route(p, ws, { text: 'hello world' });
    expect(first.reason).toBe('min_load');
    for (const text of ['hello world', 'hello world!', 'hello wor']) {
      const d = route(p, ws, { text });
      expect(d.worker).toBe(first.worker);
      expect(d.reason).toBe('cache_hit');
    }
  });

  it('a match at or below the threshold goes to the least loaded, above it to its engine', () => {
    const p = policy({ cacheThreshold: 0.5 });
    route(p, ws, { text: 'abcdefghij' }); // to w0 (all idle, fewest routed)
    const busy = loads({ w0: 1, w1: 1 });
    // 5 of 10 characters: 0.5 is not above 0.5.
    const at = route(p, ws, { text: 'abcde12345' }, busy);
    expect(at).toEqual({ worker: ws[2], reason: 'min_load' });
    // 6 of 10: above.
    const above = route(p, ws, { text: 'abcdef1234' }, busy);
    expect(above).toEqual({ worker: ws[0], reason: 'cache_hit' });
  });

  it('the least loaded ties go to the engine that was routed fewer requests, then to candidate order', () => {
    const p = policy();
    const order = ['one', 'two', 'three', 'four'].map((text) => route(p, ws, { text }).worker.id);
    expect(order).toEqual(['w0', 'w1', 'w2', 'w0']);
  });

  it('token ids use the token tree, by whole 16-token pages', () => {
    const p = policy();
    const ids = Array.from({ length: 64 }, (_, i) => i + 1);
    const home = route(p, ws, { tokens: ids }).worker;
    // 48 of 60 tokens shared: 0.8.
    expect(route(p, ws, { tokens: [...ids.slice(0, 48), 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7] })).toEqual({ worker: home, reason: 'cache_hit' });
    // 15 shared tokens are no page: nothing matches.
    const short = route(p, ws, { tokens: [...ids.slice(0, 15), ...Array(45).fill(9)] }, loads({ [home.id]: 1 }));
    expect(short.reason).toBe('min_load');
    expect(short.worker).not.toBe(home);
  });

  it('only candidates count: a prefix held by an excluded engine is no hit', () => {
    const p = policy();
    const home = route(p, ws, { text: 'a long shared system prompt' }).worker;
    const others = ws.filter((w) => w !== home);
    expect(route(p, others, { text: 'a long shared system prompt' }).reason).toBe('min_load');
  });
});

describe('the imbalance switch: both thresholds', () => {
  const text = 'the same prompt every time';

  function homed() {
    const p = policy({ balanceAbsThreshold: 5, balanceRelThreshold: 2 });
    const home = route(p, ws.slice(0, 2), { text }).worker;
    return { p, home, other: ws.slice(0, 2).find((w) => w !== home)! };
  }

  it('abs and rel both crossed: the least loaded, cache ignored (SMG: test_cache_aware_with_imbalanced_load)', () => {
    const { p, home, other } = homed();
    // 20 vs 0: 20 - 0 > 5 and 20 > 2 × 0.
    for (let i = 0; i < 5; i++) expect(route(p, ws.slice(0, 2), { text }, loads({ [home.id]: 20 }))).toEqual({ worker: other, reason: 'imbalance' });
  });

  it('abs crossed, rel not: still the cache (13 vs 7: 6 > 5, but 13 is not above 2 × 7); both crossed at 15 vs 7', () => {
    const { p, home, other } = homed();
    expect(route(p, ws.slice(0, 2), { text }, loads({ [home.id]: 13, [other.id]: 7 }))).toEqual({ worker: home, reason: 'cache_hit' });
    // 15 vs 7: 8 > 5 and 15 > 14.
    expect(route(p, ws.slice(0, 2), { text }, loads({ [home.id]: 15, [other.id]: 7 }))).toEqual({ worker: other, reason: 'imbalance' });
  });

  it('rel crossed, abs not: still the cache (5 vs 0: 5 is not above 5)', () => {
    const { p, home } = homed();
    expect(route(p, ws.slice(0, 2), { text }, loads({ [home.id]: 5 }))).toEqual({ worker: home, reason: 'cache_hit' });
  });

  it('the prompt routed while imbalanced is recorded for the engine that took it', () => {
    const { p, home, other } = homed();
    route(p, ws.slice(0, 2), { text: 'a new prompt' }, loads({ [home.id]: 20 }));
    // Balanced again, with the first engine busier: the new prompt's engine holds it.
    expect(route(p, ws.slice(0, 2), { text: 'a new prompt' }, loads({ [home.id]: 1 }))).toEqual({ worker: other, reason: 'cache_hit' });
  });
});

describe('eviction by size at the interval', () => {
  it('each tenant is cut to max_tree_size at the first pick after the interval, least recently used first', () => {
    const clock = steppedClock();
    const p = policy({ maxTreeSize: 10, evictionIntervalSecs: 30 }, undefined, clock);
    const [a] = ws;
    const only = [a!];
    route(p, only, { text: 'old prompt' }); // 10 characters
    route(p, only, { text: 'new prompt' }); // 10 more: 20 > 10, not yet evicted
    expect(p.textTree.sizeOf('w0')).toBe(20);
    clock.advance(29_999);
    p.pick(request(only, { text: 'x' }));
    expect(p.textTree.sizeOf('w0')).toBe(20);
    clock.advance(1);
    p.pick(request(only, { text: 'x' }));
    expect(p.textTree.sizeOf('w0')).toBe(10);
    expect(p.textTree.match('new prompt', () => true).matched).toBe(10);
    expect(p.textTree.match('old prompt', () => true).matched).toBe(0);
  });
});

describe('forgetting', () => {
  it('a removed engine and a flushed engine lose their prefixes; the others keep theirs', () => {
    const p = policy();
    const first = route(p, ws, { text: 'alpha prompt' }).worker;
    const second = route(p, ws, { text: 'beta prompt' }, loads({ [first.id]: 1 })).worker;
    p.cacheFlushed(first.id);
    expect(p.pick(request(ws, { text: 'alpha prompt' }, loads({ [second.id]: 1 })))!.reason).toBe('min_load');
    expect(p.pick(request(ws, { text: 'beta prompt' }))).toEqual({ worker: second, reason: 'cache_hit' });
    p.workerRemoved(second.id);
    expect(p.pick(request(ws, { text: 'beta prompt' }))!.reason).toBe('min_load');
  });
});

/** A KV-event index fed by hand: per worker, the blocks it holds (each block a run of 16 tokens). */
class HandIndex implements KvEventIndex {
  readonly held = new Map<string, number[][]>();
  size(): number {
    let n = 0;
    for (const blocks of this.held.values()) n += blocks.length;
    return n;
  }
  overlap(_model: string | undefined, tokens: readonly number[]): KvOverlap {
    const scores = new Map<string, number>();
    const blocks = new Map<string, number>();
    for (const [id, held] of this.held) {
      blocks.set(id, held.length);
      let n = 0;
      while (n < held.length && (n + 1) * 16 <= tokens.length && held[n]!.every((t, j) => t === tokens[n * 16 + j])) n++;
      scores.set(id, n);
    }
    return { scores, blocks };
  }
}

describe('event-driven: the KV-event index', () => {
  const page = (v: number) => Array(16).fill(v);
  const prompt = [...page(1), ...page(2), ...page(3)];

  it('the engine holding the most leading blocks wins, whatever the tree says', () => {
    const index = new HandIndex();
    index.held.set('w1', [page(1)]);
    index.held.set('w2', [page(1), page(2)]);
    const p = policy({}, index);
    expect(route(p, ws, { tokens: prompt })).toEqual({ worker: ws[2], reason: 'cache_hit' });
  });

  it('equal overlap: the lower load, then the fewer blocks held', () => {
    const index = new HandIndex();
    index.held.set('w0', [page(1), page(9), page(9)]);
    index.held.set('w1', [page(1)]);
    const p = policy({}, index);
    expect(route(p, ws, { tokens: prompt }, loads({ w1: 2, w0: 1 }))).toEqual({ worker: ws[0], reason: 'cache_hit' });
    expect(route(p, ws, { tokens: prompt }, loads({ w1: 1, w0: 1 }))).toEqual({ worker: ws[1], reason: 'cache_hit' });
  });

  it('no overlap: the least loaded; an imbalance: the least loaded before any overlap is read', () => {
    const index = new HandIndex();
    index.held.set('w0', [page(7)]);
    const p = policy({}, index);
    expect(route(p, ws, { tokens: prompt }, loads({ w0: 1, w1: 1 }))).toEqual({ worker: ws[2], reason: 'min_load' });
    index.held.set('w0', [page(1), page(2), page(3)]);
    expect(route(p, ws, { tokens: prompt }, loads({ w0: 20, w1: 1 }))).toEqual({ worker: ws[2], reason: 'imbalance' });
  });

  it('an empty index (startup, reconnect) leaves routing to the token tree; text never reads the index', () => {
    const index = new HandIndex();
    const p = policy({}, index);
    const home = route(p, ws, { tokens: prompt }).worker;
    expect(route(p, ws, { tokens: prompt }, loads({ [home.id]: 1 }))).toEqual({ worker: home, reason: 'cache_hit' });
    index.held.set('w2', [page(1)]);
    expect(route(p, ws, { text: 'plain text' }).reason).toBe('min_load');
  });
});
