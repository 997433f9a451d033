// Which replica runs each engine's actor. Ownership is a lease in the shared `owners` bucket,
// taken and moved by compare-and-set on the key's revision, so exactly one claimant wins. NATS 2.9
// has no per-key TTL, so a lease is not refreshed key by key: each replica refreshes one heartbeat
// in the `replicas` bucket, and an owner whose heartbeat has not changed for the lease time (by
// this replica's own clock, so clocks need not agree) is dead: its engines are taken over.
// A replica that shuts down cleanly deletes its heartbeat, so its engines move at once.

import type { JsonBucket } from '../bus/buckets.ts';
import type { Logger } from '../obs/logger.ts';
import type { Registry } from './registry.ts';
import type { LeaseFence } from './lease-fence.ts';
import type { Heartbeat } from '../wire/heartbeat.ts';
import type { OwnerLease } from '../wire/owner-lease.ts';

export class Ownership {
  /** Owner lease per worker id, with the revision a takeover must name. */
  private readonly leases = new Map<string, { replica: string; revision: number }>();
  private sweeps = 0;
  /** Leases held, per owner replica. */
  private readonly leaseCount = new Map<string, number>();
  /** When (this replica's clock) each replica's heartbeat last changed. */
  private readonly seen = new Map<string, number>();
  /** The heartbeat revision each replica was last seen at (a stalled watch is checked against a read). */
  private readonly seenRevision = new Map<string, number>();
  /** When each worker without a lease was first met: others get a moment to claim what they registered. */
  private readonly unleased = new Map<string, number>();
  private readonly stops: Array<() => void> = [];
  private timers: NodeJS.Timeout[] = [];
  private closed = false;
  private url: string | undefined;
  /** When this replica's own bus connection last came back: silence before it proves nothing. */
  private reconnectedAt = 0;
  private connected = true;
  /** When this replica's own heartbeat was last written. */
  private beatOkAt = 0;
  /** A re-read of every lease in progress (after the fence lapsed). */
  private resyncing: Promise<void> | undefined;

  constructor(
    private readonly deps: {
      replicaId: string;
      registry: Registry;
      owners: JsonBucket<OwnerLease>;
      replicas: JsonBucket<Heartbeat>;
      /** A replica silent this long is dead (default 5 s). */
      leaseMs: number;
      /** Closes before this replica's own lease can lapse in others' eyes; fed by the heartbeats here. */
      fence: LeaseFence;
      log: Logger;
    },
  ) {
    deps.registry.on('added', (w) => this.placed(w.id));
    deps.registry.on('removed', (w) => this.released(w.id));
  }

  /** Replicas whose heartbeat is fresh, this one included. */
  alive(replica: string): boolean {
    if (replica === this.deps.replicaId) return !this.closed;
    const t = this.seen.get(replica);
    // While our own connection was down we heard no one: everyone gets a whole lease after it.
    return t !== undefined && Date.now() - Math.max(t, this.reconnectedAt) < this.deps.leaseMs;
  }

