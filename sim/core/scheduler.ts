// The simulated scheduler every engine runs: the admission gate (a pause, a weight-update drain,
// released memory), requests held at the front while it is shut, aborts, DP ranks, the waits on
// all of it (idle, gate open, any output), and the pacer its admitted requests go to: the fixed
// cost model (fixed-pacer.ts, every request at `tokenRate`) or the realistic one (batch-pacer.ts,
// batched steps over a KV pool and a radix prefix cache). What each pause mode means is the
// engine's: its mode table says whether a mode drains or freezes, its own pause steps abort or
// retract. It never touches a wire and never knows weight versions.

import { BatchPacer } from './batch-pacer.ts';
import { COST_MODEL_DEFAULTS, type CostModel } from './cost-model.ts';
import { FixedPacer } from './fixed-pacer.ts';
import type { KvFacts, KvHooks, Pacer, PacerHost, RankLoad } from './pacer.ts';
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
  /** Tokens per second per request (fixed cost model); Infinity (or ≤ 0) = everything at admission. */
  tokenRate: number;
  maxRunningRequests: number;
  dpSize: number;
  /** Default: the fixed model. */
  cost?: CostModel;
}

export type PauseModes<Mode extends string> = Readonly<Record<Mode, PauseEffect>>;

/** Hooks an observer (the KV-event relay) listens on; the scheduler does not know what they feed. */
export type SchedulerHooks = KvHooks;

export class Scheduler<Mode extends string> {
  paused: Mode | null = null;
  hooks: SchedulerHooks = {};
  /** Tokens produced since start (any output counts for a health probe). */
  outputs = 0;
  protected readonly held = new Set<Sequence>();
  /** Every unfinished request by rid, held ones included. */
  protected readonly live = new Map<string, Sequence>();
  /** The waiting queue and the running set, and how they produce. */
  protected readonly pacer: Pacer;
  private gateLocks = 0;
  private readonly idleWaiters = new Waiters();
  private readonly gateWaiters = new Waiters();
  private readonly outputWaiters = new Waiters();
  private rr = 0;

  constructor(
    private readonly opts: SchedulerOptions,
    private readonly modes: PauseModes<Mode>,
  ) {
    const cost = opts.cost ?? COST_MODEL_DEFAULTS;
    const host: PacerHost = {
      admits: () => this.paused === null || this.modes[this.paused].admits,
      produced: () => this.produced(),
      progressed: (s) => s.onUpdate?.(s),
      finished: (s, finish) => this.end(s, finish),
      // Read at each call: an engine sets its hooks after the scheduler is built.
      hooks: () => this.hooks,
    };
    this.pacer =
      cost.kind === 'realistic'
        ? new BatchPacer(cost, opts.maxRunningRequests, opts.dpSize, host)
        : new FixedPacer({ tokenRate: opts.tokenRate, maxRunningRequests: opts.maxRunningRequests, dpSize: opts.dpSize }, host);
  }

  get gateOpen(): boolean {
    return this.paused === null && this.gateLocks === 0;
  }

  /** Nothing waiting or running (held requests are not in the scheduler yet). */
  get idle(): boolean {
    return this.pacer.waitingCount === 0 && this.pacer.runningCount === 0;
  }

  isLive(rid: string): boolean {
    return this.live.has(rid);
  }

  liveRids(): string[] {
    return [...this.live.keys()];
  }

  counts(): { held: number; waiting: number; running: number; live: number } {
    return { held: this.held.size, waiting: this.pacer.waitingCount, running: this.pacer.runningCount, live: this.live.size };
  }

  /** Running/waiting per DP rank, and the KV tokens the running ones hold (held requests are in none). */
  countsByRank(): RankLoad[] {
    return this.pacer.byRank();
  }

  /** Per DP rank, the KV pool and cache as loads report them; null under the fixed model (no pool). */
  kvByRank(): KvFacts[] | null {
    return this.pacer.kv();
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
      ...this.pacer.view(),
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
    this.pacer.enqueue(seqs);
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
    if (wasFrozen) this.pacer.thaw();
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
    this.pacer.flush();
    this.hooks.flushed?.();
    return true;
  }

  close(): void {
    this.pacer.close();
    this.gateWaiters.wake();
    this.outputWaiters.wake();
  }

  /** Enters `mode`: the gate closes; a freezing mode stops the running set, a thawing one restarts it. */
  protected enterPause(mode: Mode): void {
    const wasFrozen = this.frozen;
    this.paused = mode;
    if (this.modes[mode].freezes) this.pacer.freeze();
    else if (wasFrozen) this.pacer.thaw();
  }

  /** Starts waiting requests while there is room, unless the pause forbids it. */
  protected admit(): void {
    if (this.paused !== null && !this.modes[this.paused].admits) return;
    this.pacer.admit();
  }

  /**
   * Every running request back to the front of the waiting queue: its KV is dropped, the tokens
   * it produced are kept and recomputed when it runs again. Returns them.
   */
  protected retractRunning(): Sequence[] {
    const back = this.pacer.retractRunning();
    this.pacer.enqueue(back, true);
    return back;
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

  private openGateIfFree(): void {
    if (!this.gateOpen) return;
    if (this.held.size > 0) {
      this.pacer.enqueue([...this.held]);
      this.held.clear();
    }
    this.gateWaiters.wake();
  }

  private produced(): void {
    this.outputs++;
    this.outputWaiters.wake();
  }

  private remove(s: Sequence): void {
    if (s.state === 'held') this.held.delete(s);
    else if (s.state === 'waiting' || s.state === 'running') this.pacer.remove(s);
  }

  private settle(): void {
    if (this.idle) this.idleWaiters.wake();
  }
}
