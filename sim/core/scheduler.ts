// The simulated scheduler every engine runs: the admission gate (a pause, a weight-update drain,
// released memory), requests held at the front while it is shut, the waiting queue, the running
// set paced at `tokenRate` tokens/s per request, aborts, the prefix cache, DP ranks, and the waits
// on all of it (idle, gate open, any output). What each pause mode means is the engine's: its
// mode table says whether a mode drains or freezes, its own pause steps abort or retract. It
// never touches a wire and never knows weight versions.

import type { Finish, Sequence } from './sequence.ts';
import { Waiters } from './waiters.ts';

/** What a pause mode does besides holding new requests at the front (every mode does that). */
export interface PauseEffect {
  /** Requests already waiting still start: the pause drains what is in flight. */
  admits: boolean;
  /** Running requests stop producing; their pacing restarts when the pause ends. */
  freezes: boolean;
}

export interface SchedulerOptions {
  /** Tokens per second per request; Infinity (or ≤ 0) = everything at admission. */
  tokenRate: number;
  maxRunningRequests: number;
  dpSize: number;
}

export type PauseModes<Mode extends string> = Readonly<Record<Mode, PauseEffect>>;

/** Hooks an observer (the KV-event relay) listens on; the scheduler does not know what they feed. */
export interface SchedulerHooks {
  prefilled?(seq: Sequence, cacheHit: boolean): void;
  flushed?(): void;
}

const CACHE_LIMIT = 100_000;

export class Scheduler<Mode extends string> {
  paused: Mode | null = null;
  hooks: SchedulerHooks = {};
  /** Tokens produced since start (any output counts for a health probe). */
  outputs = 0;
  protected readonly held = new Set<Sequence>();
  protected readonly waiting: Sequence[] = [];
  protected readonly running = new Set<Sequence>();
  /** Every unfinished request by rid, held ones included. */
  protected readonly live = new Map<string, Sequence>();
  protected readonly prefixCache = new Set<number>();
  private gateLocks = 0;
  private ticker: NodeJS.Timeout | null = null;
  private readonly idleWaiters = new Waiters();
  private readonly gateWaiters = new Waiters();
  private readonly outputWaiters = new Waiters();
  private readonly tickMs: number;
  private readonly instant: boolean;
  private rr = 0;

  constructor(
    private readonly opts: SchedulerOptions,
    private readonly modes: PauseModes<Mode>,
  ) {
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

  /** Running/waiting per DP rank, and the tokens the running ones hold (held requests are in none). */
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

  /** The scheduler's part of `GET /_sim/state`. */
  view(): Record<string, unknown> {
    const c = this.counts();
    return {
      paused: this.paused,
      gateOpen: this.gateOpen,
      running: c.running,
      waiting: c.waiting,
      held: c.held,
      sequences: this.sequences(1000),
    };
  }

  /** The DP rank for a request: the one it asks for when there is such a rank, else round robin. */
  rankFor(asked: unknown): number {
    if (typeof asked === 'number' && Number.isInteger(asked) && asked >= 0 && asked < this.opts.dpSize) return asked;
    const r = this.rr;
    this.rr = (this.rr + 1) % this.opts.dpSize;
    return r;
  }

  /** Enters requests (every child of one call at once). Their listeners must be set. */
  submit(seqs: Sequence[]): void {
    for (const s of seqs) this.live.set(s.rid, s);
    if (!this.gateOpen) {
      for (const s of seqs) {
        s.state = 'held';
        this.held.add(s);
      }
      return;
    }
    for (const s of seqs) {
      s.state = 'waiting';
      this.waiting.push(s);
    }
    this.admit();
  }

  /** The client went away: drop silently (no finish, no update). */
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
      if (match(s.rid)) {
        this.end(s, finish);
        n++;
      }
    }
    return n;
  }

  resume(): void {
    const wasFrozen = this.frozen;
    this.paused = null;
    if (wasFrozen) this.rebase();
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
    return this.idleWaiters.next();
  }

  /** Resolves true when the gate opens within `timeoutMs`, false otherwise. */
  whenGateOpen(timeoutMs: number): Promise<boolean> {
    if (this.gateOpen) return Promise.resolve(true);
    return this.gateWaiters.within(timeoutMs);
  }

  /** Resolves true as soon as any request produces a token within `timeoutMs`, false otherwise. */
  whenOutput(timeoutMs: number): Promise<boolean> {
    return this.outputWaiters.within(timeoutMs);
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
    this.gateWaiters.wake();
    this.outputWaiters.wake();
  }

  /** Enters `mode`: the gate closes; a freezing mode stops the running set, a thawing one restarts it. */
  protected enterPause(mode: Mode): void {
    const wasFrozen = this.frozen;
    this.paused = mode;
    if (this.modes[mode].freezes) this.stopTicker();
    else if (wasFrozen) this.rebase();
  }

  /** Starts waiting requests while there is room, unless the pause forbids it. */
  protected admit(): void {
    if (this.paused !== null && !this.modes[this.paused].admits) return;
    const now = performance.now();
    while (this.waiting.length > 0 && this.running.size < this.opts.maxRunningRequests) {
      const s = this.waiting.shift()!;
      this.prefill(s);
      s.state = 'running';
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
      this.running.add(s);
      if (s.done) {
        this.end(s, s.finish!);
        continue;
      }
      if (this.instant) this.runToEnd(s);
    }
    if (this.running.size > 0) this.startTicker();
  }

  protected end(s: Sequence, finish: Finish): void {
    if (s.state === 'finished') return;
    this.remove(s);
    s.state = 'finished';
    s.finish = finish;
    this.live.delete(s.rid);
    s.onUpdate?.(s);
    this.settle();
  }

  private get frozen(): boolean {
    return this.paused !== null && this.modes[this.paused].freezes;
  }

  /** Pacing restarts from now: a frozen request does not catch up on the time it was frozen. */
  private rebase(): void {
    const now = performance.now();
    for (const s of this.running) {
      s.runStartedAt = now;
      s.runBase = s.outputIds.length;
    }
  }

  private openGateIfFree(): void {
    if (!this.gateOpen) return;
    if (this.held.size > 0) {
      for (const s of this.held) {
        s.state = 'waiting';
        this.waiting.push(s);
      }
      this.held.clear();
    }
    this.gateWaiters.wake();
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
    for (const s of [...this.running]) {
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
      if (produced) this.produced();
      if (finished) this.end(s, s.finish!);
      else if (produced) s.onUpdate?.(s);
    }
    this.admit();
    if (this.running.size > 0) this.startTicker();
  }

  private produced(): void {
    this.outputs++;
    this.outputWaiters.wake();
  }

  private remove(s: Sequence): void {
    if (s.state === 'running') this.running.delete(s);
    else if (s.state === 'held') this.held.delete(s);
    else if (s.state === 'waiting') {
      const i = this.waiting.indexOf(s);
      if (i >= 0) this.waiting.splice(i, 1);
    }
  }

  private settle(): void {
    if (this.idle) this.idleWaiters.wake();
  }
}
