// The waves of a rolling refit (src/refit/waves.ts): how many engines a wave takes from
// `max_unavailable` (a count, or a share of the targets rounded down, at least one), the waves in
// the targets' order, when `max_failed` stops them, and each wave's refit id.

import { describe, expect, it } from 'vitest';
import { mayGoOn, planWaves, waveRefitId, waveSize } from '../../src/refit/waves.ts';

describe('waveSize', () => {
  it.each([
    [undefined, 6, 1],
    [1, 6, 1],
    [2, 6, 2],
    [10, 6, 6],
    ['25%', 8, 2],
    ['25%', 6, 1],
    ['10%', 6, 1],
    ['50%', 5, 2],
    ['100%', 6, 6],
    [1, 0, 0],
  ] as const)('max_unavailable %j over %i targets: %i per wave', (max, targets, size) => {
    expect(waveSize(max, targets)).toBe(size);
  });
});

describe('planWaves', () => {
  it('cuts the targets in order; the last wave may be smaller', () => {
    expect(planWaves(['a', 'b', 'c', 'd', 'e'], 2)).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
    expect(planWaves(['a', 'b', 'c'], undefined)).toEqual([['a'], ['b'], ['c']]);
    expect(planWaves(['a', 'b', 'c', 'd'], '50%')).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    expect(planWaves([], 1)).toEqual([]);
  });
});

describe('mayGoOn', () => {
  it('stops once more engines failed than max_failed (0 by default)', () => {
    expect(mayGoOn(0, undefined)).toBe(true);
    expect(mayGoOn(1, undefined)).toBe(false);
    expect(mayGoOn(1, 1)).toBe(true);
    expect(mayGoOn(2, 1)).toBe(false);
  });
});

describe('waveRefitId', () => {
  it('numbers the waves from 1 under the parent id (a valid refit id, an event subject token)', () => {
    expect(waveRefitId('step-8', 0)).toBe('step-8-w1');
    expect(waveRefitId('step-8', 11)).toMatch(/^[A-Za-z0-9_-]+$/);
  });
});
