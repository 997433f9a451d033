// What this replica's engines answered to each fan-out share, by request id, kept for a while.
// A caller whose replies were lost in a bus outage asks for them once the bus is back
// (`rl.replica.<id>.outcomes`) instead of failing legs whose calls may well have succeeded.

import type { LegReply, ShareOutcomes } from '../wire/replica-share.ts';

const KEEP_MS = 10 * 60_000;
/** At most this many shares are kept, however busy the replica: the oldest go first. */
const KEEP_SHARES = 4_096;

interface Entry {
  replies: LegReply[];
  done: boolean;
  at: number;
}

export class OutcomeLog {
  private readonly byRequest = new Map<string, Entry>();

  begin(requestId: string): void {
    this.prune();
    this.byRequest.set(requestId, { replies: [], done: false, at: Date.now() });
  }

  record(requestId: string, reply: LegReply): void {
    this.byRequest.get(requestId)?.replies.push(reply);
  }

  end(requestId: string): void {
    const e = this.byRequest.get(requestId);
    if (e) e.done = true;
  }

  /** The replies recorded so far, and whether the share is over; null for a request never seen. */
  get(requestId: string): ShareOutcomes {
    const e = this.byRequest.get(requestId);
    return e ? { replies: e.replies, done: e.done } : null;
  }

  private prune(): void {
    const cutoff = Date.now() - KEEP_MS;
    for (const [id, e] of this.byRequest) {
      if (e.at >= cutoff && this.byRequest.size < KEEP_SHARES) break; // insertion order: the rest are newer
      this.byRequest.delete(id);
    }
  }
}
