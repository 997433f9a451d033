// A resume owed: the `owed` bucket's value, keyed by worker id, written before a refit pauses the
// engine and deleted once it is resumed; a debt left behind is paid by the engine's owner.
// Shapes only: src/refit/resumes-owed.ts keeps the ledger.

export interface OwedResume {
  refit_id: string;
  /** The replica running the refit: while it lives and has not settled, the refit resumes the engine itself. */
  holder: string;
  /** The refit is over and did not resume the engine: the owner pays. */
  due: boolean;
  since: string;
}
