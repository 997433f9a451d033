// The simulated tokenizer front + scheduler: the admission gate (pause, weight-update drain,
// released memory), the waiting queue, the running set paced at `tokenRate` tokens/s per request,
// pause modes, aborts and the prefix cache. It never parses HTTP and never knows weight versions.

import { abortReason, type Sequence } from './sequence.ts';

export type PauseMode = 'abort' | 'retract' | 'in_place';
export const PAUSE_MODES: readonly PauseMode[] = ['abort', 'retract', 'in_place'];

export interface SchedulerOptions {
  /** Tokens per second per request; Infinity = produce everything at admission. */
  tokenRate: number;
  maxRunningRequests: number;
  dpSize: number;
}

// SGLang's messages: the tokenizer's default for a request dropped from the waiting queue, and
// FINISH_ABORT's default for a running one.
const ABORT_WAITING = 'Abort in waiting queue';
const ABORT_RUNNING = 'Aborted';
const CACHE_LIMIT = 100_000;

export class Scheduler {
  paused: PauseMode | null = null;
  /** Requests held at the front (paused, draining for a weight update, memory released). */
  private readonly held = new Set<Sequence>();
  private readonly waiting: Sequence[] = [];
  private readonly running = new Set<Sequence>();
  /** Every unfinished request by rid, held ones included: the abort route's exact-rid gate. */
  private readonly live = new Map<string, Sequence>();
  private readonly prefixCache = new Set<number>();
  private gateLocks = 0;
  private ticker: NodeJS.Timeout | null = null;
  private idleWaiters: Array<() => void> = [];
  private gateWaiters: Array<() => void> = [];
  private readonly tickMs: number;
  private readonly instant: boolean;

  constructor(private readonly opts: SchedulerOptions) {
    this.instant = !Number.isFinite(opts.tokenRate) || opts.tokenRate <= 0;
    this.tickMs = this.instant ? 0 : Math.max(1, Math.min(20, 1000 / opts.tokenRate));
  }

  get gateOpen(): boolean {
    return this.paused === null && this.gateLocks === 0;
  }

  isLive(rid: string): boolean {
    return this.live.has(rid);
  }

  counts(): { held: number; waiting: number; running: number } {
    return { held: this.held.size, waiting: this.waiting.length, running: this.running.size };
  }

  /** Running/waiting per DP rank, as `/v1/loads` reports them (held requests are not in it). */
  countsByRank(): Array<{ running: number; waiting: number }> {
    const out = Array.from({ length: this.opts.dpSize }, () => ({ running: 0, waiting: 0 }));
    for (const s of this.running) out[s.params.dpRank].running++;
    for (const s of this.waiting) out[s.params.dpRank].waiting++;
    return out;
  }

  /** True when nothing is waiting or running (held requests do not count, as in SGLang). */
  get idle(): boolean {
    return this.waiting.length === 0 && this.running.size === 0;
  }

  sequences(limit: number): Array<{ rid: string; state: string; outputTokens: number }> {
    const out: Array<{ rid: string; state: string; outputTokens: number }> = [];
    for (const s of this.live.values()) {
      if (out.length >= limit) break;
      out.push({ rid: s.rid, state: s.state, outputTokens: s.outputIds.length });
    }
    return out;
  }

  /** Enters requests (all children of one HTTP call at once). Their listeners must be set. */
  submit(seqs: Sequence[]): void {
    for (const s of seqs) this.live.set(s.rid, s);
    if (!this.gateOpen) {
      for (const s of seqs) { s.state = 'held'; this.held.add(s); }
      return;
    }
    for (const s of seqs) { s.state = 'waiting'; this.waiting.push(s); }
    this.admit();
  }

  /** Client went away: drop silently (SGLang aborts a disconnected request). */
  cancel(seq: Sequence): void {
    if (seq.state === 'finished') return;
    this.remove(seq);
    seq.state = 'finished';
    this.live.delete(seq.rid);
    this.settleIdle();
  }

  /** `/abort_request`: exact-rid gate at the front, then prefix match in the scheduler. */
  abort(rid: string, all: boolean): number {
    if (!all && !this.live.has(rid)) return 0;
    let n = 0;
    for (const s of [...this.waiting]) {
      if (all || s.rid.startsWith(rid)) { this.finish(s, abortReason(ABORT_WAITING)); n++; }
    }
    for (const s of [...this.running]) {
      if (all || s.rid.startsWith(rid)) { this.finish(s, abortReason(ABORT_RUNNING)); n++; }
    }
    return n;
  }

