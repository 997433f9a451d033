// cache_aware's approximate tree (src/fleet/policies/prefix-tree.ts): the longest routed prefix
// and who holds it, among the eligible tenants only; per-tenant sizes; SMG's evict_tenant_by_size
// (every tenant cut to the bound, least recently used leaves first, other tenants untouched); a
// tenant forgotten whole; and token prompts matched by whole 16-token pages only.

import { describe, expect, it } from 'vitest';
import { PrefixTree } from '../../../src/fleet/policies/prefix-tree.ts';
import { PAGE_TOKENS, PAGE_UNITS, pagesOf, tokensIn } from '../../../src/fleet/policies/token-pages.ts';

const anyone = () => true;

describe('match and insert', () => {
  it('an empty tree matches nothing; a routed prompt matches itself and its prefixes, for its tenant', () => {
    const t = new PrefixTree();
    expect(t.match('hello world', anyone)).toEqual({ matched: 0, tenant: undefined });
    t.insert('hello world', 'a');
    expect(t.match('hello world', anyone)).toEqual({ matched: 11, tenant: 'a' });
    expect(t.match('hello', anyone)).toEqual({ matched: 5, tenant: 'a' });
    expect(t.match('hello world, again', anyone)).toEqual({ matched: 11, tenant: 'a' });
    expect(t.match('goodbye', anyone)).toEqual({ matched: 0, tenant: undefined });
  });

  it('two prompts that part ways split the edge: each keeps its whole prompt, the shared part is held by both', () => {
    const t = new PrefixTree();
    t.insert('hello world', 'a');
    t.insert('hello there', 'b');
    expect(t.match('hello world', anyone)).toEqual({ matched: 11, tenant: 'a' });
    expect(t.match('hello there', anyone)).toEqual({ matched: 11, tenant: 'b' });
    // The shared "hello " is held by both; the one used last wins it.
    expect(t.match('hello you', anyone)).toEqual({ matched: 6, tenant: 'b' });
    t.insert('hello world', 'a');
    expect(t.match('hello you', anyone)).toEqual({ matched: 6, tenant: 'a' });
    expect(t.sizeOf('a')).toBe(11);
    expect(t.sizeOf('b')).toBe(11);
  });

  it('only eligible tenants count: a longer match held by an ineligible one gives way to the eligible one', () => {
    const t = new PrefixTree();
    t.insert('system: be brief. user: hi', 'a');
    t.insert('system: be brief. user: hello there', 'b');
    const onlyA = (id: string) => id === 'a';
    expect(t.match('system: be brief. user: hello there', anyone)).toEqual({ matched: 35, tenant: 'b' });
    // "system: be brief. user: h" is what a holds of it.
    expect(t.match('system: be brief. user: hello there', onlyA)).toEqual({ matched: 25, tenant: 'a' });
    expect(t.match('system: be brief. user: hello there', () => false)).toEqual({ matched: 0, tenant: undefined });
  });
});

describe('evictTenantBySize (SMG: per tenant, least recently used leaves first)', () => {
  it('cuts every tenant over the bound to it, oldest prompts first, and leaves tenants under it alone', () => {
    const t = new PrefixTree();
    t.insert('aaaaaaaaaa', 'a'); // 10, oldest
    t.insert('bbbbbbbbbb', 'b'); // b's only prompt, older than a's next two
    t.insert('cccccccccc', 'a');
    t.insert('dddddddddd', 'a'); // newest
    expect(t.sizeOf('a')).toBe(30);
    t.evictTenantBySize(20);
    expect(t.sizeOf('a')).toBe(20);
    expect(t.match('aaaaaaaaaa', anyone).matched).toBe(0);
    expect(t.match('cccccccccc', anyone)).toEqual({ matched: 10, tenant: 'a' });
    expect(t.match('dddddddddd', anyone)).toEqual({ matched: 10, tenant: 'a' });
    // b held 10 ≤ 20: its older prompt stays.
    expect(t.match('bbbbbbbbbb', anyone)).toEqual({ matched: 10, tenant: 'b' });
  });

  it('a prompt used again is recent again, whoever routed it first', () => {
    const t = new PrefixTree();
    t.insert('first prompt', 'a');
    t.insert('second prompt', 'a');
    t.insert('first prompt', 'a'); // now the most recent
    t.evictTenantBySize(12);
    expect(t.match('first prompt', anyone)).toEqual({ matched: 12, tenant: 'a' });
    expect(t.match('second prompt', anyone).matched).toBe(0);
  });

  it('a shared prefix goes last: after the tenant’s own tails, once it is the tenant’s leaf', () => {
    const t = new PrefixTree();
    t.insert('shared prefix one', 'a');
    t.insert('shared prefix two', 'a');
    t.insert('shared prefix two', 'b');
    expect(t.sizeOf('a')).toBe(20); // "shared prefix " 14 + "one" 3 + "two" 3
    t.evictTenantBySize(14);
    // a lost both tails (each leaf, oldest first, until 14), keeps the shared part.
    expect(t.sizeOf('a')).toBe(14);
    expect(t.match('shared prefix one', (id) => id === 'a')).toEqual({ matched: 14, tenant: 'a' });
    t.evictTenantBySize(0);
    expect(t.sizeOf('a')).toBe(0);
    expect(t.sizeOf('b')).toBe(0);
    expect(t.match('shared prefix two', anyone)).toEqual({ matched: 0, tenant: undefined });
    expect(t.tenants()).toEqual([]);
  });
});

describe('removeTenant', () => {
  it('forgets one tenant everywhere and keeps what others hold of the same nodes', () => {
    const t = new PrefixTree();
    t.insert('hello world', 'a');
    t.insert('hello there', 'b');
    t.removeTenant('a');
    expect(t.sizeOf('a')).toBe(0);
    expect(t.match('hello world', anyone)).toEqual({ matched: 6, tenant: 'b' });
    expect(t.match('hello there', anyone)).toEqual({ matched: 11, tenant: 'b' });
    expect(t.tenants()).toEqual(['b']);
  });
});

describe('token pages', () => {
  const ids = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + i);

  it('encodes only whole 16-token pages, two code units a token (ids up to 2^32 - 1)', () => {
    expect(pagesOf(ids(15))).toBe('');
    expect(pagesOf(ids(20)).length).toBe(PAGE_UNITS);
    expect(pagesOf([...ids(15), 4_294_967_295])).not.toBe(pagesOf([...ids(15), 65_535]));
    expect(tokensIn(PAGE_UNITS)).toBe(PAGE_TOKENS);
  });

  it('matches page by page: a prompt sharing 20 tokens shares one page; sizes count tokens', () => {
    const t = new PrefixTree(PAGE_UNITS, PAGE_TOKENS);
    t.insert(pagesOf(ids(48)), 'a');
    expect(t.sizeOf('a')).toBe(48);
    const other = [...ids(20), ...ids(28, 1000)];
    expect(tokensIn(t.match(pagesOf(other), anyone).matched)).toBe(16);
    expect(tokensIn(t.match(pagesOf(ids(40)), anyone).matched)).toBe(32);
    expect(t.match(pagesOf([9, ...ids(47)]), anyone)).toEqual({ matched: 0, tenant: undefined });
  });
});
