// The realistic cost model on the wall clock: one batch engine per DP rank (batch-engine.ts), each
// run step after step, every step lasting what its batch costs. Steps shorter than a timer tick
// run back to back against a virtual clock, so throughput does not depend on timer resolution; a
// stalled process catches up by at most CATCH_UP_MS. A freeze drops the step under way (its
// tokens never come; what it allocated stays with the requests) and thaws into a fresh one. It
// also draws each request's natural output length. It never touches a wire.

import { BatchEngine, type Step } from './batch-engine.ts';
import type { CostModel } from './cost-model.ts';
import { outputLength } from './output-length.ts';
import type { KvFacts, Pacer, PacerHost, RankLoad } from './pacer.ts';
import type { Sequence } from './sequence.ts';

const CATCH_UP_MS = 20;

interface Rank {
  readonly engine: BatchEngine;
  step: Step | null;
  /** When the step under way ends, on the virtual clock. */
  dueAt: number;
  timer: NodeJS.Timeout | null;
  /** Inside a step's start or end: a nested admit waits for the loop to go on. */
  busy: boolean;
}

export class BatchPacer implements Pacer {
  private readonly ranks: Rank[];
  private frozen = false;

  constructor(
    private readonly model: CostModel,
    maxRunningRequests: number,
    dpSize: number,
    private readonly host: PacerHost,
  ) {
    this.ranks = Array.from({ length: dpSize }, (_, r) => ({
      engine: new BatchEngine({
        model,
        maxRunningRequests,
        now: () => performance.now(),
        listener: {
          stored: (tokens, from) => host.hooks().stored?.(tokens, from, r),
          removed: (tokens, from) => host.hooks().removed?.(tokens, from, r),
        },
      }),
      step: null,
      dueAt: 0,
      timer: null,
      busy: false,
    }));
  }

  waiting(): Sequence[] {
    return this.ranks.flatMap((r) => r.engine.waiting());
  }

  running(): Sequence[] {
    return this.ranks.flatMap((r) => r.engine.running());
  }

  get waitingCount(): number {
    return this.ranks.reduce((n, r) => n + r.engine.waitingCount, 0);
  }

  get runningCount(): number {
    return this.ranks.reduce((n, r) => n + r.engine.runningCount, 0);
  }

  enqueue(seqs: readonly Sequence[], front = false): void {
    const m = this.model;
    // Front: the first of `seqs` ends up first.
    for (const s of front ? [...seqs].reverse() : seqs) {
      if (!s.params.ignoreEos && s.eosAt === null) {
        s.eosAt = Math.max(s.params.minNewTokens, outputLength(m.randomSeed, s.params.seed, m.outputLenMedian, m.outputLenSigma));
      }
      this.ranks[s.params.dpRank].engine.enqueue(s, front);
    }
  }

  remove(seq: Sequence): void {
    this.ranks[seq.params.dpRank]?.engine.remove(seq);
  }

  retractRunning(): Sequence[] {
    return this.ranks.flatMap((r) => r.engine.retractAll());
  }

  admit(): void {
    if (this.frozen) return;
    for (let r = 0; r < this.ranks.length; r++) this.run(r, performance.now());
  }

  freeze(): void {
    this.frozen = true;
    for (const rank of this.ranks) {
      if (rank.timer) clearTimeout(rank.timer);
      rank.timer = null;
      rank.step = null;
    }
  }

  thaw(): void {
    this.frozen = false;
    this.admit();
  }

  flush(): void {
    for (const r of this.ranks) r.engine.flush();
  }

  byRank(): RankLoad[] {
    return this.ranks.map((r) => {
      const k = r.engine.kvStats();
      return { running: k.running, waiting: k.waiting, tokens: k.heldTokens };
    });
  }

  kv(): KvFacts[] {
    return this.ranks.map((r) => r.engine.kvFacts());
  }

  view(): Record<string, unknown> {
    const caches = this.ranks.map((r) => r.engine.cacheStats());
    const kvs = this.ranks.map((r) => r.engine.kvStats());
    const sum = <T extends object>(rows: T[], keys: Array<keyof T>): Record<string, number> =>
      Object.fromEntries(keys.map((k) => [k, rows.reduce((n, row) => n + (row[k] as number), 0)]));
    return {
      costModel: 'realistic',
      costFigures: this.model,
      cache: sum(caches, [
        'tokens',
        'evictableTokens',
        'requests',
        'promptTokens',
        'hitTokens',
        'evictions',
        'evictedTokens',
        'flushes',
        'prefilledTokens',
        'decodedTokens',
      ]),
      kv: {
        ...sum(kvs, ['usedTokens', 'totalTokens', 'heldTokens', 'running', 'waiting', 'retractions']),
        pageSize: this.model.pageSize,
      },
      ranks: caches.map((cache, dpRank) => ({ dpRank, cache, kv: kvs[dpRank] })),
    };
  }

  close(): void {
    this.freeze();
  }

  /** Starts rank `r`'s next step at `at` (virtual time) unless one is under way; runs due steps at once. */
  private run(r: number, at: number): void {
    const rank = this.ranks[r];
    if (rank.busy || rank.step || this.frozen) return;
    rank.busy = true;
    try {
      for (;;) {
        const { step, aborted } = rank.engine.begin(this.host.admits());
        for (const a of aborted) this.host.finished(a.seq, a.finish);
        if (!step || this.frozen) return;
        const now = performance.now();
        rank.step = step;
        rank.dueAt = Math.max(at, now - CATCH_UP_MS) + step.durationMs;
        if (rank.dueAt > now) {
          rank.timer = setTimeout(() => this.fire(r), rank.dueAt - now);
          return;
        }
        // Already due (a step shorter than a timer tick): complete it now.
        at = rank.dueAt;
        this.complete(rank);
        if (this.frozen) return;
      }
    } finally {
      rank.busy = false;
    }
  }

  private fire(r: number): void {
    const rank = this.ranks[r];
    rank.timer = null;
    if (!rank.step) return;
    rank.busy = true;
    try {
      this.complete(rank);
    } finally {
      rank.busy = false;
    }
    this.run(r, rank.dueAt);
  }

  private complete(rank: Rank): void {
    const step = rank.step!;
    rank.step = null;
    const { progressed, finished } = rank.engine.end(step);
    if (progressed.length + finished.length > 0) this.host.produced();
    for (const s of progressed) this.host.progressed(s);
    for (const s of finished) this.host.finished(s, s.finish!);
  }
}
