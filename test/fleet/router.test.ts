// The router's key mode as a pure function: rendezvous hashing over engine ids. Stickiness, an
// order-independent answer, spread over the fleet, and the property that makes it rendezvous
// hashing: removing an engine moves only the keys that engine held.

import { describe, expect, it } from 'vitest';
import { rendezvous } from '../../src/fleet/router.ts';

const fleet = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `http://127.0.0.1:${30000 + i}` }));
const keys = Array.from({ length: 2000 }, (_, i) => `session-${i}`);

describe('rendezvous', () => {
  it('no candidates → undefined; one candidate → that one', () => {
    expect(rendezvous('k', [])).toBeUndefined();
    const only = { id: 'a' };
    expect(rendezvous('k', [only])).toBe(only);
  });

  it('the same key picks the same engine, whatever the candidates order', () => {
    const ws = fleet(5);
    const reversed = [...ws].reverse();
    for (const k of keys.slice(0, 200)) {
      const a = rendezvous(k, ws)!;
      expect(rendezvous(k, ws)).toBe(a);
      expect(rendezvous(k, reversed)).toBe(a);
    }
  });

  it('spreads keys over every engine, none with more than twice its share', () => {
    const ws = fleet(4);
    const count = new Map<string, number>();
    for (const k of keys) {
      const id = rendezvous(k, ws)!.id;
      count.set(id, (count.get(id) ?? 0) + 1);
    }
    expect(count.size).toBe(4);
    for (const n of count.values()) {
      expect(n).toBeGreaterThan(keys.length / 4 / 2);
      expect(n).toBeLessThan((keys.length / 4) * 2);
    }
  });

  it('removing an engine moves only its keys; adding one takes keys only onto itself', () => {
    const ws = fleet(5);
    const before = new Map(keys.map((k) => [k, rendezvous(k, ws)!.id]));
    const removed = ws[2]!.id;
    const fewer = ws.filter((w) => w.id !== removed);
    let moved = 0;
    for (const k of keys) {
      const now = rendezvous(k, fewer)!.id;
      if (before.get(k) === removed) {
        moved++;
        expect(now).not.toBe(removed);
      } else expect(now).toBe(before.get(k));
    }
    expect(moved).toBeGreaterThan(0);

    const more = [...ws, { id: 'http://127.0.0.1:39999' }];
    let gained = 0;
    for (const k of keys) {
      const now = rendezvous(k, more)!.id;
      if (now === 'http://127.0.0.1:39999') gained++;
      else expect(now).toBe(before.get(k));
    }
    expect(gained).toBeGreaterThan(0);
  });
});
