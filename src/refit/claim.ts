// How a runner comes to hold a queued refit's journal, by compare-and-set in the `refits` bucket
// (one replica wins): a new refit's journal is created, with what the runner found on its targets
// (asleep, paused by an operator); a refit whose runner died is taken over, the takeover recorded
// and announced, where it goes on read from the journal (`recoveryOf`), and its start waits until
// the dead replica's engines have a new owner. It never calls an engine or decides whether a
// refit may run (runner.ts does).

import type { Recovered } from '../../actors/coordinator.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import { JournalWriter, recoveryOf } from './journal.ts';
import { planRefit, type RefitPlan } from './plan.ts';
import type { RefitPublisher } from './publisher.ts';
import type { ResumesOwed } from './resumes-owed.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';

type Control = { control: string; pausedBy: string | undefined };

/** The journal this runner holds now, and where a taken-over refit goes on (none: from the start). */
export interface Claimed {
  writer: JournalWriter;
  recovered?: Recovered;
}

export class RefitClaim {
  constructor(
    private readonly deps: {
      replicaId: string;
      bucket: JsonBucket<RefitJournal>;
      view: FleetView;
      owed: Pick<ResumesOwed, 'has'>;
      events: RefitPublisher;
      log: Logger;
      /** How long a takeover waits for the dead replica's engines to have a new owner. */
      settleMs: number;
      /**
       * Resolves when every engine has a live owner other than `dead` (or the time is up): a
       * refit taken over from a replica that also owned engines waits for their new owner.
       */
      ownersSettled: (ids: string[], dead: string, timeoutMs: number) => Promise<void>;
      /** An engine's control and who paused it, as its shared record says now (read afresh), or undefined. */
      recordedControl: (workerId: string) => Promise<Control | undefined>;
      /** Who paused a paused engine, as this replica knows it now (engine-host.ts). */
      pausedBy: (workerId: string) => string | undefined;
    },
  ) {}

  /** A new refit's journal, created; null when another replica started it just now. */
  async create(q: QueuedRefit, targets: Worker[], onFenced: () => void): Promise<Claimed | null> {
    const j = this.newJournal(q, targets, await this.controlsNow(targets));
    const revision = await this.deps.bucket.create(q.id, j).catch(() => null);
    if (revision === null) return null;
    return { writer: new JournalWriter(this.deps.bucket, j, revision, onFenced) };
  }

  /**
   * The journal of a refit whose runner stopped (another replica, or this one before a restart
   * under the same id), taken over; null when another replica took it over first.
   */
  async takeOver(q: QueuedRefit, existing: { value: RefitJournal; revision: number }, targets: Worker[], onFenced: () => void): Promise<Claimed | null> {
    const { replicaId } = this.deps;
    const j = existing.value;
    const from = j.holder;
    j.takeovers = [...(j.takeovers ?? []), { from: j.holder, to: replicaId, at: new Date().toISOString(), phase: j.phase, step_index: j.step_index }];
    this.deps.log.warn({ refit_id: q.id, from: j.holder, phase: j.phase, step_index: j.step_index }, 'taking over a refit whose replica stopped');
    this.deps.events.publish(q.id, { type: 'takeover', from: j.holder, to: replicaId, phase: j.phase, step_index: j.step_index });
    j.holder = replicaId;
    const revision = await this.deps.bucket.update(q.id, j, existing.revision).catch(() => null);
    if (revision === null) return null;
    const writer = new JournalWriter(this.deps.bucket, j, revision, onFenced);
    const plan = planOrNull(j, targets);
    const recovered = plan ? recoveryOf(j, plan.steps, plan.verify !== null) : undefined;
    // The dead replica may have owned engines too: their calls wait for the new owner.
    // (A replica restarted under its own id owns its engines again at once: nobody to wait for.)
    await this.deps.ownersSettled(q.targets, from === replicaId ? '' : from, this.deps.settleMs);
    return { writer, recovered };
  }

  /**
   * Each target's control (active, paused, asleep). An engine this replica owns is read from its
   * actor; another replica's engine from the view, and when the view says paused or asleep, from
   * its shared record read afresh: the view follows the bucket through a watch that can lag behind
   * it after a NATS node dies, and a pause it still shows from a finished refit would be taken for
   * an operator's and kept after this refit.
   */
  private async controlsNow(targets: Worker[]): Promise<Map<string, Control>> {
    const out = new Map<string, Control>();
    await Promise.all(
      targets.map(async (w) => {
        const e = this.deps.view.engine(w);
        let now: Control = { control: e.control as string, pausedBy: this.deps.pausedBy(w.id) };
        if (!e.hosted && now.control !== 'active') now = (await this.deps.recordedControl(w.id).catch(() => undefined)) ?? now;
        out.set(w.id, now);
      }),
    );
    return out;
  }

  private newJournal(q: QueuedRefit, targets: Worker[], controls: Map<string, Control>): RefitJournal {
    const { owed } = this.deps;
    // An asleep engine holds no weights in memory: it is reported, not paused or refitted.
    const asleep = targets.filter((w) => controls.get(w.id)?.control === 'asleep').map((w) => w.id);
    // Engines an operator paused before the refit stay paused after it: the refit resumes only
    // what it paused. A pause an earlier refit made is not an operator's, whether its resume is
    // owed or the record saying `paused` is a step behind the resume: this refit resumes it.
    const operatorPaused = (w: Worker) => {
      const c = controls.get(w.id);
      return c?.control === 'paused' && !c.pausedBy?.startsWith('refit:') && !owed.has(w.id);
    };
    const keepPaused = targets.filter((w) => !asleep.includes(w.id) && operatorPaused(w)).map((w) => w.id);
    return {
      id: q.id,
      status: 'running',
      holder: this.deps.replicaId,
      origin: q.origin,
      submitted_at: q.submitted_at,
      request: q.request,
      selector: q.selector,
      targets: q.targets,
      asleep,
      keep_paused: keepPaused,
      phase: null,
      step_index: 0,
      pending: [],
      engines: {},
      paused: [],
      resumed: [],
      takeovers: [],
      ...(q.parent ? { parent: q.parent } : {}),
    };
  }
}

/** The plan a taken-over journal was running, or null when it no longer fits the fleet. */
function planOrNull(j: RefitJournal, targets: Worker[]): RefitPlan | null {
  try {
    return planRefit(
      j.request,
      targets.filter((w) => !j.asleep.includes(w.id)),
    );
  } catch {
    return null;
  }
}
