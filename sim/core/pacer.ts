// What the scheduler hands its admitted requests to: a pacer owns the waiting queue and the
// running set and decides when each request produces its tokens. Two exist: fixed-pacer.ts (every
// request at --token-rate) and batch-pacer.ts (the realistic cost model's batched steps). This
// file holds only the contract between the scheduler and a pacer; it never schedules.

import type { Finish, Sequence } from './sequence.ts';

/** What an observer (the KV-event relay) hears of the prefix cache; the pacer does not know what it feeds. */
export interface KvHooks {
  /** Whole pages stored: `tokens[from:]` is new, `tokens` its path from the root. */
  stored?(tokens: readonly number[], from: number, dpRank: number): void;
  /** Whole pages evicted: `tokens[from:]`, with its path from the root. */
  removed?(tokens: readonly number[], from: number, dpRank: number): void;
  /** The cache was flushed. */
  flushed?(): void;
}

/** The scheduler as a pacer sees it. */
export interface PacerHost {
  /** Whether waiting requests may start now (a pause that drains says yes, one that holds says no). */
  admits(): boolean;
  /** A token came out of some request (what a health probe waits for). */
  produced(): void;
  /** `seq` has new tokens and goes on: its listener hears of them. */
  progressed(seq: Sequence): void;
  /** `seq` is done (`finish` is why); the scheduler ends it (it calls `remove` back). */
  finished(seq: Sequence, finish: Finish): void;
  hooks(): KvHooks;
}

/** One DP rank's load: requests running and waiting, and the KV tokens the running ones hold. */
export interface RankLoad {
  running: number;
  waiting: number;
  tokens: number;
}

/** One DP rank's KV pool and cache, as loads report them (realistic model only). */
export interface KvFacts {
  /** Tokens held by running requests (SGLang's num_used_tokens: unlocked cache counts as free). */
  usedTokens: number;
  totalTokens: number;
  pageSize: number;
  /** Cache-hit tokens over prompt tokens of every request admitted so far. */
  cacheHitRate: number;
}

export interface Pacer {
  /** Waiting requests, first come first. */
  waiting(): Sequence[];
  running(): Sequence[];
  readonly waitingCount: number;
  readonly runningCount: number;
  /** Queues requests (state `waiting`): at the back, or at the front (retracted ones). */
  enqueue(seqs: readonly Sequence[], front?: boolean): void;
  /** Takes `seq` out of the queue or the running set; what it held (KV, cache locks) is freed. */
  remove(seq: Sequence): void;
  /** Takes every running request out (their KV freed, their tokens kept) for the caller to requeue. */
  retractRunning(): Sequence[];
  /** Starts what may start and keeps the running set producing. */
  admit(): void;
  /** Running requests stop producing until `thaw`. */
  freeze(): void;
  thaw(): void;
  /** Empties the prefix cache; the scheduler calls it only when nothing waits or runs. */
  flush(): void;
  byRank(): RankLoad[];
  /** Per DP rank; null when the pacer models no KV pool. */
  kv(): KvFacts[] | null;
  /** The pacer's part of `GET /_sim/state`. */
  view(): Record<string, unknown>;
  close(): void;
}
