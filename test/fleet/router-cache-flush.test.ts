// When the router tells the policy an engine's prefix cache is empty (fleet/router.ts,
// cacheEmptied): new weights (SGLang flushes its cache on a weight update), a restart seen as the
// engine passing through unreachable or registering, and sleep. Nothing else a routing table
// rebuild shows (a pause, the breaker, load) empties it.

import { describe, expect, it } from 'vitest';
import type { EngineView } from '../../src/fleet/fleet-view.ts';
import { cacheEmptied } from '../../src/fleet/router.ts';

const serving: EngineView = {
  state: 'serving',
  control: 'active',
  version: '3',
  versionSource: 'engine',
  breaker: 'closed',
  load: 0,
  hosted: true,
  quarantine: null,
};

describe('cacheEmptied', () => {
  it('new weights, a restart, sleep', () => {
    expect(cacheEmptied(serving, { ...serving, version: '4' })).toBe(true);
    expect(cacheEmptied(serving, { ...serving, state: 'unreachable' })).toBe(true);
    expect(cacheEmptied(serving, { ...serving, state: 'registering' })).toBe(true);
    expect(cacheEmptied(serving, { ...serving, control: 'asleep', state: 'asleep' })).toBe(true);
  });

  it('not a pause, a refit in progress, an open breaker, a quarantine or load', () => {
    expect(cacheEmptied(serving, serving)).toBe(false);
    expect(cacheEmptied(serving, { ...serving, state: 'paused', control: 'paused' })).toBe(false);
    expect(cacheEmptied(serving, { ...serving, state: 'refitting' })).toBe(false);
    expect(cacheEmptied(serving, { ...serving, breaker: 'open', load: 9, quarantine: 'verify_failed' })).toBe(false);
    // Still unreachable, or already asleep: nothing new.
    const down = { ...serving, state: 'unreachable' };
    expect(cacheEmptied(down, down)).toBe(false);
    const asleep = { ...serving, state: 'asleep', control: 'asleep' as const };
    expect(cacheEmptied(asleep, asleep)).toBe(false);
  });
});
