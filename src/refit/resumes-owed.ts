// A pause that a refit made is a resume owed, written to the shared `owed` bucket before the pause
// goes out and removed once the engine is resumed. When the refit could not resume an engine (it
// died, the bus went away, the replica running the refit died), the debt stays, and whichever
// replica owns the engine pays it as soon as the engine answers again. Only an operator's pause,
// which has no debt, is kept across refits.

import type { JsonBucket } from '../bus/buckets.ts';
import { lifecycleOf } from '../../actors/engine.ts';
import { continueGenerationCall } from '../engines/control-call.ts';
import type { EngineHost } from '../fleet/engine-host.ts';
import type { Logger } from '../obs/logger.ts';
import type { RefitJournals } from './journals.ts';
import type { OwedResume } from '../wire/resume-owed.ts';

const RESTING = new Set(['serving', 'paused']);

export class ResumesOwed {
  private readonly owed = new Map<string, { value: OwedResume; revision: number }>();
  private readonly paying = new Set<string>();
  private stopWatch: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly deps: {
      replicaId: string;
      bucket: JsonBucket<OwedResume>;
      host: EngineHost;
      /** Is this replica's heartbeat fresh (ownership.ts)? */
      alive: (replica: string) => boolean;
      /**
       * The refits' journals: one still running is resumed by whoever takes it over; one that
       * holds its report will resume no engine again.
       */
      journals: Pick<RefitJournals, 'running' | 'done'>;
      /** Deadline of one resume call. */
      timeoutSecs: number;
      /** How often owned engines' debts are looked at. */
      intervalMs: number;
      log: Logger;
    },
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await this.deps.bucket.watch((id, value, revision) => {
      if (value) this.owed.set(id, { value, revision });
      else this.owed.delete(id);
    });
    this.timer = setInterval(() => this.payDue(), this.deps.intervalMs).unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.stopWatch?.();
  }

  /** A refit's pause of this engine is not paid back yet. */
  has(id: string): boolean {
    return this.owed.has(id);
  }

  /** Records the debts before the pause goes out: a refit that cannot record them pauses nothing. */
  async owe(ids: string[], refitId: string): Promise<void> {
    const value: OwedResume = { refit_id: refitId, holder: this.deps.replicaId, due: false, since: new Date().toISOString() };
    await Promise.all(
      ids.map(async (id) => {
        const revision = await this.deps.bucket.put(id, value);
        this.owed.set(id, { value, revision });
      }),
    );
  }

  /** The refit is over: a resumed engine owes nothing, the others' debts fall due. */
  async settle(id: string, resumed: boolean, refitId: string): Promise<void> {
    const cur = this.owed.get(id);
    if (cur && cur.value.refit_id !== refitId) return; // a later refit owns the debt now
    try {
      if (resumed) {
        this.owed.delete(id);
        await this.deps.bucket.delete(id);
      } else {
        const value: OwedResume = { ...(cur?.value ?? { refit_id: refitId, holder: this.deps.replicaId, since: new Date().toISOString() }), due: true };
        const revision = await this.deps.bucket.put(id, value);
        this.owed.set(id, { value, revision });
        this.payDue();
      }
    } catch (err) {
      this.deps.log.warn({ err, worker_id: id, refit_id: refitId }, 'could not settle a resume owed');
    }
  }

  /** Pays every debt of an engine this replica owns that answers now. */
  private payDue(): void {
    for (const [id, { value, revision }] of this.owed) {
      if (this.paying.has(id) || !this.deps.host.owns(id)) continue;
      // A running refit whose replica died is taken over with its debts: its new runner resumes.
      const orphaned = value.holder !== this.deps.replicaId && !this.deps.alive(value.holder) && !this.deps.journals.running(value.refit_id);
      // A finished refit whose runner could not mark the debt due (the bus failed it) left it too.
      const due = value.due || orphaned || this.deps.journals.done(value.refit_id);
      if (!due) continue;
      const snap = this.deps.host.snapshot(id);
      if (!snap || !RESTING.has(lifecycleOf(snap))) continue;
      this.paying.add(id);
      void this.pay(id, value, revision).finally(() => this.paying.delete(id));
    }
  }

  private async pay(id: string, debt: OwedResume, revision: number): Promise<void> {
    const call = continueGenerationCall(`refit-${debt.refit_id}-resume-owed`, this.deps.timeoutSecs);
    let outcome;
    try {
      outcome = await this.deps.host.run(id, call);
    } catch {
      return; // no longer ours, or removed: the next owner pays
    }
    if (outcome.kind !== 'answer' || outcome.status < 200 || outcome.status >= 300) return; // tried again later
    this.deps.log.info({ worker_id: id, refit_id: debt.refit_id }, 'paid a resume owed since a refit that could not resume this engine');
    // A newer debt written meanwhile (another refit) is that refit's to settle.
    if (this.owed.get(id)?.revision !== revision) return;
    this.owed.delete(id);
    await this.deps.bucket.delete(id).catch(() => {});
  }
}
