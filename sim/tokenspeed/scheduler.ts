// The simulated frontend + scheduler: the admission gate (pause, released memory), the waiting
// queue, the running set paced at `tokenRate` tokens/s per request, TokenSpeed's pause modes
// (wait = drain, abort = abort in flight, keep = freeze), aborts by rid, the prefix cache and the
// health probe. It never touches the wire and never knows weight versions.

import type { Finish, Sequence } from './sequence.ts';

export type PauseMode = 'wait' | 'abort' | 'keep';
export const PAUSE_MODES: readonly PauseMode[] = ['wait', 'abort', 'keep'];

export interface SchedulerOptions {
  /** Tokens per second per request; Infinity = everything at admission. */
  tokenRate: number;
  maxRunningRequests: number;
  dpSize: number;
}

/** Hooks the KV-event relay listens on; the scheduler does not know what they feed. */
export interface SchedulerHooks {
  prefilled?(seq: Sequence, cacheHit: boolean): void;
  flushed?(): void;
}

const CACHE_LIMIT = 100_000;

export class Scheduler {
  paused: PauseMode | null = null;
  hooks: SchedulerHooks = {};
  /** Tokens produced since start (any output counts for the health probe). */
  outputs = 0;
  private readonly held = new Set<Sequence>();
  private readonly waiting: Sequence[] = [];
  private readonly running = new Set<Sequence>();
  private readonly live = new Map<string, Sequence>();
  private readonly prefixCache = new Set<number>();
  private gateLocks = 0;
  private ticker: NodeJS.Timeout | null = null;
  private idleWaiters: Array<() => void> = [];
  private outputWaiters: Array<() => void> = [];
  private readonly tickMs: number;
  private readonly instant: boolean;

  constructor(private readonly opts: SchedulerOptions) {
    this.instant = !Number.isFinite(opts.tokenRate) || opts.tokenRate <= 0;
    this.tickMs = this.instant ? 0 : Math.max(1, Math.min(20, 1000 / opts.tokenRate));
  }

  get gateOpen(): boolean {
    return this.paused === null && this.gateLocks === 0;
  }

  /** Nothing waiting or running (held requests are not in the scheduler yet). */
  get idle(): boolean {
    return this.waiting.length === 0 && this.running.size === 0;
  }

  isLive(rid: string): boolean {
    return this.live.has(rid);
  }

  liveRids(): string[] {
    return [...this.live.keys()];
  }

  counts(): { held: number; waiting: number; running: number; live: number } {
    return { held: this.held.size, waiting: this.waiting.length, running: this.running.size, live: this.live.size };
  }

  countsByRank(): Array<{ running: number; waiting: number; tokens: number }> {
    const out = Array.from({ length: this.opts.dpSize }, () => ({ running: 0, waiting: 0, tokens: 0 }));
    for (const s of this.running) {
      const r = out[s.params.dpRank];
      r.running++;
      r.tokens += s.params.promptIds.length + s.outputIds.length;
    }
    for (const s of this.waiting) out[s.params.dpRank].waiting++;
    return out;
  }

  sequences(limit: number): Array<{ rid: string; state: string; outputTokens: number }> {
    const out: Array<{ rid: string; state: string; outputTokens: number }> = [];
    for (const s of this.live.values()) {
      if (out.length >= limit) break;
      out.push({ rid: s.rid, state: s.state, outputTokens: s.outputIds.length });
    }
    return out;
  }

  /** Enters every choice of one call at once; their listeners must be set. */
  submit(seqs: Sequence[]): void {
    for (const s of seqs) this.live.set(s.rid, s);
    if (!this.gateOpen) {
      for (const s of seqs) { s.state = 'held'; this.held.add(s); }
      return;
    }
    for (const s of seqs) { s.state = 'waiting'; this.waiting.push(s); }
    this.admit();
  }

  /** The client went away: drop silently. */
  cancel(seq: Sequence): void {
    if (seq.state === 'finished') return;
    this.remove(seq);
    seq.state = 'finished';
    this.live.delete(seq.rid);
    this.settle();
  }

  /** Aborts every live request (held ones included) whose rid matches; returns how many. */
  abortWhere(match: (rid: string) => boolean, finish: Finish): number {
    let n = 0;
    for (const s of [...this.live.values()]) {
      if (match(s.rid)) { this.end(s, finish); n++; }
    }
    return n;
  }

  /**
   * `abort`: everything in flight ends now; `wait`: in-flight requests run to the end (the
   * returned promise resolves once drained); `keep`: running requests freeze as they are.
   * In every mode new requests are held at the front until `resume`.
   */
  pause(mode: PauseMode, abortFinish: Finish): Promise<void> {
    const wasFrozen = this.paused === 'keep';
    this.paused = mode;
    if (mode === 'abort') {
      this.abortWhere(() => true, abortFinish);
      return Promise.resolve();
    }
    if (mode === 'keep') {
      this.stopTicker();
      return Promise.resolve();
    }
    if (wasFrozen) this.rebase();
    this.admit();
    return this.whenIdle();
  }

