// The listing's row cache: a row is serialised once while what it was made from stays the same,
// again as soon as any dependency changes, and forgotten once it is no longer listed.

import { describe, expect, it } from 'vitest';
import { ListingCache } from '../../src/fleet/listing-cache.ts';

describe('ListingCache', () => {
  it('serialises a row once while its dependencies are the same objects and values', () => {
    const cache = new ListingCache();
    const facts = { id: 'a', url: 'http://a' };
    let builds = 0;
    const build = () => {
      builds++;
      return { ...facts, state: 'serving', load: 0 };
    };
    cache.begin();
    const first = cache.json('a', [facts, 'serving', 0], build);
    cache.end();
    cache.begin();
    const second = cache.json('a', [facts, 'serving', 0], build);
    cache.end();
    expect(first).toBe(JSON.stringify({ id: 'a', url: 'http://a', state: 'serving', load: 0 }));
    expect(second).toBe(first);
    expect(builds).toBe(1);
  });

  it('serialises it again when any dependency changed: a value, or a replaced object with equal content', () => {
    const cache = new ListingCache();
    const facts = { id: 'a' };
    cache.begin();
    cache.json('a', [facts, 'serving', 0], () => ({ state: 'serving', load: 0 }));
    expect(cache.json('a', [facts, 'serving', 1], () => ({ state: 'serving', load: 1 }))).toBe('{"state":"serving","load":1}');
    expect(cache.json('a', [facts, 'paused', 1], () => ({ state: 'paused', load: 1 }))).toBe('{"state":"paused","load":1}');
    expect(cache.json('a', [{ id: 'a' }, 'paused', 1], () => ({ state: 'paused', load: 1, replaced: true }))).toBe(
      '{"state":"paused","load":1,"replaced":true}',
    );
    // A different number of dependencies is a change too.
    expect(cache.json('a', [facts, 'paused'], () => ({ short: true }))).toBe('{"short":true}');
    cache.end();
    expect(cache.size).toBe(1);
  });

  it('forgets the rows a listing no longer asked for, and keeps the others', () => {
    const cache = new ListingCache();
    cache.begin();
    for (const id of ['a', 'b', 'c']) cache.json(id, [id], () => ({ id }));
    cache.end();
    expect(cache.size).toBe(3);
    cache.begin();
    cache.json('a', ['a'], () => ({ id: 'a' }));
    cache.json('c', ['c'], () => ({ id: 'c' }));
    cache.end();
    expect(cache.size).toBe(2);
    let rebuilt = 0;
    cache.begin();
    cache.json('a', ['a'], () => (rebuilt++, { id: 'a' }));
    cache.json('b', ['b'], () => (rebuilt++, { id: 'b' }));
    cache.end();
    // `a` was kept (not built again); `b` had been forgotten; `c` goes now.
    expect(rebuilt).toBe(1);
    expect(cache.size).toBe(2);
  });
});