  pause(mode: PauseMode): void {
    this.paused = mode;
    this.stopTicker();
    if (mode === 'abort') {
      this.abort('', true);
    } else if (mode === 'retract') {
      // Running requests go back to the front of the waiting queue; their KV is dropped, the
      // tokens already produced are kept and recomputed after continue.
      const back = [...this.running];
      this.running.clear();
      for (const s of back) { s.state = 'waiting'; s.retractions++; s.cachedTokens = 0; }
      this.waiting.unshift(...back);
      if (back.length > 0) this.prefixCache.clear();
    }
  }

  resume(): void {
    this.paused = null;
    const now = performance.now();
    for (const s of this.running) { s.runStartedAt = now; s.runBase = s.outputIds.length; }
    this.openGateIfFree();
    this.admit();
  }

  /** Closes the gate (weight-update drain, released memory); returns the matching unlock. */
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

  /** Resolves once nothing is waiting or running. */
  whenIdle(): Promise<void> {
    if (this.idle) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Resolves true when the gate opens within `timeoutMs`, false otherwise. */
  whenGateOpen(timeoutMs: number): Promise<boolean> {
    if (this.gateOpen) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.gateWaiters = this.gateWaiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      const waiter = (): void => { clearTimeout(timer); resolve(true); };
      this.gateWaiters.push(waiter);
    });
  }

  /** `/flush_cache`: only when idle, as SGLang's scheduler checks. */
  flushCache(): boolean {
    if (!this.idle) return false;
    this.prefixCache.clear();
    return true;
  }

  close(): void {
    this.stopTicker();
    for (const w of this.gateWaiters) w();
    this.gateWaiters = [];
  }

  private openGateIfFree(): void {
    if (!this.gateOpen) return;
    if (this.held.size > 0) {
      for (const s of this.held) { s.state = 'waiting'; this.waiting.push(s); }
      this.held.clear();
    }
    const waiters = this.gateWaiters;
    this.gateWaiters = [];
    for (const w of waiters) w();
  }

  private admit(): void {
    if (this.paused !== null) return;
    const now = performance.now();
    while (this.waiting.length > 0 && this.running.size < this.opts.maxRunningRequests) {
      const s = this.waiting.shift()!;
      this.prefill(s);
      s.state = 'running';
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
      this.running.add(s);
      if (s.done) { this.finish(s, s.finishReason!); continue; }
      if (this.instant) this.runToEnd(s);
    }
    if (this.running.size > 0) this.startTicker();
  }

  private prefill(s: Sequence): void {
    const h = s.params.promptHash;
    if (s.outputIds.length === 0 && s.retractions === 0) {
      s.cachedTokens = this.prefixCache.has(h) ? Math.max(0, s.params.promptIds.length - 1) : 0;
    }
    if (this.prefixCache.size >= CACHE_LIMIT) this.prefixCache.clear();
    this.prefixCache.add(h);
  }

  private runToEnd(s: Sequence): void {
    while (!s.step()) s.onUpdate?.(s);
    this.finish(s, s.finishReason!);
  }

  private startTicker(): void {
    if (this.ticker || this.instant || this.paused !== null) return;
    this.ticker = setTimeout(() => this.tick(), this.tickMs);
  }

  private stopTicker(): void {
    if (this.ticker) clearTimeout(this.ticker);
    this.ticker = null;
  }

  private tick(): void {
    this.ticker = null;
    if (this.paused !== null) return;
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
      if (finished) this.finish(s, s.finishReason!);
      else if (produced) s.onUpdate?.(s);
    }
    this.admit();
    if (this.running.size > 0) this.startTicker();
  }

  private remove(s: Sequence): void {
    if (s.state === 'running') this.running.delete(s);
    else if (s.state === 'held') this.held.delete(s);
    else if (s.state === 'waiting') {
      const i = this.waiting.indexOf(s);
      if (i >= 0) this.waiting.splice(i, 1);
    }
  }

  private finish(s: Sequence, reason: NonNullable<Sequence['finishReason']>): void {
    if (s.state === 'finished') return;
    this.remove(s);
    s.state = 'finished';
    s.finishReason = reason;
    this.live.delete(s.rid);
    s.onUpdate?.(s);
    this.settleIdle();
  }

  private settleIdle(): void {
    if (!this.idle || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
