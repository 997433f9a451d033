// Where a taken-over refit goes on (recoveryOf), from what its journal says: before anything was
// loaded the pause starts over on every awake target, whatever the dead runner had recorded; once
// a disk load with a version check was sent, the check goes on; a distributed step in doubt
// abandons the transfer.

import { describe, expect, it } from 'vitest';
import { recoveryOf } from '../../src/refit/journal.ts';
import type { RefitJournal } from '../../src/wire/refit-journal.ts';
import { DISK_STEPS as DISK, DISTRIBUTED_STEPS as DISTRIBUTED, runningJournal } from '../fixtures/refit-journal.ts';

/** Three targets, the third asleep. */
const journal = (over: Partial<RefitJournal>) => runningJournal({ targets: ['e1', 'e2', 'e3'], asleep: ['e3'], ...over });

describe('recoveryOf', () => {
  it('in the pause phase: starts the pause over on every awake target, forgetting what the dead runner recorded', () => {
    const r = recoveryOf(
      journal({ phase: 'pause', pending: ['e2'], paused: ['e1'], engines: { e1: { phases: { pause: 5 } }, e2: { phases: {} } } }),
      DISK,
      true,
    );
    expect(r).toEqual({ at: 'pausing', engines: { e1: { phases: {} }, e2: { phases: {} } }, paused: [], resumed: [], stepIndex: 0, abortReason: undefined });
  });

  it('before any phase: the same, nothing was sent', () => {
    expect(recoveryOf(journal({ phase: null }), DISK, true).at).toBe('pausing');
  });

  it('a disk load in doubt with a version check: the check goes on, the records kept', () => {
    const r = recoveryOf(journal({ phase: 'refit', pending: ['e2'], paused: ['e1', 'e2'], engines: { e1: { phases: { pause: 5, refit: 9 } } } }), DISK, true);
    expect(r.at).toBe('verifying');
    expect(r.paused).toEqual(['e1', 'e2']);
    expect(r.engines.e1).toEqual({ phases: { pause: 5, refit: 9 } });
  });

  it('a distributed chunk in doubt: every engine still in the transfer fails, the group is torn down', () => {
    const r = recoveryOf(journal({ phase: 'refit', step_index: 1, pending: ['e2'], paused: ['e1', 'e2'] }), DISTRIBUTED, true);
    expect(r.at).toBe('cleanup');
    expect(r.engines.e1).toMatchObject({ failedIn: 'refit', error: 'gateway_failover' });
    expect(r.engines.e2).toMatchObject({ failedIn: 'refit', error: 'gateway_failover' });
  });
});
