// The policies without state worth a file of tests each: least_inflight (rlgate's default: least
// in flight from a rotating start, a routing key by rendezvous), round_robin, random and
// passthrough.

import { describe, expect, it } from 'vitest';
import { LeastInflightPolicy } from '../../../src/fleet/policies/least-inflight.ts';
import { PassthroughPolicy } from '../../../src/fleet/policies/passthrough.ts';
import { RandomPolicy } from '../../../src/fleet/policies/random.ts';
import { rendezvous } from '../../../src/fleet/policies/rendezvous.ts';
import { RoundRobinPolicy } from '../../../src/fleet/policies/round-robin.ts';
import { fleet, loads, request, seededRandom } from '../../fixtures/policy-fleet.ts';

const ws = fleet(3);

describe('least_inflight', () => {
  it('the least in flight; equal loads in turn; a key to its rendezvous engine whatever the load', () => {
    const p = new LeastInflightPolicy();
    for (let i = 0; i < 5; i++) expect(p.pick(request(ws, {}, loads({ w0: 2, w1: 0, w2: 1 })))).toEqual({ worker: ws[1], reason: 'min_load' });
    const turns = Array.from({ length: 6 }, () => p.pick(request(ws))!.worker.id);
    expect(new Set(turns.slice(0, 3)).size).toBe(3);
    expect(turns.slice(3)).toEqual(turns.slice(0, 3));
    const home = rendezvous('session-1', ws)!;
    expect(p.pick(request(ws, { routingKey: 'session-1' }, loads({ [home.id]: 50 })))).toEqual({ worker: home, reason: 'routing_key' });
  });
});

describe('round_robin, random, passthrough', () => {
  it('round_robin takes the candidates in turn', () => {
    const p = new RoundRobinPolicy();
    expect(Array.from({ length: 6 }, () => p.pick(request(ws))!.worker.id)).toEqual(['w0', 'w1', 'w2', 'w0', 'w1', 'w2']);
  });

  it('random draws from the source it was given: the same seed, the same picks; every engine in time', () => {
    const draw = (seed: number) => {
      const p = new RandomPolicy(seededRandom(seed));
      return Array.from({ length: 60 }, () => p.pick(request(ws))!.worker.id);
    };
    expect(draw(9)).toEqual(draw(9));
    expect(new Set(draw(9)).size).toBe(3);
    expect(new RandomPolicy(() => 0.999999).pick(request(ws))).toEqual({ worker: ws[2], reason: 'random' });
  });

  it('passthrough takes the first candidate', () => {
    expect(new PassthroughPolicy().pick(request(ws.slice(1), {}, loads({ w1: 9 })))).toEqual({ worker: ws[1], reason: 'first_available' });
  });
});
