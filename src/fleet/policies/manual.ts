// SMG's `manual`: sticky sessions by `X-SMG-Routing-Key`, kept in a map from each key to up to two
// engines. A key goes to the first of its engines that is a candidate, the older first, so a key
// whose engine comes back returns to it; only when none is does it get a new engine, which joins
// the key's two (the oldest leaves). Adding engines moves no key, unlike a hash. A key idle for
// `max_idle_secs` is forgotten, checked every `eviction_interval_secs`. New keys, and requests
// without a key (which never enter the map), go by the assignment mode: random, min_load (fewest
// requests in flight) or min_group (fewest routing keys with requests in flight), ties at random.
// The same map, with the same settings, serves `--routing-key-override` (routing-key-override.ts).

import type { Candidate, Clock, Decision, PolicyRequest, RandomSource, Reason, RoutingInputs, RoutingPolicy } from './policy.ts';
import { randomOf } from './random.ts';

/** SMG's assignment modes for a new key. */
export const ASSIGNMENT_MODES = ['random', 'min_load', 'min_group'] as const;
export type AssignmentMode = (typeof ASSIGNMENT_MODES)[number];

export interface ManualSettings {
  evictionIntervalSecs: number;
  maxIdleSecs: number;
  assignmentMode: AssignmentMode;
}

/** SMG keeps two engines per key, for a fast failover. */
const ENGINES_PER_KEY = 2;

interface Entry {
  /** Worker ids, oldest first. */
  workers: string[];
  lastAccess: number;
}

export class ManualPolicy implements RoutingPolicy {
  readonly name: string = 'manual';
  readonly needsPrompt = false;
  /** Key → its engines; in order of last access, so the idle ones are first. */
  private readonly keys = new Map<string, Entry>();
  /** Worker id → routing key → requests in flight with that key (min_group counts the keys). */
  private readonly activeKeys = new Map<string, Map<string, number>>();
  private nextSweep: number;

  constructor(
    private readonly settings: ManualSettings,
    private readonly deps: { clock: Clock; random: RandomSource },
  ) {
    this.nextSweep = deps.clock() + settings.evictionIntervalSecs * 1000;
  }

  /** Keys in the map. */
  get size(): number {
    return this.keys.size;
  }

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const now = this.deps.clock();
    this.sweep(now);
    const key = req.routingKey;
    if (key === undefined) return this.assign(req);
    const entry = this.keys.get(key);
    if (entry) {
      this.keys.delete(key);
      this.keys.set(key, entry);
      entry.lastAccess = now;
      for (const id of entry.workers) {
        const worker = req.candidates.find((c) => c.id === id);
        if (worker) return { worker, reason: 'routing_key' };
      }
      const { worker } = this.assign(req);
      if (entry.workers.length >= ENGINES_PER_KEY) entry.workers.splice(0, entry.workers.length - ENGINES_PER_KEY + 1);
      entry.workers.push(worker.id);
      return { worker, reason: 'new_key' };
    }
    const { worker } = this.assign(req);
    this.keys.set(key, { workers: [worker.id], lastAccess: now });
    return { worker, reason: 'new_key' };
  }

  routed(workerId: string, inputs: RoutingInputs): void {
    if (inputs.routingKey === undefined) return;
    let keys = this.activeKeys.get(workerId);
    if (!keys) this.activeKeys.set(workerId, (keys = new Map()));
    keys.set(inputs.routingKey, (keys.get(inputs.routingKey) ?? 0) + 1);
  }

  finished(workerId: string, inputs: RoutingInputs): void {
    const key = inputs.routingKey;
    const keys = key === undefined ? undefined : this.activeKeys.get(workerId);
    if (!keys || key === undefined) return;
    const left = (keys.get(key) ?? 0) - 1;
    if (left > 0) keys.set(key, left);
    else keys.delete(key);
    if (keys.size === 0) this.activeKeys.delete(workerId);
  }

  /** A removed engine keeps its place in the keys' lists (it may come back, as in SMG); only its counts go. */
  workerRemoved(workerId: string): void {
    this.activeKeys.delete(workerId);
  }

  private assign<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates } = req;
    const mode = this.settings.assignmentMode;
    if (mode === 'random') return { worker: randomOf(candidates, this.deps.random), reason: 'random' };
    const measure = mode === 'min_load' ? (c: W) => req.inFlight(c.id) : (c: W) => this.activeKeys.get(c.id)?.size ?? 0;
    let least: W[] = [];
    let min = Number.POSITIVE_INFINITY;
    for (const c of candidates) {
      const m = measure(c);
      if (m < min) {
        min = m;
        least = [c];
      } else if (m === min) least.push(c);
    }
    const reason: Reason = mode === 'min_load' ? 'min_load' : 'min_group';
    return { worker: least.length === 1 ? least[0]! : randomOf(least, this.deps.random), reason };
  }

  /** Forgets the keys idle for `max_idle_secs`, once per eviction interval (either 0: never, as in SMG). */
  private sweep(now: number): void {
    const { evictionIntervalSecs, maxIdleSecs } = this.settings;
    if (evictionIntervalSecs <= 0 || maxIdleSecs <= 0 || now < this.nextSweep) return;
    this.nextSweep = now + evictionIntervalSecs * 1000;
    const maxIdle = maxIdleSecs * 1000;
    for (const [key, entry] of this.keys) {
      if (now - entry.lastAccess < maxIdle) break;
      this.keys.delete(key);
    }
  }
}
