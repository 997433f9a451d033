// The refits' progress events, kept: a JetStream stream over `<root>.refit.*.events`, so that any
// replica can replay one refit's events from its start (GET /v1/rl/refits/{id}/events), whichever
// replica ran it, and a client that reconnects misses nothing. Events are published with a plain
// publish (the stream captures them): progress must never slow a refit down, and the report, the
// one thing a trainer cannot miss, is also in the refit's journal.

import { DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { decode, encode } from './codec.ts';
import type { Subjects } from './subjects.ts';
import { openStream } from './stream.ts';

const NS_PER_MS = 1_000_000;
/** Kept as long as the refits' journals. */
const MAX_AGE_MS = 24 * 3_600_000;
/** A bound on disk: a refit over 10,000 engines writes ~40,000 events; the oldest go first. */
const MAX_BYTES = 512 * 1024 * 1024;

export function refitEventsStreamName(root: string): string {
  return `RLGATE_${root.replace(/[^A-Za-z0-9_-]/g, '_').toUpperCase()}_REFIT_EVENTS`;
}

/** One kept event and its place in the stream (the SSE event id). */
export interface StoredEvent {
  seq: number;
  event: Record<string, unknown>;
}

export class RefitEventLog {
  private constructor(
    private readonly nc: NatsConnection,
    private readonly subjects: Subjects,
    readonly stream: string,
  ) {}

  /** Creates the stream (or joins it if another replica already did). */
  static async open(nc: NatsConnection, subjects: Subjects, opts: { replicas?: number } = {}): Promise<RefitEventLog> {
    const jsm = await jetstreamManager(nc);
    const stream = refitEventsStreamName(subjects.root);
    const replicas = opts.replicas ?? (nc.info?.cluster ? 3 : 1);
    await openStream(jsm, {
      name: stream,
      subjects: [subjects.allRefitEvents()],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: replicas,
      max_age: MAX_AGE_MS * NS_PER_MS,
      max_bytes: MAX_BYTES,
      discard: DiscardPolicy.Old,
    });
    return new RefitEventLog(nc, subjects, stream);
  }

  /** Whether the stream holds any event of this refit (a refit queued on another replica and not yet taken has its `accepted`). */
  async has(refitId: string): Promise<boolean> {
    try {
      const jsm = await jetstreamManager(this.nc);
      // null when the stream holds nothing on that subject
      return (await jsm.streams.getMessage(this.stream, { last_by_subj: this.subjects.refitEvents(refitId) })) !== null;
    } catch {
      return false;
    }
  }

  publish(refitId: string, event: Record<string, unknown>): void {
    this.nc.publish(this.subjects.refitEvents(refitId), encode(event));
  }

  /**
   * Calls `onEvent` with each kept event of the refit, from its first (or after `afterSeq`), then
   * with each new one, until `signal` aborts. Resolves when it stops.
   */
  async follow(refitId: string, afterSeq: number, onEvent: (e: StoredEvent) => void, signal: AbortSignal): Promise<void> {
    const js = jetstream(this.nc);
    const consumer = await js.consumers.get(this.stream, {
      // One subject, not a list: nats-server 2.9 takes a single filter only.
      filter_subjects: this.subjects.refitEvents(refitId),
      ...(afterSeq > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: afterSeq + 1 } : { deliver_policy: DeliverPolicy.All }),
    });
    if (signal.aborted) return;
    const messages = await consumer.consume();
    const stop = () => messages.stop();
    signal.addEventListener('abort', stop, { once: true });
    try {
      for await (const m of messages) {
        let event: unknown;
        try {
          event = decode(m.data);
        } catch {
          continue; // not ours: nothing else publishes here, but a bad message must not end the stream
        }
        if (event && typeof event === 'object') onEvent({ seq: m.seq, event: event as Record<string, unknown> });
      }
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }
}
