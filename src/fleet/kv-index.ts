// What each engine holds in its KV cache, from its own KV events (kv-feed.ts applies them): per
// worker, the blocks stored and not yet removed, each known by its engine's hash and found by
// (parent hash, page tokens), so a request's whole pages are matched from the root as the engine
// chains them without this index knowing the engine's hash function. It answers cache_aware and
// bounded_affinity (policies/kv-event-index.ts): per request, how many leading blocks each engine
// holds. It checks the sequence numbers: a batch missing means events were lost, and the worker
// starts over from what comes next. Pure: time comes from the clock it is given, the workers'
// models from `modelOf`; it never opens a stream.

import type { KvBatch, KvEvent } from '../engines/kv-events.ts';
import type { KvEventIndex, KvOverlap } from './policies/kv-event-index.ts';

/**
 * Blocks kept per worker. An engine's blocks are bounded by its KV pool (SGLang's default pool,
 * 524,288 tokens, is 32,768 pages of 16); this is 8 times that. Past it new blocks are not
 * recorded (the engine is under-counted, never over) until removals make room: a cache that
 * large is rare, and what is already known keeps matching.
 */
export const MAX_BLOCKS_PER_WORKER = 262_144;
/** A worker whose stream is down this long is forgotten: what it held may have changed unseen. */
export const KV_STREAM_GRACE_MS = 10_000;

/** The parent of a chain's first block: never a hash (those are decimal). */
const ROOT = '';

interface Block {
  /** Its (parent, page) key. */
  path: string;
  /** Times stored and not removed (two DP ranks behind one worker may hold the same page). */
  refs: number;
}

/** One worker's view of its engine's cache. */
class Held {
  /** `parent|page` → block hash. */
  readonly byPath = new Map<string, string>();
  readonly byHash = new Map<string, Block>();
  /** Tokens per block, from the engine's events. */
  blockSize = 0;
  /** Last sequence applied (undefined: nothing seen since the start or a reset). */
  sequence: bigint | undefined;
  /** When its stream was lost, while it is down. */
  lostAt: number | undefined;

  clear(): void {
    this.byPath.clear();
    this.byHash.clear();
  }

  store(parent: string | undefined, blocks: readonly { hash: string; tokens: readonly number[]; size: number }[], cap: number): void {
    let p = parent ?? ROOT;
    for (const b of blocks) {
      if (b.size > 0) this.blockSize = b.size;
      const known = this.byHash.get(b.hash);
      if (known) known.refs++;
      else if (this.byHash.size < cap) {
        const path = pathOf(p, pageKey(b.tokens, 0, b.tokens.length));
        this.byHash.set(b.hash, { path, refs: 1 });
        this.byPath.set(path, b.hash);
      }
      p = b.hash;
    }
  }

  remove(hashes: readonly string[]): void {
    for (const h of hashes) {
      const b = this.byHash.get(h);
      if (!b || --b.refs > 0) continue;
      this.byHash.delete(h);
      if (this.byPath.get(b.path) === h) this.byPath.delete(b.path);
    }
  }

  /** Leading pages of `pages` held, each chained on the one before from the root. */
  leading(pages: readonly string[]): number {
    let parent = ROOT;
    let n = 0;
    for (const page of pages) {
      const h = this.byPath.get(pathOf(parent, page));
      if (h === undefined) break;
      parent = h;
      n++;
    }
    return n;
  }
}

export interface KvIndexDeps {
  /** Milliseconds, only compared (a monotonic clock in the gateway, stepped in tests). */
  clock: () => number;
  /** The model a worker serves (the registry's), read at each question: discovery may change it. */
  modelOf: (workerId: string) => string | undefined;
  graceMs?: number;
  maxBlocks?: number;
}

export class KvIndex implements KvEventIndex {
  private readonly workers = new Map<string, Held>();
  private readonly graceMs: number;
  private readonly maxBlocks: number;

  constructor(private readonly deps: KvIndexDeps) {
    this.graceMs = deps.graceMs ?? KV_STREAM_GRACE_MS;
    this.maxBlocks = deps.maxBlocks ?? MAX_BLOCKS_PER_WORKER;
  }

