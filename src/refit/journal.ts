// A refit's journal in the shared `refits` bucket: the request, the targets, and before each
// phase's calls go out, which phase and step is running and on which engines; as answers arrive,
// each engine's outcome. The replica running the refit is its only writer, by compare-and-set, so
// a replica that lost the refit (it was thought dead and another took it) learns so on its next
// write and stops. A replica that takes a refit over reads the journal and goes on from it
// (`recoveryOf`). At the end the journal holds the report.

import type { Recovered, RefitStepPlan } from '../../actors/coordinator.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';
import type { EngineRefitRecord, Phase } from '../wire/refit-phase.ts';
import { READ_BACK } from './plan.ts';

/**
 * A refit some of whose pauses may land late: it was taken over (the old runner's pauses were in
 * flight, or its replica was cut off), or a pause failed without an answer saying it did not run.
 */
export function pausesInDoubt(j: RefitJournal): boolean {
  if (j.takeovers.length > 0) return true;
  return Object.values(j.engines).some((e) => e.failedIn === 'pause' && e.status === undefined);
}

/** Someone else holds the refit now: this replica must stop running it. */
export class JournalFenced extends Error {
  override readonly name = 'JournalFenced';
}

/**
 * The single writer of one refit's journal. Writes are serialised; bursts collapse into one; a
 * staged patch rides with the next write.
 */
export class JournalWriter {
  private chain: Promise<void> = Promise.resolve();
  private queued: Promise<void> | null = null;
  /** The last write asked for (it may still be on its way). */
  private last: Promise<void> = Promise.resolve();
  /** A patch was staged since the last write started, or the last write failed: the bucket is behind. */
  private behind = false;
  fenced = false;

  constructor(
    private readonly bucket: JsonBucket<RefitJournal>,
    public journal: RefitJournal,
    private revision: number,
    private readonly onFenced: () => void,
  ) {}

  /** The bucket revision of the last write that landed. */
  get written(): number {
    return this.revision;
  }

  /**
   * Applies `patch` to the journal without writing it: it travels with the next write. For what
   * no takeover relies on before the next write (phase-runner.ts says which).
   */
  stage(patch: Partial<RefitJournal>): void {
    Object.assign(this.journal, patch);
    this.behind = true;
  }

  /** Resolves once everything applied so far (written or staged) is in the bucket. */
  durable(): Promise<void> {
    if (this.queued) return this.queued;
    if (this.behind) return this.update({});
    return this.last;
  }

  /**
   * Applies `patch` now and writes the journal. Patches made before the write starts travel in
   * the same write; the promise resolves when a write holding this patch is in the bucket.
   */
  update(patch: Partial<RefitJournal>): Promise<void> {
    Object.assign(this.journal, patch);
    if (this.queued) return this.queued;
    const next = this.chain.then(() => {
      this.queued = null;
      this.behind = false;
      return this.write().catch((err: unknown) => {
        this.behind = true; // what it held goes with the next write
        throw err;
      });
    });
    this.queued = next;
    this.last = next;
    this.chain = next.catch(() => {});
    return next;
  }

  /**
   * Whether this writer still holds the journal, read afresh (after its own writes): false, and
   * fenced, once the bucket holds a newer revision (another replica took the refit over);
   * undefined when it cannot be read now. An older revision is a lagging read: it says nothing.
   */
  async confirm(): Promise<boolean | undefined> {
    if (this.fenced) return false;
    await this.chain;
    const now = await this.bucket.get(this.journal.id).catch(() => undefined);
    if (now === undefined) return undefined;
    if (now !== null && now.revision > this.revision) {
      this.fenced = true;
      this.onFenced();
      return false;
    }
    return !this.fenced;
  }

  private async write(): Promise<void> {
    if (this.fenced) throw new JournalFenced(`refit ${this.journal.id} is held by another replica`);
    try {
      this.revision = await this.bucket.update(this.journal.id, this.journal, this.revision);
    } catch (err) {
      // A stale revision is a takeover; any other failure (the bus is down) is retried by the
      // next write, and the phase that needed it waits for it.
      if (isWrongRevision(err)) {
        this.fenced = true;
        this.onFenced();
        throw new JournalFenced(`refit ${this.journal.id} was taken over by another replica`);
      }
      throw err;
    }
  }
}