  resume(): void {
    const wasFrozen = this.paused === 'keep';
    this.paused = null;
    if (wasFrozen) this.rebase();
    this.openGateIfFree();
    this.admit();
  }

  /** Closes the gate (released memory); returns the matching unlock. */
  lockGate(): () => void {
    this.gateLocks++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.gateLocks--;
      this.openGateIfFree();
      this.admit();
    };
  }

  whenIdle(): Promise<void> {
    if (this.idle) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * The deep health probe: a 1-token generation through the gate. Healthy at once when the gate
   * is open, or as soon as the scheduler produces any output; false after `timeoutMs`.
   */
  probe(timeoutMs: number): Promise<boolean> {
    if (this.gateOpen) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = (): void => { clearTimeout(timer); resolve(true); };
      const timer = setTimeout(() => {
        this.outputWaiters = this.outputWaiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      this.outputWaiters.push(waiter);
    });
  }

  /** Flushes the prefix cache; refused (false) while anything waits or runs. */
  flushCache(): boolean {
    if (!this.idle) return false;
    this.prefixCache.clear();
    this.hooks.flushed?.();
    return true;
  }

  close(): void {
    this.stopTicker();
    const waiters = this.outputWaiters;
    this.outputWaiters = [];
    for (const w of waiters) w();
  }

  private rebase(): void {
    const now = performance.now();
    for (const s of this.running) { s.runStartedAt = now; s.runBase = s.outputIds.length; }
  }

  private openGateIfFree(): void {
    if (!this.gateOpen || this.held.size === 0) return;
    for (const s of this.held) { s.state = 'waiting'; this.waiting.push(s); }
    this.held.clear();
  }

  private admit(): void {
    if (this.paused === 'keep' || this.paused === 'abort') return;
    const now = performance.now();
    while (this.waiting.length > 0 && this.running.size < this.opts.maxRunningRequests) {
      const s = this.waiting.shift()!;
      this.prefill(s);
      s.state = 'running';
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
      this.running.add(s);
      if (s.done) { this.end(s, s.finish!); continue; }
      if (this.instant) this.runToEnd(s);
    }
    if (this.running.size > 0) this.startTicker();
  }

  private prefill(s: Sequence): void {
    const h = s.params.promptHash;
    const hit = this.prefixCache.has(h);
    s.cachedTokens = hit ? Math.max(0, s.params.promptIds.length - 1) : 0;
    if (this.prefixCache.size >= CACHE_LIMIT) this.prefixCache.clear();
    this.prefixCache.add(h);
    this.hooks.prefilled?.(s, hit);
  }

  private runToEnd(s: Sequence): void {
    for (;;) {
      const finished = s.step();
      this.produced();
      if (finished) break;
      s.onUpdate?.(s);
    }
    this.end(s, s.finish!);
  }

  private startTicker(): void {
    if (this.ticker || this.instant || this.paused === 'keep') return;
    this.ticker = setTimeout(() => this.tick(), this.tickMs);
  }

  private stopTicker(): void {
    if (this.ticker) clearTimeout(this.ticker);
    this.ticker = null;
  }

  private tick(): void {
    this.ticker = null;
    if (this.paused === 'keep') return;
    const now = performance.now();
    const rate = this.opts.tokenRate / 1000;
    for (const s of [...this.running]) {
      const target = s.runBase + Math.floor((now - s.runStartedAt) * rate);
      let produced = false;
      let finished = false;
      while (s.outputIds.length < target) {
        produced = true;
        if (s.step()) { finished = true; break; }
      }
      if (produced) this.produced();
      if (finished) this.end(s, s.finish!);
      else if (produced) s.onUpdate?.(s);
    }
    this.admit();
    if (this.running.size > 0) this.startTicker();
  }

  private produced(): void {
    this.outputs++;
    if (this.outputWaiters.length === 0) return;
    const waiters = this.outputWaiters;
    this.outputWaiters = [];
    for (const w of waiters) w();
  }

  private remove(s: Sequence): void {
    if (s.state === 'running') this.running.delete(s);
    else if (s.state === 'held') this.held.delete(s);
    else if (s.state === 'waiting') {
      const i = this.waiting.indexOf(s);
      if (i >= 0) this.waiting.splice(i, 1);
    }
  }

  private end(s: Sequence, finish: Finish): void {
    if (s.state === 'finished') return;
    this.remove(s);
    s.state = 'finished';
    s.finish = finish;
    this.live.delete(s.rid);
    s.onUpdate?.(s);
    this.settle();
  }

  private settle(): void {
    if (!this.idle || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
