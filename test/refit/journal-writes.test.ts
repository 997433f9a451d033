// Which journal writes a refit waits for, and why skipping the others is safe: a takeover from the
// journal as it stood before a pause, version check or resume was journaled goes on as it would
// from after it (recoveryOf), so only a refit step's write must land before its calls, and only a
// step whose engines a takeover judges by `pending` must have its answers in before the refit goes
// on. Also the writer's staging: a staged patch rides the next write, `durable()` writes only when
// the bucket is behind. The bucket is a stand-in recording what the writer hands it.

import { describe, expect, it } from 'vitest';
import type { RefitStepPlan } from '../../actors/coordinator.ts';
import type { JsonBucket } from '../../src/bus/buckets.ts';
import { answersDurable, durableBefore, JournalWriter, recoveryOf } from '../../src/refit/journal.ts';
import type { RefitJournal } from '../../src/wire/refit-journal.ts';
import type { Phase } from '../../src/wire/refit-phase.ts';
import { DISK_STEPS as DISK, DISTRIBUTED_STEPS as DISTRIBUTED, runningJournal } from '../fixtures/refit-journal.ts';

const ENGINES = ['e1', 'e2'];

/** Both engines paused by the dead runner. */
const journal = (over: Partial<RefitJournal>) => runningJournal({ targets: ENGINES, paused: [...ENGINES], ...over });

/** Engines a takeover from `j` reports failed with the dead runner. */
function failedBy(j: RefitJournal, steps: RefitStepPlan[], verify: boolean): string[] {
  const r = recoveryOf(j, steps, verify);
  return Object.entries(r.engines)
    .filter(([, e]) => e.error === 'gateway_failover')
    .map(([id]) => id);
}

describe('durableBefore: the phase writes a refit waits for', () => {
  it('waits for a refit step, and for a resume that calls the refit off; for nothing else', () => {
    const phases: Phase[] = ['pause', 'refit', 'verify', 'resume'];
    expect(phases.filter((p) => durableBefore(p, 'refit'))).toEqual(['refit']);
    expect(phases.filter((p) => durableBefore(p, 'verify'))).toEqual(['refit']);
    expect(durableBefore('pause', null)).toBe(false);
    expect(durableBefore('resume', 'pause')).toBe(true);
    expect(durableBefore('resume', null)).toBe(true);
  });

  it('a resume that calls the refit off: from the pause a takeover would start the refit over, so it waits', () => {
    const called = { abort_reason: 'quorum_not_met' as const, paused: ['e1'] };
    expect(recoveryOf(journal({ phase: 'pause', pending: [], ...called }), DISK, true).at).toBe('pausing');
    expect(recoveryOf(journal({ phase: 'resume', pending: ENGINES, ...called }), DISK, true)).toMatchObject({ at: 'resuming', abortReason: 'quorum_not_met' });
  });

  it('a pause not yet journaled: the takeover pauses again from the start, as it would from the pause', () => {
    const before = recoveryOf(journal({ phase: null, paused: [] }), DISK, true);
    const after = recoveryOf(journal({ phase: 'pause', pending: ENGINES, paused: [] }), DISK, true);
    expect(before.at).toBe('pausing');
    expect(after).toEqual(before);
  });

  it('a version check not yet journaled: the takeover checks every engine, as it would from the check', () => {
    for (const pending of [[], ENGINES]) {
      expect(recoveryOf(journal({ phase: 'refit', pending }), DISK, true).at).toBe('verifying');
      expect(failedBy(journal({ phase: 'refit', pending }), DISK, true)).toEqual([]);
    }
    expect(recoveryOf(journal({ phase: 'verify', pending: ENGINES }), DISK, true).at).toBe('verifying');
    // After a distributed transfer's last (cleanup) step, the same.
    const last = DISTRIBUTED.length - 1;
    expect(recoveryOf(journal({ phase: 'refit', step_index: last, pending: ENGINES }), DISTRIBUTED, true).at).toBe('verifying');
    expect(failedBy(journal({ phase: 'refit', step_index: last, pending: ENGINES }), DISTRIBUTED, true)).toEqual([]);
  });

  it('a resume not yet journaled: the takeover checks again, then resumes; nothing is loaded again', () => {
    expect(recoveryOf(journal({ phase: 'verify', pending: ENGINES }), DISK, true).at).toBe('verifying');
    expect(recoveryOf(journal({ phase: 'resume', pending: ENGINES }), DISK, true).at).toBe('resuming');
    // Without a version check, the load's answers are durable (answersDurable): the resume goes on.
    expect(recoveryOf(journal({ phase: 'refit', pending: [] }), DISK, false).at).toBe('resuming');
    expect(failedBy(journal({ phase: 'refit', pending: [] }), DISK, false)).toEqual([]);
  });
});