  /**
   * Waits (at most `timeoutMs`) until every one of `ids` has an owner that is alive and is not
   * `dead`, or none: a replica taking over a refit lets the dead runner's engines find new owners
   * before it calls them.
   */
  async settled(ids: readonly string[], dead: string, timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    const done = () =>
      ids.every((id) => {
        const o = this.deps.registry.get(id)?.owner;
        return !o || (o !== dead && this.alive(o));
      });
    while (!done() && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  }

  /**
   * `alive`, but a replica that looks dead is read once more from the bucket first: a watch that
   * stalled must not make a live replica's work (its engines, its refit) look orphaned.
   */
  async aliveNow(replica: string): Promise<boolean> {
    if (this.alive(replica)) return true;
    // Our own heartbeat is not being written: theirs may not be either, and that proves nothing.
    if (Date.now() - this.beatOkAt > this.beatGapMs()) return true;
    try {
      const hb = await this.deps.replicas.get(replica);
      if (hb && hb.revision > (this.seenRevision.get(replica) ?? 0)) {
        this.seen.set(replica, Date.now());
        this.seenRevision.set(replica, hb.revision);
        return true;
      }
      return false;
    } catch {
      return true; // cannot tell: take nothing from it now
    }
  }

  ownerOf(id: string): string | undefined {
    return this.leases.get(id)?.replica;
  }

  /** The bus connection of this replica went away or came back (it judges no one meanwhile). */
  busStatus(connected: boolean): void {
    this.connected = connected;
    this.deps.fence.busStatus(connected);
    if (connected) {
      this.reconnectedAt = Date.now();
      // Prove the lease again at once rather than at the next period.
      void this.beat();
    }
  }

  /** The replica's HTTP address, shown in its heartbeat for operators. */
  setUrl(url: string): void {
    this.url = url;
    void this.beat();
  }

  async start(url?: string): Promise<void> {
    this.url = url;
    await this.beat();
    const { replicas, owners } = this.deps;
    const first = Date.now();
    this.stops.push(
      await replicas.watch((replica, hb, revision) => {
        if (hb === null) {
          this.seen.delete(replica);
          this.seenRevision.delete(replica);
          return;
        }
        // A replica first met at start-up gets a whole lease from now before it counts as dead.
        this.seen.set(replica, Math.max(Date.now(), first));
        this.seenRevision.set(replica, revision);
      }),
    );
    this.stops.push(await owners.watch((id, lease, revision) => this.leaseChanged(id, lease, revision)));
    const period = this.period();
    this.timers.push(setInterval(() => void this.beat(), period).unref());
    this.timers.push(setInterval(() => void this.sweep(), period).unref());
    await this.sweep();
  }

  /** Stops refreshing and deletes the heartbeat, so other replicas take the engines at once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    for (const stop of this.stops.splice(0)) stop();
    await this.deps.replicas.delete(this.deps.replicaId).catch(() => {});
  }

  private async beat(): Promise<void> {
    if (this.closed) return;
    const sentAt = Date.now();
    try {
      await this.deps.replicas.put(this.deps.replicaId, { replica: this.deps.replicaId, time: new Date().toISOString(), url: this.url });
      // Our own heartbeat could not be written for a while (the stream had no leader, with the
      // connection up): no one else's could either, so their silence meanwhile proves nothing,
      // and everyone gets a whole lease from now, as after a reconnect. Without this, two live
      // replicas take each other's engines when a NATS node dies, back and forth.
      const now = Date.now();
      if (now - this.beatOkAt > this.beatGapMs()) this.reconnectedAt = Math.max(this.reconnectedAt, now);
      this.beatOkAt = now;
      this.deps.fence.beatConfirmed(sentAt);
      if (this.deps.fence.needsResync && this.connected) void this.resync();
    } catch (err) {
      this.deps.log.debug({ err }, "could not refresh this replica's heartbeat");
    }
  }

  /**
   * Longer than this without a written heartbeat, and this replica judges no one. Half a lease:
   * a shorter gap leaves everyone's heartbeat well inside the lease, so no one looks dead for it.
   */
  private beatGapMs(): number {
    return this.deps.leaseMs / 2;
  }

  private period(): number {
    return Math.max(50, Math.floor(this.deps.leaseMs / 5));
  }

  /**
   * After a lapse the leases this replica believes in may have moved while it heard nothing: every
   * lease is read again from the bucket before the fence opens, so it never acts on a stale view.
   */
  private resync(): Promise<void> {
    this.resyncing ??= (async () => {
      try {
        // What the watch held when the read began: a lease it delivers meanwhile is newer than
        // the read and stays (this replica's own claim of a worker registered meanwhile, say).
        const before = new Map([...this.leases].map(([id, l]) => [id, l.revision]));
        const generation = this.deps.fence.lapses;
        const fresh = new Map<string, { lease: OwnerLease; revision: number }>();
        const ids = await this.deps.owners.keys();
        // A few dozen reads at a time: the fence stays closed until they are all in.
        for (let i = 0; i < ids.length; i += 64) {
          await Promise.all(
            ids.slice(i, i + 64).map(async (id) => {
              const e = await this.deps.owners.get(id);
              if (e) fresh.set(id, { lease: e.value, revision: e.revision });
            }),
          );
        }
        for (const [id, revision] of before) {
          if (!fresh.has(id) && this.leases.get(id)?.revision === revision) this.leaseChanged(id, null, 0);
        }
        for (const [id, { lease, revision }] of fresh) {
          const known = this.leases.get(id);
          if (!known || known.revision < revision) this.leaseChanged(id, lease, revision);
        }
        // A lapse during the read makes it stale in turn: the next heartbeat reads again.
        if (!this.deps.fence.resynced(generation)) return;
        this.deps.log.info({ leases: fresh.size }, 'engine ownership read again after this replica lost its lease; commanding engines again');
      } catch (err) {
        this.deps.log.warn({ err }, 'could not read engine ownership again; the next heartbeat retries');
      } finally {
        this.resyncing = undefined;
      }
    })();
    return this.resyncing;
  }

  private leaseChanged(id: string, lease: OwnerLease | null, revision: number): void {
    if (lease === null) {
      this.setLease(id, undefined);
      this.deps.fence.setEpoch(id, undefined);
      return;
    }
    // A revision older than the one known (a watch delivering late after a re-read) changes nothing.
    const known = this.leases.get(id);
    if (known && known.revision > revision) return;
    this.setLease(id, { replica: lease.replica, revision });
    this.deps.fence.setEpoch(id, lease.replica === this.deps.replicaId ? revision : undefined);
    this.unleased.delete(id);
    this.deps.registry.setOwner(id, lease.replica);
  }

  /** A worker appeared in the registry: it takes its lease's owner, or is claimed. */
  private placed(id: string): void {
    const lease = this.leases.get(id);
    if (lease) return this.deps.registry.setOwner(id, lease.replica);
    // Registered here: claimed at once. Registered elsewhere: its registrar's claim is on its way.
    if (this.deps.registry.get(id)?.owner === this.deps.replicaId) void this.claim(id);
    else this.unleased.set(id, Date.now());
  }

  private released(id: string): void {
    this.unleased.delete(id);
    if (this.leases.get(id)?.replica !== this.deps.replicaId) return;
    this.setLease(id, undefined);
    this.deps.fence.setEpoch(id, undefined);
    this.deps.owners.delete(id).catch(() => {});
  }

  /** Sets or clears a lease, keeping the count of leases per owner. */
  private setLease(id: string, lease: { replica: string; revision: number } | undefined): void {
    const prev = this.leases.get(id);
    if (prev) {
      const n = (this.leaseCount.get(prev.replica) ?? 1) - 1;
      if (n > 0) this.leaseCount.set(prev.replica, n);
      else this.leaseCount.delete(prev.replica);
    }
    if (lease) {
      this.leases.set(id, lease);
      this.leaseCount.set(lease.replica, (this.leaseCount.get(lease.replica) ?? 0) + 1);
    } else this.leases.delete(id);
  }

  /** First claim on a worker without a lease: the create fails for everyone but one replica. */
  private async claim(id: string): Promise<void> {
    if (this.closed) return;
    try {
      await this.deps.owners.create(id, { replica: this.deps.replicaId, since: new Date().toISOString() });
    } catch {
      // Someone else holds it (its lease reaches us through the watch), or the bus is down
      // (the next sweep tries again).
    }
  }

  /** Moves the lease of a dead owner's engine to this replica, if no one beat us to it. */
  private async takeOver(id: string, from: string, revision: number): Promise<void> {
    try {
      await this.deps.owners.update(id, { replica: this.deps.replicaId, since: new Date().toISOString() }, revision);
      this.deps.log.warn({ worker_id: id, from }, 'took over an engine whose owner stopped answering');
    } catch {
      // Another replica took it first, or the dead one came back: the watch tells us which.
    }
  }

  private async sweep(): Promise<void> {
    // Not while our own bus or heartbeat writes fail: we might be the one cut off.
    if (this.closed || !this.connected || !this.deps.fence.live() || Date.now() - this.beatOkAt > this.beatGapMs()) return;
    // A heartbeat that looks stale is read once more before anything is taken (aliveNow): a
    // watch that stalled (its server died) must not make a live replica look dead.
    const dead = new Set<string>();
    // The owners are counted as leases change (not collected per sweep), and copied: the lease
    // watch may change them during the awaited reads.
    for (const replica of [...this.leaseCount.keys()]) {
      if (!(await this.aliveNow(replica))) dead.add(replica);
    }
    // In the steady state every engine has a lease and every owner lives: the walk over the fleet
    // (a fifth of the idle CPU at 10,000 engines, every lease/5) runs only every tenth sweep then,
    // to retry a claim that failed.
    this.sweeps++;
    if (dead.size === 0 && this.deps.registry.size === this.leases.size && this.sweeps % 10 !== 0) return;
    const work: Array<Promise<void>> = [];
    for (const w of this.deps.registry.all()) {
      const lease = this.leases.get(w.id);
      if (!lease) {
        const since = this.unleased.get(w.id);
        if (since === undefined || Date.now() - since > this.deps.leaseMs / 5) work.push(this.claim(w.id));
      } else if (dead.has(lease.replica)) work.push(this.takeOver(w.id, lease.replica, lease.revision));
    }
    await Promise.all(work);
  }
}
