// The fixed cost model (the default): every running request produces `tokenRate` tokens/s on a
// timer, whatever else runs; prefill is free; up to `maxRunningRequests` run at once; the prefix
// "cache" is a set of prompt hashes, a hit reporting all but the last prompt token cached. With
// no rate (Infinity or ≤ 0) a request produces everything the moment it starts. It never
// touches a wire and knows nothing of pauses beyond freeze and thaw.

import type { KvFacts, Pacer, PacerHost, RankLoad } from './pacer.ts';
import type { Sequence } from './sequence.ts';

const CACHE_LIMIT = 100_000;

export interface FixedPacerOptions {
  /** Tokens per second per request; Infinity (or ≤ 0) = everything at admission. */
  tokenRate: number;
  maxRunningRequests: number;
  dpSize: number;
}

export class FixedPacer implements Pacer {
  private readonly queue: Sequence[] = [];
  private readonly active = new Set<Sequence>();
  private readonly prefixCache = new Set<number>();
  private ticker: NodeJS.Timeout | null = null;
  private frozen = false;
  private readonly tickMs: number;
  private readonly instant: boolean;

  constructor(
    private readonly opts: FixedPacerOptions,
    private readonly host: PacerHost,
  ) {
    this.instant = !Number.isFinite(opts.tokenRate) || opts.tokenRate <= 0;
    this.tickMs = this.instant ? 0 : Math.max(1, Math.min(20, 1000 / opts.tokenRate));
  }

  waiting(): Sequence[] {
    return [...this.queue];
  }

  running(): Sequence[] {
    return [...this.active];
  }

  get waitingCount(): number {
    return this.queue.length;
  }

  get runningCount(): number {
    return this.active.size;
  }

  enqueue(seqs: readonly Sequence[], front = false): void {
    for (const s of seqs) s.state = 'waiting';
    if (front) this.queue.unshift(...seqs);
    else this.queue.push(...seqs);
  }

  remove(s: Sequence): void {
    if (this.active.delete(s)) return;
    const i = this.queue.indexOf(s);
    if (i >= 0) this.queue.splice(i, 1);
  }

  /** Retracted requests lose their KV, and with it every cached prefix. */
  retractRunning(): Sequence[] {
    const back = [...this.active];
    this.active.clear();
    if (back.length > 0) this.prefixCache.clear();
    return back;
  }

  admit(): void {
    if (!this.host.admits()) return;
    const now = performance.now();
    while (this.queue.length > 0 && this.active.size < this.opts.maxRunningRequests) {
      const s = this.queue.shift()!;
      this.prefill(s);
      s.state = 'running';
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
      this.active.add(s);
      if (s.done) {
        this.host.finished(s, s.finish!);
        continue;
      }
      if (this.instant) this.runToEnd(s);
    }
    if (this.active.size > 0) this.startTicker();
  }

  freeze(): void {
    this.frozen = true;
    this.stopTicker();
  }

  /** Pacing restarts from now: a frozen request does not catch up on the time it was frozen. */
  thaw(): void {
    this.frozen = false;
    const now = performance.now();
    for (const s of this.active) {
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
    }
    if (this.active.size > 0) this.startTicker();
  }

  flush(): void {
    this.prefixCache.clear();
  }

  byRank(): RankLoad[] {
    const out = Array.from({ length: this.opts.dpSize }, () => ({ running: 0, waiting: 0, tokens: 0 }));
    for (const s of this.active) {
      const r = out[s.params.dpRank];
      r.running++;
      r.tokens += s.params.promptIds.length + s.outputIds.length;
    }
    for (const s of this.queue) out[s.params.dpRank].waiting++;
    return out;
  }

  kv(): KvFacts[] | null {
    return null;
  }

  view(): Record<string, unknown> {
    return { costModel: 'fixed', cache: null, kv: null };
  }

  close(): void {
    this.stopTicker();
  }

  private prefill(s: Sequence): void {
    const h = s.params.promptHash;
    const hit = this.prefixCache.has(h);
    // Counted once, at the first prefill: a retracted request lost its KV (cachedTokens 0).
    if (s.outputIds.length === 0 && s.retractions === 0) {
      s.cachedTokens = hit ? Math.max(0, s.params.promptIds.length - 1) : 0;
    }
    if (this.prefixCache.size >= CACHE_LIMIT) this.prefixCache.clear();
    this.prefixCache.add(h);
    if (!hit) this.host.hooks().stored?.(s.params.promptIds, 0, s.params.dpRank);
  }

  private runToEnd(s: Sequence): void {
    for (;;) {
      const finished = s.step();
      this.host.produced();
      if (finished) break;
      this.host.progressed(s);
    }
    this.host.finished(s, s.finish!);
  }

  private startTicker(): void {
    if (this.ticker || this.instant || this.frozen) return;
    this.ticker = setTimeout(() => this.tick(), this.tickMs);
  }

  private stopTicker(): void {
    if (this.ticker) clearTimeout(this.ticker);
    this.ticker = null;
  }

  private tick(): void {
    this.ticker = null;
    if (this.frozen) return;
    const now = performance.now();
    const rate = this.opts.tokenRate / 1000;
    for (const s of [...this.active]) {
      const target = s.runBase + Math.floor((now - s.runStartedAt) * rate);
      let produced = false;
      let finished = false;
      while (s.outputIds.length < target) {
        produced = true;
        if (s.step()) {
          finished = true;
          break;
        }
      }
      if (produced) this.host.produced();
      if (finished) this.host.finished(s, s.finish!);
      else if (produced) this.host.progressed(s);
    }
    this.admit();
    if (this.active.size > 0) this.startTicker();
  }
}
