// What keeps an engine paused in the pause reconciler's eyes (fleet/pause-reconciler.ts), as the
// refits know it. The reconciler resumes a paused engine that nothing holds; this file says when
// a refit or an operator still does, and which engines a refit's late pauses may yet reach.

import type { EngineHost } from '../fleet/engine-host.ts';
import type { PauseHolds, PauseReconciler } from '../fleet/pause-reconciler.ts';
import { pausesInDoubt } from './journal.ts';
import type { RefitJournals } from './journals.ts';

/** The reconciler's `holds`: a refit holds an engine, or an operator paused it. */
export function pauseHolds(journals: RefitJournals, host: EngineHost): PauseHolds {
  return {
    // A refit's journal says it runs, or the owner paused the engine for a refit whose report
    // this replica has not seen (its copy of the journals may lag).
    refit: (id) => {
      const by = host.pausedBy(id);
      return journals.holds(id) || (by !== undefined && by.startsWith('refit:') && !journals.done(by.slice('refit:'.length)));
    },
    operator: (id) => host.pausedBy(id) === 'operator',
  };
}

/**
 * A pause that lands after everyone moved on (its sender was cut off, died or gave up) is found and
 * undone by the engine's owner: the engines of a refit whose pauses were in doubt are watched.
 * Returns the unsubscribe.
 */
export function watchLatePauses(journals: RefitJournals, reconciler: PauseReconciler): () => void {
  return journals.onJournal((j) => {
    if (pausesInDoubt(j))
      reconciler.watch(
        j.targets.filter((t) => !j.keep_paused.includes(t)),
        `refit ${j.id} had pauses in doubt`,
      );
  });
}
