// This replica's consumer of the refit queue: takes each message, drops one that is not a refit
// a gateway queued, holds the others while they run (`working()`: a replica that dies stops
// extending its message, and another takes it), hands the queued refit to the runner, and
// applies the verdict the runner returns. The one place a queue message is acked, handed back or
// dropped. It never reads a journal or calls an engine (runner.ts does).

import type { JsMsg } from '@nats-io/jetstream';
import type { RefitQueue } from '../bus/refit-queue.ts';
import type { Logger } from '../obs/logger.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import { readQueuedRefit } from './queue-verdict.ts';

/** What becomes of a queue message once the runner is done with it. */
export type Verdict =
  /** Its refit is over (its report is in the journal): the message is acknowledged. */
  | { settle: 'ack' }
  /** Handed back (`nak`), to come again after `afterMs`, or at once without it. */
  | { settle: 'retry'; afterMs?: number }
  /** Dropped for good (`term`): never redelivered. */
  | { settle: 'drop'; reason: string }
  /** Neither: it comes again after the ack wait (another replica holds the refit now). */
  | { settle: 'leave'; reason: string };

/** One delivery of a queued refit, as the runner is handed it. */
export interface Delivery {
  /** 1 on the first delivery, more when it was handed back or its ack wait ran out. */
  count: number;
  /** Aborted once this replica shuts down: a refit running here ends with what it has. */
  draining: AbortSignal;
}

/** Runs a queued refit (or leaves it), and says what becomes of its message. */
export interface RefitTaker {
  take(q: QueuedRefit, delivery: Delivery): Promise<Verdict>;
}

/** How soon a message whose handling failed unexpectedly comes again. */
const FAILED_RETRY_MS = 1_000;

export class RefitWorker {
  private readonly running = new Set<Promise<void>>();
  private readonly draining = new AbortController();

  constructor(private readonly deps: { queue: RefitQueue; runner: RefitTaker; log: Logger }) {}

  async start(): Promise<void> {
    await this.deps.queue.consume((msg) => {
      const p = this.handle(msg).catch((err: unknown) => {
        this.deps.log.error({ err }, 'refit runner failed');
        msg.nak(FAILED_RETRY_MS);
      });
      this.running.add(p);
      void p.finally(() => this.running.delete(p));
    });
  }

  /** Takes no new refit and waits for the running ones (each still resumes what it paused). */
  async drain(): Promise<void> {
    this.draining.abort();
    this.deps.queue.close();
    await Promise.allSettled([...this.running]);
  }

  private async handle(msg: JsMsg): Promise<void> {
    const read = readQueuedRefit(msg.data, msg.headers?.get('Nats-Msg-Id') || undefined);
    if (!read.ok) {
      // Handing it back would bring it back for the stream's whole max age: drop it, say so. (No
      // reason in the term: nats-server 2.9 ignores a `+TERM <reason>`, and redelivers.)
      this.deps.log.warn({ reason: read.reason, subject: msg.subject, seq: msg.seq }, 'dropped a refit queue message that is not a refit this gateway queued');
      return msg.term();
    }
    if (this.draining.signal.aborted) return msg.nak();
    // Held while it runs: a replica that dies stops extending it, and another takes it.
    const keep = setInterval(() => msg.working(), Math.max(200, Math.floor(this.deps.queue.ackWaitMs / 3)));
    let verdict: Verdict;
    try {
      verdict = await this.deps.runner.take(read.refit, { count: msg.info.deliveryCount, draining: this.draining.signal });
    } finally {
      clearInterval(keep);
    }
    settle(msg, verdict, this.deps.log, read.refit.id);
  }
}

function settle(msg: JsMsg, verdict: Verdict, log: Logger, refitId: string): void {
  switch (verdict.settle) {
    case 'ack':
      return msg.ack();
    case 'retry':
      return msg.nak(verdict.afterMs);
    case 'drop':
      log.debug({ refit_id: refitId, reason: verdict.reason }, 'dropped a refit queue message');
      return msg.term();
    case 'leave':
      log.debug({ refit_id: refitId, reason: verdict.reason }, 'left a refit queue message to its ack wait');
      return;
  }
}
