// Keeps the shared `engines` bucket in step with what this replica's actors observed. Writes of
// one engine go one at a time, the newest value wins, and a write the bus failed is tried again
// until it lands. Other replicas decide by these records (routing, which engines a refit they run
// keeps paused), so a record left behind by an outage — an engine still `paused` after its
// resume — must not wait for the engine's next change to be repaired. A record that changes no
// routing decision may be held back a moment (`putUnlessReplaced`): if a newer one comes first,
// it is never written.

import type { JsonBucket } from '../bus/buckets.ts';
import type { Logger } from '../obs/logger.ts';
import type { EngineRecord } from '../wire/engine-state.ts';

const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 2_000;

export class RecordWriter {
  /** The value each engine's record must get next; null removes the record. */
  private readonly pending = new Map<string, EngineRecord | null>();
  private readonly writing = new Set<string>();
  /** Ends the wait before a retry: a new value goes out at once, not after an old one's backoff. */
  private readonly wakers = new Map<string, () => void>();
  /** Bumped when an engine leaves: a failed write from before is not tried again. */
  private readonly epochs = new Map<string, number>();
  /** Records held back until they have lasted (putUnlessReplaced), by engine. */
  private readonly held = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly deps: { records: JsonBucket<EngineRecord>; log: Logger }) {}

  put(id: string, record: EngineRecord): void {
    this.release(id);
    this.pending.set(id, record);
    this.wakers.get(id)?.();
    void this.drain(id);
  }

  /**
   * Writes `record` only if no newer put, removal or forget for the engine comes within `ms`: a
   * state that ends sooner is not worth a KV write (a refit's `refitting` of an engine its pause
   * already took out of routing).
   */
  putUnlessReplaced(id: string, record: EngineRecord, ms: number): void {
    this.release(id);
    if (this.closed) return;
    const timer = setTimeout(() => {
      this.held.delete(id);
      this.put(id, record);
    }, ms);
    timer.unref?.();
    this.held.set(id, timer);
  }

  remove(id: string): void {
    this.release(id);
    this.pending.set(id, null);
    this.wakers.get(id)?.();
    void this.drain(id);
  }

  /** The engine left this replica: its new owner writes its record now (a removal still goes). */
  forget(id: string): void {
    this.release(id);
    if (this.pending.get(id) !== null) this.pending.delete(id);
    if (this.writing.has(id)) this.epochs.set(id, (this.epochs.get(id) ?? 0) + 1);
  }

  /** The replica stops: what is not written stays as it was (the records outlive replicas). */
  close(): void {
    this.closed = true;
    this.pending.clear();
    for (const timer of this.held.values()) clearTimeout(timer);
    this.held.clear();
  }

  /** Drops the record held back for the engine, if any: something newer replaces it. */
  private release(id: string): void {
    const timer = this.held.get(id);
    if (timer === undefined) return;
    clearTimeout(timer);
    this.held.delete(id);
  }

  private async drain(id: string): Promise<void> {
    if (this.writing.has(id)) return;
    this.writing.add(id);
    let failures = 0;
    try {
      while (!this.closed && this.pending.has(id)) {
        const value = this.pending.get(id)!;
        const epoch = this.epochs.get(id);
        this.pending.delete(id);
        try {
          if (value) await this.deps.records.put(id, value);
          else await this.deps.records.delete(id);
          if (failures > 0) this.deps.log.info({ worker_id: id, attempts: failures + 1 }, 'wrote the shared engine record after the bus failed it');
          failures = 0;
        } catch (err) {
          // Tried again unless a newer value came meanwhile (then that one is written instead).
          if (!this.pending.has(id) && this.epochs.get(id) === epoch) this.pending.set(id, value);
          failures++;
          if (failures === 1) this.deps.log.debug({ err, worker_id: id }, 'could not write the shared engine record; trying again');
          await new Promise<void>((resolve) => {
            const timer = setTimeout(done, Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (failures - 1)));
            timer.unref?.();
            function done() {
              clearTimeout(timer);
              resolve();
            }
            this.wakers.set(id, done);
          });
          this.wakers.delete(id);
        }
      }
    } finally {
      this.writing.delete(id);
      this.epochs.delete(id);
    }
  }
}
