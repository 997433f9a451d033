// --routing-key-override (src/fleet/policies/routing-key-override.ts) and the catalogue: a keyed
// request goes by manual's sticky map under a policy that ignores keys, a keyless one by that
// policy, which never hears of the keyed ones; the key-aware policies are left as they are; every
// name --policy takes builds its policy; the configured policy's queued tokens stay readable.

import { describe, expect, it } from 'vitest';
import { createPolicy, POLICY_NAMES, type PolicySettings } from '../../../src/fleet/policies/catalogue.ts';
import { ManualPolicy } from '../../../src/fleet/policies/manual.ts';
import { fleet, loads, request, seededRandom, steppedClock } from '../../fixtures/policy-fleet.ts';

const SETTINGS: PolicySettings = {
  policy: 'round_robin',
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  evictionIntervalSecs: 60,
  maxTreeSize: 2 ** 26,
  prefixTokenCount: 256,
  prefixHashLoadFactor: 1.25,
  maxIdleSecs: 14_400,
  assignmentMode: 'min_load',
  routingKeyOverride: true,
};
const deps = { clock: steppedClock(), random: seededRandom(4) };
const ws = fleet(3);

describe('routing key override', () => {
  it('keyed requests stick (manual), keyless ones go by the policy', () => {
    const p = createPolicy(SETTINGS, deps);
    expect(p.name).toBe('round_robin');
    const first = p.pick(request(ws, { routingKey: 'k' }, loads({ w0: 1, w1: 0, w2: 1 })))!;
    expect(first).toEqual({ worker: ws[1], reason: 'new_key' });
    for (let i = 0; i < 4; i++) expect(p.pick(request(ws, { routingKey: 'k' }))).toEqual({ worker: ws[1], reason: 'routing_key' });
    expect(Array.from({ length: 3 }, () => p.pick(request(ws))!.worker.id)).toEqual(['w0', 'w1', 'w2']);
  });

  it('cache_aware under the override never hears of keyed requests: their prompts are no cache hit', () => {
    const p = createPolicy({ ...SETTINGS, policy: 'cache_aware' }, deps);
    const keyed = { routingKey: 'k', text: 'a long shared prompt' };
    const sticky = p.pick(request(ws, keyed))!.worker;
    p.routed!(sticky.id, keyed);
    // Had the tree recorded it, the same prompt without a key would be a hit on that engine.
    const others = ws.filter((w) => w !== sticky);
    const d = p.pick(request(ws, { text: 'a long shared prompt' }, loads({ [sticky.id]: 1 })))!;
    expect(d.reason).toBe('min_load');
    expect(others).toContain(d.worker);
  });

  it("keeps the policy's queued tokens where it counts them (bounded_affinity), and has none where it does not", () => {
    const p = createPolicy({ ...SETTINGS, policy: 'bounded_affinity' }, deps);
    const keyless = { tokens: Array.from({ length: 100 }, (_, i) => i), expectedOutputTokens: 10 };
    const w = p.pick(request(ws, keyless))!.worker;
    p.routed!(w.id, keyless);
    expect(p.queuedTokens!(w.id)).toBe(40); // 100 × 0.3 to prefill, 10 to decode
    expect(createPolicy(SETTINGS, deps).queuedTokens).toBeUndefined();
  });

  it('leaves manual, consistent_hashing and least_inflight alone: they route by the key themselves', () => {
    expect(createPolicy({ ...SETTINGS, policy: 'manual' }, deps)).toBeInstanceOf(ManualPolicy);
    for (const policy of ['consistent_hashing', 'least_inflight']) {
      // The override's sticky map would answer a first key `new_key`.
      expect(createPolicy({ ...SETTINGS, policy }, deps).pick(request(ws, { routingKey: 'k' }))!.reason, policy).toBe('routing_key');
    }
  });
});

describe('catalogue', () => {
  it('every name --policy takes builds that policy, which picks a candidate', () => {
    for (const name of POLICY_NAMES) {
      const p = createPolicy({ ...SETTINGS, policy: name, routingKeyOverride: false }, deps);
      expect(p.name).toBe(name);
      expect(ws).toContain(p.pick(request(ws, { text: 'x' }))!.worker);
    }
  });
});
