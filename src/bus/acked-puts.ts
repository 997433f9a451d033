// Plain KV puts as JetStream publishes whose acks all come back on one subscription: many writes
// in flight at once (a burst of registrations writes several records per engine) each cost a
// publish and a map entry. A nats.js request per write costs an inbox token, a timer and an error
// object capturing its stack: three to four times the CPU. It owns the ack inbox and the
// deadline of every write in flight; the bucket's options and conditional writes (create,
// update) stay with nats.js's KV.

import { createInbox, type NatsConnection, type Subscription } from '@nats-io/transport-node';

interface Pending {
  resolve(seq: number): void;
  reject(err: Error): void;
  /** When the write is given up (performance.now()). */
  until: number;
  subject: string;
}

/** The write got no ack in time (named as nats.js names its own, which placement.ts checks for). */
export class AckTimeout extends Error {
  override readonly name = 'TimeoutError';
  constructor(subject: string, ms: number) {
    super(`no JetStream ack for ${subject} within ${ms} ms`);
  }
}

export class AckedPuts {
  private readonly inbox: string;
  private readonly prefix: string;
  private readonly pending = new Map<string, Pending>();
  private sub: Subscription | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private seq = 0;
  private readonly decoder = new TextDecoder();

  constructor(
    private readonly nc: NatsConnection,
    /** How long one write may wait for its ack (the buckets' request timeout). */
    private readonly timeoutMs: number,
    /** The user's reply prefix: a server that lets it read only its own inboxes refuses `_INBOX.>`. */
    inboxPrefix?: string,
  ) {
    this.inbox = createInbox(inboxPrefix);
    this.prefix = `${this.inbox}.`;
  }

  /** Publishes `data` to a stream subject; resolves with the stored message's sequence (the KV revision). */
  publish(subject: string, data: Uint8Array): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const token = (++this.seq).toString(36);
      try {
        this.sub ??= this.nc.subscribe(`${this.inbox}.*`, { callback: (err, msg) => void (err ?? this.acked(msg.subject, msg)) });
        this.nc.publish(subject, data, { reply: this.prefix + token });
      } catch (err) {
        reject(err as Error);
        return;
      }
      // Map order is publish order, so the sweep stops at the first write still in time.
      this.pending.set(token, { resolve, reject, until: performance.now() + this.timeoutMs, subject });
      this.sweeper ??= setInterval(() => this.sweep(), Math.max(50, this.timeoutMs / 4)).unref();
    });
  }

  private acked(subject: string, msg: { data: Uint8Array; headers?: { hasError: boolean; code: number; description: string } }): void {
    const token = subject.slice(this.prefix.length);
    const p = this.pending.get(token);
    if (!p) return; // timed out already
    this.pending.delete(token);
    // No stream listens on the subject (the server answers 503 "no responders"): as nats.js says it.
    if (msg.headers?.hasError) {
      p.reject(new Error(msg.headers.code === 503 ? 'jetstream is not enabled' : `JetStream answered ${msg.headers.code} ${msg.headers.description}`));
      return;
    }
    try {
      const ack = JSON.parse(this.decoder.decode(msg.data)) as { seq?: number; error?: { description?: string; code?: number } };
      if (ack.error || typeof ack.seq !== 'number') p.reject(new Error(ack.error?.description ?? 'invalid ack response'));
      else p.resolve(ack.seq);
    } catch (err) {
      p.reject(err as Error);
    }
  }

  private sweep(): void {
    const now = performance.now();
    for (const [token, p] of this.pending) {
      if (p.until > now) break;
      this.pending.delete(token);
      p.reject(new AckTimeout(p.subject, this.timeoutMs));
    }
    if (this.pending.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }
}
