// power_of_two (src/fleet/policies/power-of-two.ts): two distinct random candidates, the less
// loaded of them; both engines' reported KV use when both report it, else requests in flight.

import { describe, expect, it } from 'vitest';
import type { LoadReport } from '../../../src/fleet/policies/policy.ts';
import { PowerOfTwoPolicy } from '../../../src/fleet/policies/power-of-two.ts';
import { fleet, loads, request, seededRandom } from '../../fixtures/policy-fleet.ts';

describe('power_of_two', () => {
  it('of two engines, always the less loaded (any draw picks both)', () => {
    const p = new PowerOfTwoPolicy(seededRandom(11));
    const ws = fleet(2);
    for (let i = 0; i < 50; i++) expect(p.pick(request(ws, {}, loads({ w0: 5, w1: 2 })))).toEqual({ worker: ws[1], reason: 'power_of_two' });
  });

  it('never the most loaded of three, and each of the others sometimes', () => {
    const p = new PowerOfTwoPolicy(seededRandom(5));
    const ws = fleet(3);
    const seen = new Map<string, number>();
    for (let i = 0; i < 300; i++) {
      const id = p.pick(request(ws, {}, loads({ w0: 9, w1: 1, w2: 4 })))!.worker.id;
      seen.set(id, (seen.get(id) ?? 0) + 1);
    }
    expect(seen.has('w0')).toBe(false);
    // w1 wins whenever drawn (2 pairs of 3), w2 only against w0 (1 of 3).
    expect(seen.get('w1')!).toBeGreaterThan(seen.get('w2')!);
    expect(seen.get('w2')!).toBeGreaterThan(0);
  });

  it('reported KV use decides when both engines report it; requests in flight when one does not', () => {
    const ws = fleet(2);
    const both: Record<string, LoadReport> = { w0: { kvUsage: 0.2 }, w1: { kvUsage: 0.9 } };
    const p = new PowerOfTwoPolicy(seededRandom(2));
    const busy = loads({ w0: 10, w1: 0 });
    expect(p.pick({ ...request(ws, {}, busy), report: (id) => both[id] })!.worker).toBe(ws[0]);
    const one: Record<string, LoadReport> = { w0: { kvUsage: 0.2 } };
    expect(p.pick({ ...request(ws, {}, busy), report: (id) => one[id] })!.worker).toBe(ws[1]);
  });

  it('one candidate is the pick', () => {
    expect(new PowerOfTwoPolicy(seededRandom(1)).pick(request(fleet(1), {}, loads({ w0: 99 })))!.worker.id).toBe('w0');
  });
});
