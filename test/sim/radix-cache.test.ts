// The realistic cost model's prefix cache (sim/core/radix-cache.ts) on a stepped clock: matches
// and inserts truncated to whole pages, a match that splits the node it ends in and refreshes
// access times, lock refs that keep a path from eviction, least-recently-used leaves evicted
// first and only as much as asked, and the stored/removed notices the KV-event relay reads.

import { describe, expect, it } from 'vitest';
import { RadixCache } from '../../sim/core/radix-cache.ts';

const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function cacheOnClock(pageSize = 4) {
  let t = 0;
  const events: Array<{ kind: 'stored' | 'removed'; tokens: number[]; from: number }> = [];
  const cache = new RadixCache(pageSize, () => t, {
    stored: (tokens, from) => events.push({ kind: 'stored', tokens: [...tokens], from }),
    removed: (tokens, from) => events.push({ kind: 'removed', tokens: [...tokens], from }),
  });
  return {
    cache,
    events,
    at: (ms: number) => {
      t = ms;
    },
  };
}

describe('page-aligned match and insert', () => {
  it('inserts whole pages only and matches whole pages only', () => {
    const { cache } = cacheOnClock(4);
    expect(cache.insert(range(1, 10))).toBe(0);
    // 10 tokens are two whole pages: the last two tokens are not kept.
    expect(cache.tokens).toBe(8);
    expect(cache.match(range(1, 10)).length).toBe(8);
    expect(cache.match(range(1, 7)).length).toBe(4);
    expect(cache.match(range(1, 3)).length).toBe(0);
    // A difference inside the second page leaves the first page only.
    expect(cache.match([1, 2, 3, 4, 5, 99, 7, 8]).length).toBe(4);
    expect(cache.match([99, ...range(2, 9)]).length).toBe(0);
  });

  it('insert reports the tokens already cached and adds only the rest', () => {
    const { cache, events } = cacheOnClock(4);
    cache.insert(range(1, 8));
    expect(cache.insert(range(1, 13))).toBe(8);
    expect(cache.tokens).toBe(12);
    // Shares the first page, then diverges: one new page under the split point.
    expect(cache.insert([1, 2, 3, 4, 50, 51, 52, 53])).toBe(4);
    expect(cache.tokens).toBe(16);
    expect(events.filter((e) => e.kind === 'stored').map((e) => [e.tokens, e.from])).toEqual([
      [range(1, 8), 0],
      [range(1, 12), 8],
      [[1, 2, 3, 4, 50, 51, 52, 53], 4],
    ]);
  });

  it('a match ending inside a node splits it there, and the halves keep the tokens', () => {
    const { cache } = cacheOnClock(4);
    cache.insert(range(1, 12));
    const m = cache.match(range(1, 6));
    expect(m.length).toBe(4);
    expect(m.node.key).toEqual(range(1, 4));
    expect([...m.node.children.values()].map((c) => c.key)).toEqual([range(5, 8)]);
    expect(cache.tokens).toBe(12);
    expect(cache.match(range(1, 12)).length).toBe(12);
  });

  it('peek tells the match without splitting or touching', () => {
    const { cache, at } = cacheOnClock(4);
    at(1);
    cache.insert(range(1, 8));
    at(5);
    expect(cache.peek(range(1, 6))).toBe(4);
    const root = cache.rootNode;
    const [only] = root.children.values();
    expect(only.key).toEqual(range(1, 8));
    expect(only.accessedAt).toBe(1);
  });
});

describe('lock refs and eviction', () => {
  it('evicts nothing a lock holds, and the lock covers the whole path above the node', () => {
    const { cache } = cacheOnClock(4);
    cache.insert(range(1, 8));
    cache.insert([...range(1, 4), 70, 71, 72, 73]);
    const held = cache.match(range(1, 8));
    cache.lock(held.node);
    // The locked path is [1..4] + [5..8]; only the sibling page [70..73] is free to go.
    expect(cache.evictableTokens).toBe(4);
    expect(cache.evict(100)).toBe(4);
    expect(cache.tokens).toBe(8);
    expect(cache.peek(range(1, 8))).toBe(8);
    cache.unlock(held.node);
    expect(cache.evictableTokens).toBe(8);
    expect(cache.evict(100)).toBe(8);
    expect(cache.tokens).toBe(0);
  });

  it('two locks on one path need two unlocks before it can go', () => {
    const { cache } = cacheOnClock(4);
    cache.insert(range(1, 4));
    const a = cache.match(range(1, 5));
    const b = cache.match(range(1, 5));
    cache.lock(a.node);
    cache.lock(b.node);
    cache.unlock(a.node);
    expect(cache.evict(4)).toBe(0);
    cache.unlock(b.node);
    expect(cache.evict(4)).toBe(4);
    expect(() => cache.unlock(b.node)).toThrow(/unlock without a lock/);
  });

  it('evicts the least recently used leaf first, by last access time, and stops once enough is freed', () => {
    const { cache, events, at } = cacheOnClock(4);
    at(1);
    cache.insert(range(100, 4));
    at(2);
    cache.insert(range(200, 4));
    at(3);
    cache.insert(range(300, 4));
    // A match refreshes 100's access time: it is now the most recent.
    at(4);
    cache.match(range(100, 5));
    events.length = 0;
    expect(cache.evict(1)).toBe(4);
    expect(cache.evict(4)).toBe(4);
    expect(events.map((e) => e.tokens[0])).toEqual([200, 300]);
    expect(cache.peek(range(100, 4))).toBe(4);
    expect(cache.evictions).toBe(2);
    expect(cache.evictedTokens).toBe(8);
  });

  it('a parent whose children all went becomes a leaf in turn', () => {
    const { cache, events, at } = cacheOnClock(4);
    at(1);
    cache.insert([...range(1, 4), ...range(10, 4)]);
    // Splits [1..4] off: both children and the parent share this access time.
    at(2);
    cache.insert([...range(1, 4), ...range(20, 4)]);
    at(3);
    cache.insert(range(50, 4));
    events.length = 0;
    // The two children of [1..4] are older than [50..53]; their parent goes before it too.
    expect(cache.evict(12)).toBe(12);
    const removed = events.map((e) => [e.tokens, e.from]);
    expect(removed.slice(0, 2).sort((a, b) => (a[0] as number[])[4] - (b[0] as number[])[4])).toEqual([
      [[...range(1, 4), ...range(10, 4)], 4],
      [[...range(1, 4), ...range(20, 4)], 4],
    ]);
    expect(removed[2]).toEqual([range(1, 4), 0]);
    expect(cache.peek(range(50, 4))).toBe(4);
  });

  it('reset empties the tree, and refuses while a lock is held', () => {
    const { cache } = cacheOnClock(4);
    cache.insert(range(1, 8));
    const m = cache.match(range(1, 8));
    cache.lock(m.node);
    expect(() => cache.reset()).toThrow(/while requests hold it/);
    cache.unlock(m.node);
    cache.reset();
    expect(cache.tokens).toBe(0);
    expect(cache.match(range(1, 8)).length).toBe(0);
  });
});
