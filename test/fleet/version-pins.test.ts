// One version per GRPO group (src/fleet/version-pins.ts), on a stepped clock: a group's key (its
// prompt, else its routing key), the pin its first sample sets, the candidates its siblings are
// narrowed to, the split when none of its version is left, and the window.

import { describe, expect, it } from 'vitest';
import { PIN_WINDOW_MS, VersionPins, groupKey } from '../../src/fleet/version-pins.ts';

const engines = [
  { id: 'a', v: '1' },
  { id: 'b', v: '1' },
  { id: 'c', v: '2' },
];
const versionOf = (e: { v: string }) => e.v;

describe('groupKey', () => {
  it('the prompt first (siblings share it; slime gives each its own routing key), else the routing key', () => {
    expect(groupKey({ tokens: [1, 2, 3], routingKey: 's1' })).toBe(groupKey({ tokens: [1, 2, 3], routingKey: 's2' }));
    expect(groupKey({ tokens: [1, 2, 3] })).not.toBe(groupKey({ tokens: [1, 2, 4] }));
    expect(groupKey({ tokens: [1, 2, 3] })).not.toBe(groupKey({ tokens: [1, 2, 3, 0] }));
    expect(groupKey({ text: 'hello' })).toBe(groupKey({ text: 'hello' }));
    expect(groupKey({ text: 'hello' })).not.toBe(groupKey({ text: 'hellp' }));
    expect(groupKey({ routingKey: 'k' })).toBe('k:k');
    expect(groupKey({})).toBeUndefined();
  });
});

describe('VersionPins', () => {
  function pins() {
    let now = 0;
    const p = new VersionPins(() => now);
    return { p, step: (ms: number) => (now += ms) };
  }

  it("the first sample pins its engine's version; siblings go to engines of it", () => {
    const { p } = pins();
    let splits = 0;
    expect(p.narrow('g', engines, versionOf, () => splits++)).toEqual(engines);
    p.served('g', '2');
    expect(p.narrow('g', engines, versionOf, () => splits++).map((e) => e.id)).toEqual(['c']);
    // A later sample served elsewhere does not move the pin.
    p.served('g', '1');
    expect(p.narrow('g', engines, versionOf, () => splits++).map((e) => e.id)).toEqual(['c']);
    expect(splits).toBe(0);
  });

  it('no engine of its version left: every candidate, and the split is counted', () => {
    const { p } = pins();
    let splits = 0;
    p.served('g', '1');
    const left = engines.filter((e) => e.v === '2');
    expect(p.narrow('g', left, versionOf, () => splits++)).toEqual(left);
    expect(splits).toBe(1);
  });

  it('forgets a pin once its window has passed since the first sample', () => {
    const { p, step } = pins();
    p.served('g', '2');
    step(PIN_WINDOW_MS - 1);
    expect(p.pinned('g')).toBe('2');
    step(2);
    expect(p.pinned('g')).toBeUndefined();
    p.served('g', '1');
    expect(p.pinned('g')).toBe('1');
  });

  it('a request of no group is never narrowed', () => {
    const { p } = pins();
    expect(p.narrow(undefined, engines, versionOf, () => {})).toBe(engines);
  });
});
