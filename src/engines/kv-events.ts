// The KV-cache event stream of one TokenSpeed engine (`SubscribeKvEvents`, proto/common.proto):
// its batches as plain values (block hashes as decimal strings, sequence numbers as bigints), and
// the subscription that keeps one stream open: reopened after a drop, resuming after the last
// sequence applied (the engines replay what came after it, when they keep a history), with
// backoff between attempts, and given up for good when the engine answers UNIMPLEMENTED. It
// never interprets the events: what an engine holds is the index's business (fleet/kv-index.ts).

/** One cache page an engine stored: its hash (chained on its parent's by the engine) and tokens. */
export interface KvBlock {
  hash: string;
  tokens: number[];
  /** Tokens per block (`block_size`), the engine's page. */
  size: number;
}

export type KvEvent =
  /** A chain of blocks, the first one's parent being `parent` (absent: the root). */
  | { kind: 'stored'; parent: string | undefined; blocks: KvBlock[] }
  | { kind: 'removed'; hashes: string[] }
  /** The engine's whole cache emptied (a flush). */
  | { kind: 'cleared' };

export interface KvBatch {
  sequence: bigint;
  /** The DP rank whose cache changed, when the engine says. */
  dpRank: number | undefined;
  /** Empty in a load-only heartbeat, which repeats the last sequence number. */
  events: KvEvent[];
}

/** Why a stream ended: `unimplemented` is final, the others are retried. */
export interface KvStreamEnd {
  kind: 'unimplemented' | 'failed' | 'ended';
  detail: string;
}

export interface KvStreamHandlers {
  batch(b: KvBatch): void;
  /** Called once, when the stream ended by itself (never after `cancel()`). */
  ended(e: KvStreamEnd): void;
}

/** An engine that streams KV events (GrpcEngineClient). */
export interface KvEventSource {
  /** Opens one stream of the batches after `after` (0: from now). */
  subscribeKvEvents(after: bigint, on: KvStreamHandlers): { cancel(): void };
}

/** First wait after a failed or ended stream; doubled per failure in a row, up to the cap. */
export const KV_RETRY_MIN_MS = 250;
export const KV_RETRY_MAX_MS = 30_000;

export interface KvSubscriptionDeps {
  source: KvEventSource;
  /**
   * The last sequence applied, asked before each (re)open: the stream resumes after it. 0: from
   * now. SMG's monitor and the engines' relays read `start_sequence_number` as "after this".
   */
  resumeAfter(): bigint;
  batch(b: KvBatch): void;
  /** The stream dropped: `end.kind` says whether it is reopened (not for `unimplemented`). */
  lost(end: KvStreamEnd): void;
  /** Uniform in [0, 1), for the jitter of the waits (Math.random by default). */
  random?: () => number;
}

/** One engine's stream, kept open until close() or an UNIMPLEMENTED answer. */
export class KvSubscription {
  private call: { cancel(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failures = 0;
  private closed = false;

  constructor(private readonly deps: KvSubscriptionDeps) {
    this.open();
  }

  /** Whether it still streams or waits to reopen (false once closed or refused). */
  get active(): boolean {
    return !this.closed;
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const call = this.call;
    this.call = undefined;
    call?.cancel();
  }

  private open(): void {
    this.timer = undefined;
    if (this.closed) return;
    let current = true;
    const call = this.deps.source.subscribeKvEvents(this.deps.resumeAfter(), {
      batch: (b) => {
        if (!current || this.closed) return;
        // A stream that delivers is healthy: the next drop starts the backoff over.
        this.failures = 0;
        this.deps.batch(b);
      },
      ended: (e) => {
        if (!current || this.closed) return;
        current = false;
        this.call = undefined;
        this.deps.lost(e);
        if (e.kind === 'unimplemented') {
          this.closed = true;
          return;
        }
        this.retryLater();
      },
    });
    // The source may have ended the stream synchronously (a client already closed).
    if (current) this.call = call;
  }

  private retryLater(): void {
    const base = Math.min(KV_RETRY_MAX_MS, KV_RETRY_MIN_MS * 2 ** this.failures);
    this.failures = Math.min(this.failures + 1, 20);
    // Half to all of the wait: replicas that lost one engine at once do not come back in step.
    const ms = base * (0.5 + 0.5 * (this.deps.random ?? Math.random)());
    this.timer = setTimeout(() => this.open(), ms);
    this.timer.unref?.();
  }
}

/** A KvEventBatch as proto-loader decodes it (longs as strings, oneofs named) → a KvBatch; undefined when malformed. */
export function kvBatchFromProto(msg: unknown): KvBatch | undefined {
  const m = msg as { sequence_number?: unknown; dp_rank?: unknown; events?: unknown } | null;
  if (!m) return undefined;
  const sequence = bigintOf(m.sequence_number);
  if (sequence === undefined) return undefined;
  const events: KvEvent[] = [];
  for (const e of Array.isArray(m.events) ? m.events : []) {
    const ev = eventOf(e);
    if (ev) events.push(ev);
  }
  const dpRank = typeof m.dp_rank === 'number' ? m.dp_rank : undefined;
  return { sequence, dpRank, events };
}

function eventOf(raw: unknown): KvEvent | undefined {
  const e = raw as { data?: string; stored?: any; removed?: any; cleared?: unknown } | null; // eslint-disable-line @typescript-eslint/no-explicit-any
  if (!e) return undefined;
  const kind = e.data ?? (e.stored ? 'stored' : e.removed ? 'removed' : e.cleared ? 'cleared' : undefined);
  switch (kind) {
    case 'stored': {
      const s = e.stored ?? {};
      const blocks: KvBlock[] = [];
      for (const b of Array.isArray(s.blocks) ? s.blocks : []) {
        if (b?.block_hash === undefined || b.block_hash === null) continue;
        const tokens = (Array.isArray(b.token_ids) ? b.token_ids : []).map(Number);
        const size = Number(b.block_size);
        blocks.push({ hash: String(b.block_hash), tokens, size: size > 0 ? size : tokens.length });
      }
      const parent = s.parent_block_hash === undefined || s.parent_block_hash === null ? undefined : String(s.parent_block_hash);
      return { kind: 'stored', parent, blocks };
    }
    case 'removed':
      return { kind: 'removed', hashes: (Array.isArray(e.removed?.block_hashes) ? e.removed.block_hashes : []).map(String) };
    case 'cleared':
      return { kind: 'cleared' };
    default:
      return undefined;
  }
}

function bigintOf(v: unknown): bigint | undefined {
  if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'bigint') return undefined;
  try {
    return BigInt(v);
  } catch {
    return undefined;
  }
}