  /**
   * One batch of the worker's stream, in order. An event batch must follow the last one applied
   * (sequence + 1) and a load-only heartbeat repeat it; anything else means batches were lost
   * (or the engine's numbering started over): the worker's blocks are dropped and it starts over
   * from this batch. A repeat of the last event batch (a replay that starts at it) is skipped.
   * With `dpRank`, events of other DP ranks are not this worker's (a flush empties every rank).
   */
  apply(workerId: string, batch: KvBatch, dpRank?: number): void {
    const w = this.live(workerId) ?? this.add(workerId);
    w.lostAt = undefined;
    const last = w.sequence;
    if (last !== undefined) {
      const next = batch.sequence === last + 1n;
      if (batch.events.length === 0) {
        if (batch.sequence !== last && !next) w.clear();
      } else if (batch.sequence === last) {
        return;
      } else if (!next) w.clear();
    }
    w.sequence = batch.sequence;
    const mine = dpRank === undefined || batch.dpRank === undefined || batch.dpRank === dpRank;
    for (const ev of batch.events) if (mine || ev.kind === 'cleared') this.applyEvent(w, ev);
  }

  /** The last sequence applied for the worker: its stream resumes after it (0n: from now). */
  resumeAfter(workerId: string): bigint {
    return this.live(workerId)?.sequence ?? 0n;
  }

  /** The worker's stream dropped: it is forgotten unless a batch arrives within the grace period. */
  streamLost(workerId: string): void {
    const w = this.live(workerId);
    if (w && w.lostAt === undefined) w.lostAt = this.deps.clock();
  }

  /** The worker is gone (removed from the registry, or its engine streams no events). */
  forget(workerId: string): void {
    this.workers.delete(workerId);
  }

  /** Blocks known for the worker, undefined when nothing is (for the per-worker gauge). */
  blocksOf(workerId: string): number | undefined {
    return this.live(workerId)?.byHash.size;
  }

  size(modelId: string | undefined): number {
    let n = 0;
    for (const [, w] of this.each(modelId)) n += w.byHash.size;
    return n;
  }

  overlap(modelId: string | undefined, tokens: readonly number[]): KvOverlap {
    const scores = new Map<string, number>();
    const blocks = new Map<string, number>();
    // The request's pages per block size: engines of one model normally share one.
    const pagesBySize = new Map<number, string[]>();
    for (const [id, w] of this.each(modelId)) {
      blocks.set(id, w.byHash.size);
      if (w.blockSize <= 0 || w.byPath.size === 0) continue;
      let pages = pagesBySize.get(w.blockSize);
      if (!pages) pagesBySize.set(w.blockSize, (pages = pagesOf(tokens, w.blockSize)));
      const n = w.leading(pages);
      if (n > 0) scores.set(id, n);
    }
    return { scores, blocks };
  }

  /** The model's workers still known (all of them without a model), forgetting those lost too long. */
  private *each(modelId: string | undefined): Generator<[string, Held]> {
    for (const [id, w] of this.workers) {
      if (this.expired(w)) {
        this.workers.delete(id);
        continue;
      }
      if (modelId === undefined || this.deps.modelOf(id) === modelId) yield [id, w];
    }
  }

  private live(workerId: string): Held | undefined {
    const w = this.workers.get(workerId);
    if (w && this.expired(w)) {
      this.workers.delete(workerId);
      return undefined;
    }
    return w;
  }

  private expired(w: Held): boolean {
    return w.lostAt !== undefined && this.deps.clock() - w.lostAt > this.graceMs;
  }

  private applyEvent(w: Held, ev: KvEvent): void {
    switch (ev.kind) {
      case 'stored':
        w.store(ev.parent, ev.blocks, this.maxBlocks);
        return;
      case 'removed':
        w.remove(ev.hashes);
        return;
      case 'cleared':
        w.clear();
        return;
    }
  }

  private add(workerId: string): Held {
    const w = new Held();
    this.workers.set(workerId, w);
    return w;
  }
}

/** The request's whole pages of `size` tokens, each as a key. */
function pagesOf(tokens: readonly number[], size: number): string[] {
  const out: string[] = [];
  for (let at = 0; at + size <= tokens.length; at += size) out.push(pageKey(tokens, at, at + size));
  return out;
}

/** Tokens as a fixed-width string: two UTF-16 code units each. */
function pageKey(tokens: readonly number[], from: number, to: number): string {
  let s = '';
  for (let i = from; i < to; i++) {
    const t = tokens[i]! >>> 0;
    s += String.fromCharCode(t >>> 16, t & 0xffff);
  }
  return s;
}

function pathOf(parent: string, page: string): string {
  return `${parent}|${page}`;
}
