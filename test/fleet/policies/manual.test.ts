// manual (src/fleet/policies/manual.ts) on SMG's cases: a key sticks to its engine, and adding
// engines moves none; when its engine is not a candidate the key gets another, keeps both (two at
// most, the oldest dropped) and goes back to the first when it returns; keys idle for max_idle_secs
// are forgotten at the sweep; the assignment modes (random, min_load, min_group); requests without
// a key never enter the map.

import { describe, expect, it } from 'vitest';
import { ManualPolicy, type ManualSettings } from '../../../src/fleet/policies/manual.ts';
import type { Candidate, RoutingInputs } from '../../../src/fleet/policies/policy.ts';
import { fleet, loads, request, seededRandom, steppedClock } from '../../fixtures/policy-fleet.ts';

const HOUR = 3_600_000;

function manual(patch: Partial<ManualSettings> = {}, clock = steppedClock()) {
  return new ManualPolicy({ evictionIntervalSecs: 60, maxIdleSecs: 4 * 3600, assignmentMode: 'random', ...patch }, { clock, random: seededRandom(3) });
}

function route(p: ManualPolicy, ws: Candidate[], inputs: RoutingInputs, inFlight = loads()) {
  const d = p.pick(request(ws, inputs, inFlight));
  p.routed(d.worker.id, inputs);
  return d;
}

const keys = Array.from({ length: 200 }, (_, i) => `user-${i}`);

describe('stickiness', () => {
  it('a key keeps its engine; new keys spread; adding engines moves no key at all', () => {
    const p = manual();
    const ws = fleet(3);
    const first = new Map(keys.map((k) => [k, route(p, ws, { routingKey: k })]));
    for (const d of first.values()) expect(d.reason).toBe('new_key');
    expect(new Set([...first.values()].map((d) => d.worker.id)).size).toBe(3);
    const more = [...ws, ...fleet(3, 3)];
    for (const k of keys) expect(route(p, more, { routingKey: k })).toEqual({ worker: first.get(k)!.worker, reason: 'routing_key' });
  });

  it('its engine gone, the key gets another and keeps both; it returns to the first; two engines at most', () => {
    const p = manual();
    const ws = fleet(4);
    const a = route(p, ws, { routingKey: 'k' }).worker;
    const withoutA = ws.filter((w) => w !== a);
    const b = route(p, withoutA, { routingKey: 'k' });
    expect(b.reason).toBe('new_key');
    expect(route(p, withoutA, { routingKey: 'k' })).toEqual({ worker: b.worker, reason: 'routing_key' });
    expect(route(p, ws, { routingKey: 'k' })).toEqual({ worker: a, reason: 'routing_key' });
    // Both gone: a third joins and the oldest (a) leaves the key's two.
    const c = route(
      p,
      ws.filter((w) => w !== a && w !== b.worker),
      { routingKey: 'k' },
    ).worker;
    expect(route(p, ws, { routingKey: 'k' })).toEqual({ worker: b.worker, reason: 'routing_key' });
    expect(route(p, [a, c], { routingKey: 'k' }).worker).toBe(c);
  });
});

describe('idle eviction', () => {
  it('a key idle for max_idle_secs is forgotten at the next sweep; one used meanwhile is kept', () => {
    const clock = steppedClock();
    const p = manual({}, clock);
    const ws = fleet(8);
    route(p, ws, { routingKey: 'idle' });
    route(p, ws, { routingKey: 'busy' });
    clock.advance(3 * HOUR);
    route(p, ws, { routingKey: 'busy' });
    clock.advance(HOUR);
    route(p, ws, {}); // a keyless request runs the sweep, and enters nothing
    expect(p.size).toBe(1);
    expect(route(p, ws, { routingKey: 'busy' }).reason).toBe('routing_key');
    expect(route(p, ws, { routingKey: 'idle' }).reason).toBe('new_key');
  });

  it('the sweep waits for its interval: an idle key is still served until then', () => {
    const clock = steppedClock();
    const p = manual({ evictionIntervalSecs: 600, maxIdleSecs: 60 }, clock);
    const ws = fleet(2);
    const home = route(p, ws, { routingKey: 'k' }).worker;
    clock.advance(120_000);
    expect(route(p, ws, { routingKey: 'k' })).toEqual({ worker: home, reason: 'routing_key' });
  });
});

describe('assignment modes', () => {
  it('min_load: the engine with the fewest in flight', () => {
    const p = manual({ assignmentMode: 'min_load' });
    expect(route(p, fleet(3), { routingKey: 'k' }, loads({ w0: 2, w1: 1, w2: 3 }))).toEqual({ worker: fleet(3)[1], reason: 'new_key' });
    expect(route(p, fleet(3), {}, loads({ w0: 0, w1: 1, w2: 3 }))).toEqual({ worker: fleet(3)[0], reason: 'min_load' });
  });

  it('min_group: the engine with the fewest routing keys in flight; a finished request gives its key back', () => {
    const p = manual({ assignmentMode: 'min_group' });
    const ws = fleet(2);
    const first = route(p, ws, { routingKey: 'a' }).worker;
    const second = route(p, ws, { routingKey: 'b' }).worker;
    expect(second).not.toBe(first);
    p.finished(first.id, { routingKey: 'a' });
    expect(route(p, ws, { routingKey: 'c' }).worker).toBe(first);
    expect(p.pick(request(ws)).reason).toBe('min_group');
  });

  it('without a key: the mode picks and the map stays empty', () => {
    const p = manual();
    for (let i = 0; i < 10; i++) expect(route(p, fleet(3), {}).reason).toBe('random');
    expect(p.size).toBe(0);
  });
});
