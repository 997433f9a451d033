// What this replica knows of the engines another replica owns: each owner's shared record (the
// `engines` bucket), which routing and listings read, and the notices this replica sends an owner
// on `<root>.engine.<id>.notice` (a data-plane failure seen here, an operator's write made here).
// Notices sent to this replica come back through `onNotice`. It never runs an actor.

import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { Logger } from '../obs/logger.ts';
import type { EngineNotice } from '../wire/engine-notice.ts';
import type { EngineRecord } from '../wire/engine-state.ts';

export class RemoteEngines {
  private readonly records = new Map<string, EngineRecord>();
  private readonly sub: BusSubscription;

  constructor(
    private readonly deps: { bus: Bus; subjects: Subjects; log: Logger },
    onNotice: (id: string, notice: EngineNotice) => void,
  ) {
    this.sub = deps.bus.subscribe(deps.subjects.allEngineNotices(), (data, msg) => {
      const id = msg.subject.split('.').at(-2) ?? '';
      onNotice(id, data as EngineNotice);
    });
  }

  /** The owner's last shared record of the engine. */
  record(id: string): EngineRecord | undefined {
    return this.records.get(id);
  }

  /** A record from the shared bucket (null: deleted). */
  set(id: string, record: EngineRecord | null): void {
    if (record) this.records.set(id, record);
    else this.records.delete(id);
  }

  forget(id: string): void {
    this.records.delete(id);
  }

  /** Tells the engine's owner what this replica learned. */
  notify(id: string, notice: EngineNotice): void {
    try {
      this.deps.bus.publish(this.deps.subjects.engineNotice(id), notice);
    } catch (err) {
      this.deps.log.debug({ err, worker_id: id }, 'could not notify the engine owner');
    }
  }

  close(): void {
    this.sub.unsubscribe();
  }
}
