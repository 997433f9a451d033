// The durable refit queue: a JetStream work-queue stream that holds each refit request until a
// replica has run it to its report, de-duplicated by refit id (the message id). One shared pull
// consumer hands each message to one replica; the runner keeps it with `working()` while the
// refit runs and acks it after the report. A replica that dies stops extending it, so after the
// ack wait the message goes to another replica, which reads the refit's journal (refit/journal.ts).

import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { encode } from './codec.ts';
import { openStream } from './stream.ts';
import type { Subjects } from './subjects.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';

/** Shared pull consumer of every replica on a subject root. */
export const RUNNERS = 'refit-runners';
const NS_PER_MS = 1_000_000;

export function refitStreamName(root: string): string {
  return `RLGATE_${root.replace(/[^A-Za-z0-9_-]/g, '_').toUpperCase()}_REFITS`;
}

export class RefitQueue {
  private stopped = false;
  private iter: { stop(): void } | undefined;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly subjects: Subjects,
    readonly stream: string,
    /** How long a taken refit stays with a replica that stopped extending it. */
    readonly ackWaitMs: number,
  ) {}

  /**
   * The ack wait for a lease: twice it, at least 5 s. A runner whose connection moves to another
   * NATS node keeps its refit; one that died is replaced after it.
   */
  static ackWaitFor(leaseMs: number): number {
    return Math.max(5_000, 2 * leaseMs);
  }

  /** Creates the stream and the shared consumer (or joins them if another replica already did). */
  static async open(nc: NatsConnection, subjects: Subjects, opts: { ackWaitMs: number; replicas?: number }): Promise<RefitQueue> {
    const jsm = await jetstreamManager(nc);
    const stream = refitStreamName(subjects.root);
    const replicas = opts.replicas ?? (nc.info?.cluster ? 3 : 1);
    await openStream(jsm, {
      name: stream,
      subjects: [subjects.refitSubmit()],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      num_replicas: replicas,
      // A retried submission with the same refit id within this window is one refit.
      duplicate_window: 10 * 60_000 * NS_PER_MS,
      max_age: 24 * 3_600_000 * NS_PER_MS,
    });
    try {
      await jsm.consumers.info(stream, RUNNERS);
    } catch {
      await jsm.consumers
        .add(stream, { durable_name: RUNNERS, ack_policy: AckPolicy.Explicit, ack_wait: opts.ackWaitMs * NS_PER_MS, max_deliver: -1 })
        .catch(async (err: unknown) => {
          await jsm.consumers.info(stream, RUNNERS).catch(() => {
            throw err;
          });
        });
    }
    return new RefitQueue(nc, subjects, stream, opts.ackWaitMs);
  }

  /** Queues one refit; `duplicate` when a refit with this id was already queued. */
  async submit(refitId: string, payload: QueuedRefit): Promise<{ duplicate: boolean }> {
    const js = jetstream(this.nc);
    const ack = await js.publish(this.subjects.refitSubmit(), encode(payload), { msgID: refitId });
    return { duplicate: ack.duplicate };
  }

  /** Takes refits as they come; each handler runs on its own, the message in its hands. */
  async consume(handler: (msg: JsMsg) => void): Promise<void> {
    const js = jetstream(this.nc);
    const consumer = await js.consumers.get(this.stream, RUNNERS);
    // A pull request lives at the server until it expires, whether or not its client can still be
    // reached: a redelivered refit would go to a replica that was cut off (nats.js's default is
    // 30 s, so a takeover took up to 30 s). Pulls that expire well within the ack wait leave a
    // redelivery only live replicas to go to.
    const expires = Math.max(1_000, Math.min(5_000, Math.floor(this.ackWaitMs / 2)));
    const messages = await consumer.consume({ max_messages: 8, expires });
    this.iter = messages;
    void (async () => {
      for await (const m of messages) {
        if (this.stopped) {
          m.nak();
          continue;
        }
        handler(m);
      }
    })().catch(() => {});
  }

  close(): void {
    this.stopped = true;
    this.iter?.stop();
  }
}
