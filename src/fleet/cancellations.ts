// A replica's table of work it is doing on behalf of callers, by request id, so that a caller
// that went away (an HTTP client disconnect on whichever replica fronted it) can cancel it over
// `rl.replica.<id>.cancel`. Only bookkeeping: the engine actor does the actual dropping.

import { setMaxListeners } from 'node:events';
import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';

export class Cancellations {
  private readonly live = new Map<string, Set<AbortController>>();
  private sub: BusSubscription | undefined;

  listen(bus: Bus, subjects: Subjects, replicaId: string): void {
    this.sub = bus.subscribe(subjects.replicaCancel(replicaId), (data) => {
      const id = (data as { requestId?: unknown })?.requestId;
      if (typeof id === 'string') this.cancel(id);
    });
  }

  /** Runs `work` with a signal that fires if `requestId` is cancelled while it runs. */
  async track<T>(requestId: string | undefined, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ctrl = new AbortController();
    // One signal serves every leg of a fan-out share, one listener per leg: no leak to warn of.
    setMaxListeners(0, ctrl.signal);
    if (!requestId) return work(ctrl.signal);
    let set = this.live.get(requestId);
    if (!set) this.live.set(requestId, (set = new Set()));
    set.add(ctrl);
    try {
      return await work(ctrl.signal);
    } finally {
      set.delete(ctrl);
      if (set.size === 0) this.live.delete(requestId);
    }
  }

  cancel(requestId: string): void {
    for (const c of this.live.get(requestId) ?? []) c.abort();
  }

  close(): void {
    this.sub?.unsubscribe();
    for (const set of this.live.values()) for (const c of set) c.abort();
    this.live.clear();
  }
}
