// consistent_hashing (src/fleet/policies/consistent-hashing.ts) and its ring (hash-ring.ts) on
// SMG's cases: a key sticks to its engine and keys spread; adding or removing one of N engines
// moves about 1/N of the keys, only onto or off that engine; X-SMG-Target-Worker routes to the
// worker it names (an index among the candidates, an id or a URL) before any key, and to none
// when it names no candidate; the implicit session key; the random fallback.

import { describe, expect, it } from 'vitest';
import { ConsistentHashingPolicy } from '../../../src/fleet/policies/consistent-hashing.ts';
import { fleet, request, seededRandom } from '../../fixtures/policy-fleet.ts';

const keys = Array.from({ length: 5000 }, (_, i) => `session-${i}`);

function owners(p: ConsistentHashingPolicy, ws: ReturnType<typeof fleet>): Map<string, string> {
  return new Map(keys.map((k) => [k, p.pick(request(ws, { routingKey: k }))!.worker.id]));
}

describe('routing key on the ring', () => {
  it('the same key gets the same engine, in any candidate order; keys spread over every engine', () => {
    const p = new ConsistentHashingPolicy(seededRandom(1));
    const ws = fleet(5);
    const before = owners(p, ws);
    const reversed = new ConsistentHashingPolicy(seededRandom(2));
    expect(owners(reversed, [...ws].reverse())).toEqual(before);
    const counts = new Map<string, number>();
    for (const id of before.values()) counts.set(id, (counts.get(id) ?? 0) + 1);
    expect(counts.size).toBe(5);
    for (const n of counts.values()) expect(n).toBeGreaterThan(keys.length / 5 / 2);
    expect(p.pick(request(ws, { routingKey: 'k' }))!.reason).toBe('routing_key');
  });

  it('adding a sixth engine moves about 1/6 of the keys, all onto it', () => {
    const p = new ConsistentHashingPolicy(seededRandom(1));
    const ws = fleet(5);
    const before = owners(p, ws);
    const after = owners(p, [...ws, ...fleet(1, 5)]);
    let moved = 0;
    for (const k of keys) {
      if (after.get(k) === before.get(k)) continue;
      moved++;
      expect(after.get(k)).toBe('w5');
    }
    expect(moved / keys.length).toBeGreaterThan(1 / 6 / 2);
    expect(moved / keys.length).toBeLessThan((1 / 6) * 1.6);
  });

  it('removing one of 6 moves only its keys (about 1/6), the others stay', () => {
    const p = new ConsistentHashingPolicy(seededRandom(1));
    const ws = fleet(6);
    const before = owners(p, ws);
    const after = owners(
      p,
      ws.filter((w) => w.id !== 'w3'),
    );
    let moved = 0;
    for (const k of keys) {
      if (before.get(k) === 'w3') {
        moved++;
        expect(after.get(k)).not.toBe('w3');
      } else expect(after.get(k)).toBe(before.get(k));
    }
    expect(moved / keys.length).toBeGreaterThan(1 / 6 / 2);
    expect(moved / keys.length).toBeLessThan((1 / 6) * 1.6);
  });
});

describe('X-SMG-Target-Worker', () => {
  const ws = fleet(3);
  const p = new ConsistentHashingPolicy(seededRandom(1));

  it('names a candidate by its index (SMG), its id or its URL, and wins over a routing key', () => {
    expect(p.pick(request(ws, { targetWorker: '1' }))).toEqual({ worker: ws[1], reason: 'target_worker' });
    expect(p.pick(request(ws, { targetWorker: 'w2' }))).toEqual({ worker: ws[2], reason: 'target_worker' });
    expect(p.pick(request(ws, { targetWorker: 'http://w0:8000' }))).toEqual({ worker: ws[0], reason: 'target_worker' });
    for (const k of keys.slice(0, 50)) expect(p.pick(request(ws, { targetWorker: '2', routingKey: k }))!.worker).toBe(ws[2]);
  });

  it('naming no candidate (out of range, unknown, or not eligible) routes nowhere', () => {
    expect(p.pick(request(ws, { targetWorker: '3' }))).toBeUndefined();
    expect(p.pick(request(ws, { targetWorker: 'http://elsewhere:1' }))).toBeUndefined();
    expect(p.pick(request(ws.slice(1), { targetWorker: 'w0' }))).toBeUndefined();
  });
});

describe('without a routing key', () => {
  it('a stable caller header is the key (implicit_key), else a random candidate', () => {
    const p = new ConsistentHashingPolicy(seededRandom(7));
    const ws = fleet(4);
    const byHeader = p.pick(request(ws, { implicitKey: 'Bearer abc' }))!;
    expect(byHeader.reason).toBe('implicit_key');
    for (let i = 0; i < 20; i++) expect(p.pick(request(ws, { implicitKey: 'Bearer abc' }))!.worker).toBe(byHeader.worker);
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const d = p.pick(request(ws))!;
      expect(d.reason).toBe('random');
      seen.add(d.worker.id);
    }
    expect(seen.size).toBe(4);
  });
});
