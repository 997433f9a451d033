// prefix_hash (src/fleet/policies/prefix-hash.ts) on SMG's cases: prompts sharing their first
// prefix_token_count tokens (characters, for text) share an engine and different prefixes spread;
// an engine over load_factor × the average in flight (the incoming request counted) passes the
// request to the least loaded engine within the bound, or keeps it when all are over; a request
// without a prompt goes to the least loaded.

import { describe, expect, it } from 'vitest';
import { PrefixHashPolicy } from '../../../src/fleet/policies/prefix-hash.ts';
import { fleet, loads, request } from '../../fixtures/policy-fleet.ts';

const ws = fleet(3);
const p = new PrefixHashPolicy({ prefixTokenCount: 5, loadFactor: 1.25 });

describe('the prefix picks the engine', () => {
  it('the same first tokens, whatever follows, go to one engine; different prefixes spread', () => {
    const home = p.pick(request(ws, { tokens: [1, 2, 3, 4, 5, 100, 200] }))!;
    expect(home.reason).toBe('prefix_hash');
    expect(p.pick(request(ws, { tokens: [1, 2, 3, 4, 5, 999, 888, 777] }))!.worker).toBe(home.worker);
    const spread = new Set(Array.from({ length: 100 }, (_, i) => p.pick(request(ws, { tokens: [i, i + 1, i + 2, i + 3] }))!.worker.id));
    expect(spread.size).toBe(3);
  });

  it('text: the first prefix_token_count characters', () => {
    const home = p.pick(request(ws, { text: 'abcde and then anything' }))!.worker;
    expect(p.pick(request(ws, { text: 'abcde, something else' }))!.worker).toBe(home);
  });
});

describe('the load bound', () => {
  const tokens = [1, 2, 3, 4, 5];
  const home = p.pick(request(ws, { tokens }))!.worker;
  const [first, second] = ws.filter((w) => w !== home);

  it('within the bound, the prefix’s engine keeps it (4 of 9 in flight: bound 1.25 × 10/3 ≈ 4.17)', () => {
    expect(p.pick(request(ws, { tokens }, loads({ [home.id]: 4, [first!.id]: 3, [second!.id]: 2 })))).toEqual({ worker: home, reason: 'prefix_hash' });
  });

  it('over it, the least loaded engine within the bound takes the request (SMG’s load-balance walk)', () => {
    expect(p.pick(request(ws, { tokens }, loads({ [home.id]: 5, [first!.id]: 3, [second!.id]: 1 })))).toEqual({ worker: second, reason: 'overload' });
    expect(p.pick(request(ws, { tokens }, loads({ [home.id]: 8, [first!.id]: 0, [second!.id]: 1 })))).toEqual({ worker: first, reason: 'overload' });
  });

  it('an idle fleet is never over the bound', () => {
    expect(p.pick(request(ws, { tokens }))).toEqual({ worker: home, reason: 'prefix_hash' });
  });
});

describe('no prompt', () => {
  it('goes to the least loaded engine', () => {
    expect(p.pick(request(ws, {}, loads({ w0: 2, w1: 0, w2: 1 })))).toEqual({ worker: ws[1], reason: 'min_load' });
    expect(p.pick(request(ws, { text: '' }, loads({ w0: 0, w1: 3 })))).toEqual({ worker: ws[0], reason: 'min_load' });
  });
});
