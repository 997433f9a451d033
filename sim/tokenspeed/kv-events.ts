// The KV-event relay behind SubscribeKvEvents: numbered KvEventBatch messages for blocks stored and
// removed as the prefix cache changes and for cache flushes, a bounded history (the rust relay
// replays from start_sequence_number; the Python servicer starts from now), and load-only
// heartbeats carrying EngineLoad. A block is one cache page; its hash chains on its parent's from
// the root. It never decides when blocks exist: the scheduler's hooks tell it.

import { createHash } from 'node:crypto';

/** Blocks per event under the fixed cost model, which has no pages of its own. */
export const BLOCK_SIZE = 16;
const HISTORY_LIMIT = 10_000;

/** KvEventBatch as proto-loader encodes it (64-bit fields as decimal strings). */
export interface KvBatch {
  sequence_number: string;
  timestamp: number;
  events: Array<Record<string, unknown>>;
  dp_rank?: number;
  load?: Record<string, unknown>;
}

export interface EngineLoadFacts {
  running: number;
  waiting: number;
  usedTokens: number;
  maxTotalTokens: number;
  maxRunning: number;
}

type Send = (batch: KvBatch) => void;

/** A signed 64-bit block hash (as a decimal string) chained on the parent's. */
function blockHash(parent: string | null, tokens: readonly number[]): string {
  const h = createHash('sha256')
    .update(parent ?? 'root')
    .update(Uint32Array.from(tokens))
    .digest();
  return BigInt.asIntN(64, h.readBigUInt64LE(0)).toString();
}

export class KvRelay {
  private seq = 0n;
  private eventId = 0n;
  private samples = 0n;
  private readonly history: KvBatch[] = [];
  private readonly subscribers = new Set<Send>();
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly opts: { replay: boolean; loadIntervalMs: number; blockSize: number; load: () => EngineLoadFacts }) {}

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  get lastSequence(): string {
    return this.seq.toString();
  }

  /** The blocks `tokens[from:]` (whole blocks only), `tokens` being their path from the root. */
  stored(tokens: readonly number[], from: number, dpRank: number): void {
    const size = this.opts.blockSize;
    const chain = this.chain(tokens);
    const first = Math.floor(from / size);
    const blocks: Array<Record<string, unknown>> = [];
    for (let i = first; i < chain.length; i++) {
      blocks.push({ block_hash: chain[i], token_ids: tokens.slice(i * size, (i + 1) * size), block_size: size });
    }
    if (blocks.length === 0) return;
    const stored: Record<string, unknown> = { blocks };
    if (first > 0) stored.parent_block_hash = chain[first - 1];
    this.publish([{ event_id: this.nextEventId(), stored }], dpRank);
  }

  /** The blocks `tokens[from:]` left the cache. */
  removed(tokens: readonly number[], from: number, dpRank: number): void {
    const hashes = this.chain(tokens).slice(Math.floor(from / this.opts.blockSize));
    if (hashes.length === 0) return;
    this.publish([{ event_id: this.nextEventId(), removed: { block_hashes: hashes } }], dpRank);
  }

  cleared(): void {
    this.publish([{ event_id: this.nextEventId(), cleared: {} }], 0);
  }

  /**
   * Adds a subscriber. With replay, batches after `startSequence` from the history go first.
   * Returns the unsubscribe function (also stops its heartbeat).
   */
  subscribe(startSequence: bigint, send: Send): () => void {
    if (this.opts.replay && startSequence > 0n) {
      for (const b of this.history) if (BigInt(b.sequence_number) > startSequence) send(b);
    }
    this.subscribers.add(send);
    const timer = setInterval(() => send(this.heartbeat()), this.opts.loadIntervalMs);
    timer.unref();
    this.timers.add(timer);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      clearInterval(timer);
      this.timers.delete(timer);
      this.subscribers.delete(send);
    };
  }

  close(): void {
    for (const t of this.timers) clearInterval(t);
    this.timers.clear();
    this.subscribers.clear();
  }

  /** A load-only batch: no events, the last sequence number repeated. */
  heartbeat(): KvBatch {
    const f = this.opts.load();
    this.samples++;
    return {
      sequence_number: this.seq.toString(),
      timestamp: Date.now() / 1000,
      events: [],
      dp_rank: 0,
      load: {
        running_requests: f.running,
        waiting_requests: f.waiting,
        token_usage: f.maxTotalTokens > 0 ? f.usedTokens / f.maxTotalTokens : 0,
        gen_throughput: 0,
        max_running_requests: f.maxRunning,
        age_ms: 0,
        sample: this.samples.toString(),
        load_only: true,
        num_used_tokens: f.usedTokens,
        max_total_num_tokens: f.maxTotalTokens,
      },
    };
  }

  /** The hash of every whole block of `tokens`, each chained on the one before. */
  private chain(tokens: readonly number[]): string[] {
    const size = this.opts.blockSize;
    const out: string[] = [];
    let parent: string | null = null;
    for (let at = 0; at + size <= tokens.length; at += size) {
      parent = blockHash(parent, tokens.slice(at, at + size));
      out.push(parent);
    }
    return out;
  }

  private nextEventId(): string {
    this.eventId++;
    return this.eventId.toString();
  }

  private publish(events: Array<Record<string, unknown>>, dpRank: number): void {
    this.seq++;
    const batch: KvBatch = { sequence_number: this.seq.toString(), timestamp: Date.now() / 1000, events, dp_rank: dpRank };
    this.history.push(batch);
    if (this.history.length > HISTORY_LIMIT) this.history.splice(0, this.history.length - HISTORY_LIMIT);
    for (const s of this.subscribers) s(batch);
  }
}