/**
 * Whether a phase's journal write must be in the bucket before its calls go out, `previous` being
 * the phase the journal names until then. A takeover reads `phase` to know where to go on
 * (`recoveryOf`): from the phase before a pause, a version check or a resume after a refit step it
 * goes on the same way (pausing again, checking again, resuming again: each changes nothing on an
 * engine that had it), but from the phase before a refit step it would load again, and from the
 * pause before a resume that calls the refit off (no refit step ran) it would pause and go ahead.
 * The other writes travel with the next one.
 */
export function durableBefore(phase: Phase, previous: Phase | null): boolean {
  return phase === 'refit' || (phase === 'resume' && (previous === null || previous === 'pause'));
}

/**
 * Whether a refit step's answers must be in the bucket before the refit goes on: a takeover from
 * the step judges the engines it lists as `pending` failed (`recoveryOf`). Not after a disk load
 * that a version check follows: a takeover checks every engine's version then, whatever the
 * journal says of its load, and loads again one that did not land.
 */
export function answersDurable(step: RefitStepPlan | undefined, verify: boolean): boolean {
  return !(step?.name === 'update_weights_from_disk' && verify);
}

/** How soon a failed journal write (or a write that goes with one) is tried again. */
const RETRY_MS = 250;

/**
 * Retries `fn` until it succeeds, the journal is fenced, or `stop()` says to give up (the bus may
 * be down for a while): what must be in the bucket before a refit goes on waits for it.
 */
export async function retryWrite(fn: () => Promise<unknown>, stop: () => boolean): Promise<void> {
  for (;;) {
    try {
      await fn();
      return;
    } catch (err) {
      if (err instanceof JournalFenced || stop()) return;
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}

function isWrongRevision(err: unknown): boolean {
  const text = String((err as Error)?.message ?? err);
  return /wrong last sequence|10071/.test(text);
}

/**
 * Where a refit taken over from a dead replica goes on, from its journal. Legs sent and not
 * answered are in doubt: the pause starts over; a disk load in doubt is checked by the
 * version check (it landed or it did not; the runner sends one that did not again, then checks
 * again: leg-recovery.ts); a distributed transfer in doubt
 * cannot go on (the trainer's broadcast passed), so its group is torn down and the engines are
 * reported failed (they may hold part of the weights); a verify or resume in doubt is sent again
 * (both change nothing on an engine that already had it).
 */
export function recoveryOf(j: RefitJournal, steps: RefitStepPlan[], verify: boolean): Recovered {
  const engines: Record<string, EngineRefitRecord> = structuredClone(j.engines);
  const base = { engines, paused: [...j.paused], resumed: [...j.resumed], stepIndex: j.step_index, abortReason: j.abort_reason };
  const fail = (id: string, phase: Phase, step?: string) => {
    const rec = (engines[id] ??= { phases: {} });
    if (rec.failedIn !== undefined) return;
    Object.assign(rec, {
      failedIn: phase,
      step,
      error: 'gateway_failover',
      message: `the replica running this refit died during the ${phase} phase${step ? ` (${step})` : ''}; its outcome on this engine is unknown`,
    });
  };
  switch (j.phase) {
    // Nothing was loaded yet: the pause starts over, on every target. Pausing a paused engine
    // changes nothing, and a pause of the dead runner that lands after the resume is undone by
    // the engine's owner (pause-reconciler.ts), so the refit goes on instead of failing.
    case null:
    case 'pause':
      return {
        engines: Object.fromEntries(j.targets.filter((id) => !j.asleep.includes(id)).map((id) => [id, { phases: {} }])),
        paused: [],
        resumed: [],
        stepIndex: 0,
        abortReason: undefined,
        at: 'pausing',
      };
    case 'refit': {
      const step = steps[j.step_index];
      const last = j.step_index === steps.length - 1;
      if (step?.name === 'update_weights_from_disk' && verify) return { ...base, at: 'verifying' };
      // A read-back in doubt changed nothing: the version check goes on (the group, if any, is torn down).
      if (step?.name.startsWith(READ_BACK)) return { ...base, at: steps.at(-1)?.runOn === 'joined' ? 'cleanup' : verify ? 'verifying' : 'resuming' };
      if (step?.runOn === 'joined' && last) return { ...base, at: verify ? 'verifying' : 'resuming' };
      for (const id of j.pending) fail(id, 'refit', step?.name);
      if (steps.length > 1) {
        // The transfer cannot go on: every engine still in it is failed, the group is torn down.
        for (const id of j.paused) fail(id, 'refit', step?.name);
        return { ...base, at: 'cleanup' };
      }
      return { ...base, at: 'resuming' };
    }
    case 'verify':
      return { ...base, at: 'verifying' };
    case 'resume':
      return { ...base, at: 'resuming' };
  }
}