describe("answersDurable: a step's answers in the bucket before the refit goes on", () => {
  it('not after a disk load a version check follows: a takeover fails none of its engines, whatever it lists pending', () => {
    expect(answersDurable(DISK[0], true)).toBe(false);
    expect(failedBy(journal({ phase: 'refit', pending: ENGINES }), DISK, true)).toEqual([]);
  });

  it('after a disk load without a version check: a takeover fails the engines listed pending', () => {
    expect(answersDurable(DISK[0], false)).toBe(true);
    expect(failedBy(journal({ phase: 'refit', pending: ['e2'] }), DISK, false)).toEqual(['e2']);
  });

  it('after every step of a distributed transfer', () => {
    for (const step of DISTRIBUTED) {
      expect(answersDurable(step, true)).toBe(true);
      expect(answersDurable(step, false)).toBe(true);
    }
  });
});

/** A stand-in for the refits bucket: records each compare-and-set write, fails the ones asked to. */
function recordingBucket() {
  const writes: RefitJournal[] = [];
  let revision = 1;
  let failNext = 0;
  const bucket = {
    update: async (_key: string, value: RefitJournal, at: number) => {
      if (at !== revision) throw new Error('wrong last sequence');
      if (failNext > 0) {
        failNext--;
        throw new Error('timeout');
      }
      writes.push(structuredClone(value));
      return ++revision;
    },
  } as unknown as JsonBucket<RefitJournal>;
  return { bucket, writes, failOnce: () => (failNext = 1) };
}

describe('JournalWriter: staged patches and durable()', () => {
  it('a staged patch is not written by itself; it rides the next write', async () => {
    const b = recordingBucket();
    const w = new JournalWriter(b.bucket, journal({}), 1, () => {});
    w.stage({ pending: ['e1'] });
    expect(b.writes).toHaveLength(0);
    await w.update({ phase: 'refit' });
    expect(b.writes).toHaveLength(1);
    expect(b.writes[0]).toMatchObject({ phase: 'refit', pending: ['e1'] });
    expect(w.written).toBe(2);
  });

  it('durable() writes what was staged, and nothing when the bucket already holds everything', async () => {
    const b = recordingBucket();
    const w = new JournalWriter(b.bucket, journal({}), 1, () => {});
    await w.durable();
    expect(b.writes).toHaveLength(0);
    w.stage({ resumed: ['e1'] });
    await w.durable();
    expect(b.writes.map((j) => j.resumed)).toEqual([['e1']]);
    await w.durable();
    expect(b.writes).toHaveLength(1);
  });

  it('after a failed write durable() writes again: what it held is not lost', async () => {
    const b = recordingBucket();
    const w = new JournalWriter(b.bucket, journal({}), 1, () => {});
    b.failOnce();
    await expect(w.update({ phase: 'verify' })).rejects.toThrow('timeout');
    expect(b.writes).toHaveLength(0);
    await w.durable();
    expect(b.writes.map((j) => j.phase)).toEqual(['verify']);
  });
});
