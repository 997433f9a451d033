// StillOurs: the legs of a refit in flight at a lapse of the lease share one read of the journal.
import { describe, expect, it } from 'vitest';
import { StillOurs } from '../../src/refit/still-ours.ts';

function setup(answers: Array<boolean | undefined>) {
  let lapses = 0;
  let fenced = false;
  let reads = 0;
  const pending: Array<(v: boolean | undefined) => void> = [];
  const ours = new StillOurs({
    lapses: () => lapses,
    fenced: () => fenced,
    confirm: () => {
      reads++;
      return new Promise((resolve) => pending.push(resolve));
    },
  });
  return {
    ours,
    lapse: () => lapses++,
    fence: () => {
      fenced = true;
    },
    reads: () => reads,
    /** Answers the oldest read still open with the next answer. */
    answer: async () => {
      pending.shift()!(answers.shift());
      await new Promise((r) => setImmediate(r));
    },
  };
}

describe('StillOurs', () => {
  it('answers true without reading while the lease has not lapsed', () => {
    const s = setup([]);
    expect(s.ours.ask()).toBe(true);
    expect(s.reads()).toBe(0);
  });

  it('reads the journal once for every leg that asks after one lapse', async () => {
    const s = setup([true]);
    s.lapse();
    const asks = Array.from({ length: 1000 }, () => s.ours.ask());
    expect(s.reads()).toBe(1);
    await s.answer();
    expect(await Promise.all(asks)).toEqual(asks.map(() => true));
    // Confirmed for this lapse: later asks read nothing.
    expect(s.ours.ask()).toBe(true);
    expect(s.reads()).toBe(1);
  });

  it('reads again after another lapse, and after a read that could not be made', async () => {
    const s = setup([undefined, false]);
    s.lapse();
    const first = s.ours.ask();
    await s.answer();
    expect(await first).toBeUndefined();
    const second = s.ours.ask();
    expect(s.reads()).toBe(2);
    await s.answer();
    expect(await second).toBe(false);
  });

  it('a lapse while a read is open starts a read of its own', async () => {
    const s = setup([true, true]);
    s.lapse();
    const before = s.ours.ask();
    s.lapse();
    const after = s.ours.ask();
    expect(s.reads()).toBe(2);
    await s.answer();
    await s.answer();
    expect([await before, await after]).toEqual([true, true]);
    expect(s.ours.ask()).toBe(true);
    expect(s.reads()).toBe(2);
  });

  it('answers false once the writer is fenced, without reading', () => {
    const s = setup([]);
    s.lapse();
    s.fence();
    expect(s.ours.ask()).toBe(false);
    expect(s.reads()).toBe(0);
  });
});
