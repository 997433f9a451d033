// Level, not edge: the owner of an engine compares what should hold with what the engine reports.
// An engine should serve unless a running refit or an operator holds it; one observed paused with
// neither is resumed by its current owner, whoever paused it and whenever the pause landed. A
// pause sent by a replica that was cut off, died or gave up waiting can land long after everyone
// else moved on, and no ledger knows of it. So the engines such a pause may still reach are
// watched for a while: after this replica takes an engine over, after a refit is taken over or
// ends with pauses in doubt, and after this replica's own lease lapsed (its own calls were
// abandoned). Resumes go through the engine's lane like any call, under the lease fence; the
// resumes-owed ledger stays the fast path, this is the guard that needs no memory.

import { lifecycleOf } from '../../actors/engine.ts';
import { continueGenerationCall } from '../engines/control-call.ts';
import type { Logger } from '../obs/logger.ts';
import type { EngineHost } from './engine-host.ts';
import type { LeaseFence } from './lease-fence.ts';
import type { Registry } from './registry.ts';

/** How long an engine must stay paused with nothing holding it before it is resumed. */
const SUSPECT_MS = 1_000;
/** At most this many engines are read at once per look. */
const READS_AT_ONCE = 32;

export interface PauseHolds {
  /** A running refit (its journal says so, whoever runs it) holds the engine: its pause is meant. */
  refit(id: string): boolean;
  /** An operator paused it: it stays paused until someone resumes it. */
  operator(id: string): boolean;
}

export class PauseReconciler {
  /** Watched engines and until when (ms, this replica's clock). */
  private readonly watched = new Map<string, { until: number; why: string }>();
  private readonly busy = new Set<string>();
  /** Engines found paused with nothing holding them, and when first: resumed if still so a while later. */
  private readonly suspect = new Map<string, number>();
  private looking = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly stops: Array<() => void> = [];
  /** Engines resumed here because nothing held their pause (for metrics and tests). */
  resumed = 0;

  constructor(
    private readonly deps: {
      registry: Registry;
      host: EngineHost;
      fence: LeaseFence;
      holds: PauseHolds;
      /** How often watched engines are read. */
      intervalMs: number;
      /** How long an engine is watched after the event that put it at risk. */
      windowMs: number;
      /** Deadline of one resume call. */
      timeoutSecs: number;
      log: Logger;
    },
  ) {
    // An engine taken over from another replica: that replica's pauses may still be on their way.
    const onOwner = (w: { id: string; owner: string }, prev: string) => {
      if (w.owner === deps.fence.replicaId && prev && prev !== w.owner) this.watch([w.id], `taken over from ${prev}`);
    };
    deps.registry.on('owner', onOwner);
    this.stops.push(() => deps.registry.off('owner', onOwner));
    // This replica's own calls were abandoned when its lease lapsed: they may land late too.
    this.stops.push(
      deps.fence.onResync(() =>
        this.watch(
          deps.registry
            .all()
            .filter((w) => deps.host.owns(w.id))
            .map((w) => w.id),
          'this replica lost its lease',
        ),
      ),
    );
  }

  start(): void {
    // Engines taken over before this started (at start-up) are watched too: it cannot tell which.
    this.watch(
      this.deps.registry
        .all()
        .filter((w) => this.deps.host.owns(w.id))
        .map((w) => w.id),
      'owned when this replica started',
    );
    this.timer = setInterval(() => void this.look(), this.deps.intervalMs);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    for (const stop of this.stops.splice(0)) stop();
    this.watched.clear();
  }

  /** Watches these engines for a pause nothing holds, for the window from now. */
  watch(ids: Iterable<string>, why: string): void {
    const until = Date.now() + this.deps.windowMs;
    for (const id of ids) {
      const cur = this.watched.get(id);
      if (!cur || cur.until < until) this.watched.set(id, { until, why });
    }
  }

  isWatched(id: string): boolean {
    return this.watched.has(id);
  }

  /** One look at every watched engine this replica owns. */
  async look(): Promise<void> {
    // One look at a time: overlapping looks would shrink the wait between two sightings.
    if (this.looking) return;
    this.looking = true;
    try {
      await this.lookOnce();
    } finally {
      this.looking = false;
    }
  }

  private async lookOnce(): Promise<void> {
    const now = Date.now();
    const due: Array<[string, string]> = [];
    for (const [id, { until, why }] of this.watched) {
      if (until < now || !this.deps.registry.get(id)) {
        this.watched.delete(id);
        this.suspect.delete(id);
        continue;
      }
      if (this.busy.has(id) || !this.deps.host.owns(id)) continue;
      due.push([id, why]);
    }
    if (due.length === 0 || !this.deps.fence.live()) return;
    for (let i = 0; i < due.length; i += READS_AT_ONCE) {
      await Promise.all(due.slice(i, i + READS_AT_ONCE).map(([id, why]) => this.reconcile(id, why)));
    }
  }

  /**
   * Whether anything holds the engine's pause: DP ranks share one engine (one pause, one resume),
   * so a hold on any rank, or a call on any rank's lane here, holds them all.
   */
  private held(id: string): boolean {
    const { registry, host, holds } = this.deps;
    const w = registry.get(id);
    const ranks = w ? registry.siblings(w.baseUrl) : [];
    for (const r of ranks.length > 0 ? ranks : [{ id }]) {
      if (holds.refit(r.id) || holds.operator(r.id)) return true;
      if (host.owns(r.id) && !host.idle(r.id)) return true;
    }
    return false;
  }

  private async reconcile(id: string, why: string): Promise<void> {
    const { host } = this.deps;
    if (this.held(id)) return void this.suspect.delete(id);
    const snap = host.snapshot(id);
    // Only a resting engine is read: a call running or queued on it (a pause, a load) is someone's.
    if (!snap || snap.context.current !== undefined) return;
    const lifecycle = lifecycleOf(snap);
    if (lifecycle !== 'serving' && lifecycle !== 'paused') return;
    this.busy.add(id);
    try {
      const client = host.client(id);
      if (!client?.pauseState) return; // the wire cannot tell
      let paused: boolean | undefined;
      try {
        paused = await client.pauseState(AbortSignal.timeout(Math.max(1_000, this.deps.intervalMs)));
      } catch {
        return; // unreachable: its probes deal with that
      }
      if (paused !== true) return void this.suspect.delete(id);
      // Seen paused with nothing holding it at two looks at least a second apart: a refit that
      // has just paused the engine through another replica may not be in this replica's copy of
      // the journals yet.
      const since = this.suspect.get(id);
      if (since === undefined) return void this.suspect.set(id, Date.now());
      if (Date.now() - since < SUSPECT_MS) return;
      this.suspect.delete(id);
      // Read again after the await: a refit may have started, or an operator paused it, meanwhile.
      // The resume joins the lane at once after this check, so no pause queued on the lane can
      // come before it and be undone by it.
      if (this.held(id) || !host.owns(id) || !this.deps.fence.live()) return;
      const call = continueGenerationCall(`rlgate-reconcile-${id}`, this.deps.timeoutSecs);
      const outcome = await host.run(id, call).catch(() => undefined);
      if (outcome?.kind === 'answer' && outcome.status >= 200 && outcome.status < 300) {
        this.resumed++;
        this.deps.log.warn(
          { worker_id: id, url: this.deps.registry.get(id)?.url, watched_because: why },
          'resumed an engine found paused that no running refit and no operator holds (a late pause)',
        );
      }
    } finally {
      this.busy.delete(id);
    }
  }
}
