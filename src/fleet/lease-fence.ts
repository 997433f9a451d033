// Whether this replica may command engines right now. Its ownership is a lease that other replicas
// judge by its heartbeat: a replica whose heartbeat has not changed for the lease time is dead to
// them, and its engines are taken over. The fence closes before that can happen: it is open only
// while the bus is connected, the newest heartbeat the bus confirmed was sent less than
// (lease − margin) ago, and, after a lapse, ownership has been read afresh. Every engine call and
// every resume owed checks it; calls in flight when the lease itself lapses are abandoned (a mere
// disconnect refuses new calls but lets running ones answer: the lease has not passed yet); every
// call names the replica and the lease epoch (the owners-bucket revision of the engine's lease)
// that made it.
// Pure bookkeeping on an injected clock: the heartbeat writes and the re-read live in ownership.ts.

export const REPLICA_HEADER = 'x-rlgate-replica';
export const LEASE_EPOCH_HEADER = 'x-rlgate-lease-epoch';

export type FenceState = 'open' | 'lapsed' | 'resyncing';

export class LeaseFence {
  /** Send time of the newest heartbeat write the bus confirmed (the others saw it no earlier). */
  private confirmedSentAt: number;
  private connected = true;
  /** After a lapse, the fence stays closed until ownership has been read again. */
  private stale = false;
  private lapseCount = 0;
  private readonly epochs = new Map<string, number>();
  /** headerPairs() per engine, dropped when its epoch is set again. */
  private readonly pairs = new Map<string, readonly string[]>();
  private readonly lapseListeners = new Set<(reason: string) => void>();
  private readonly resyncListeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  /** Whether the lease was within its deadline at the last look: its end is the lapse. */
  private wasWithin = false;

  constructor(
    private readonly opts: {
      replicaId: string;
      /** Another replica takes this one's engines after this long without a heartbeat change. */
      leaseMs: number;
      /** How long before the others may judge it dead the fence closes (default a fifth of the lease, at least 100 ms). */
      marginMs?: number;
      now?: () => number;
      /** Whether to run a timer that notices the lapse the moment it happens (off in unit tests). */
      timers?: boolean;
    },
  ) {
    // A replica starts with no confirmed heartbeat: it commands nothing until the first one lands.
    this.confirmedSentAt = -Infinity;
  }

  get replicaId(): string {
    return this.opts.replicaId;
  }

  /** Time before the others' judgement at which this replica stops commanding engines. */
  get marginMs(): number {
    return this.opts.marginMs ?? Math.max(100, Math.floor(this.opts.leaseMs / 5));
  }

  /** When the fence closes if no newer heartbeat is confirmed (ms on this replica's clock). */
  deadline(): number {
    return this.confirmedSentAt + this.opts.leaseMs - this.marginMs;
  }

  state(now = this.now()): FenceState {
    if (!this.connected || now >= this.deadline()) return 'lapsed';
    return this.stale ? 'resyncing' : 'open';
  }

  /** May this replica command engines now? */
  live(now = this.now()): boolean {
    return this.state(now) === 'open';
  }

  /** Why the fence is closed, for outcomes, `/health` and logs; null while it is open. */
  reason(now = this.now()): string | null {
    const state = this.state(now);
    if (state === 'open') return null;
    if (!this.connected) return 'this replica is not connected to NATS';
    if (state === 'resyncing') return 'this replica is reading engine ownership again after losing its lease';
    if (this.confirmedSentAt === -Infinity) return 'this replica has no confirmed heartbeat yet';
    const ago = ((now - this.confirmedSentAt) / 1000).toFixed(1);
    return `this replica's lease is not confirmed: its last heartbeat the bus confirmed was sent ${ago} s ago (lease ${this.opts.leaseMs / 1000} s)`;
  }

  /** A heartbeat sent at `sentAt` was confirmed by the bus. */
  beatConfirmed(sentAt: number): void {
    if (sentAt <= this.confirmedSentAt) return;
    // A lapse that happened before this beat counts (the engines may have moved meanwhile): the
    // fence then stays closed until ownership is read again (resynced()).
    this.changed();
    this.confirmedSentAt = sentAt;
    this.changed();
  }

  /** The bus connection went away or came back: no new call while it is away. */
  busStatus(connected: boolean): void {
    this.connected = connected;
  }

  /**
   * Ownership was read again after a lapse: the fence may open, unless the lease lapsed again
   * since the read began (`generation`: `lapses` when it began). Returns whether it counted.
   */
  resynced(generation = this.lapses): boolean {
    if (generation !== this.lapses) return false;
    const was = this.stale;
    this.stale = false;
    this.changed();
    if (was) for (const l of [...this.resyncListeners]) l();
    return true;
  }

  /** How many times the lease has lapsed (a re-read that began before the last one is stale). */
  get lapses(): number {
    return this.lapseCount;
  }

  /** Called when the fence opens again after a lapse, ownership read afresh. */
  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener);
    return () => this.resyncListeners.delete(listener);
  }

  /** True while the fence waits for ownership to be read again. */
  get needsResync(): boolean {
    return this.stale;
  }

  /** The lease epoch of an engine this replica owns (undefined: not owned). */
  setEpoch(id: string, epoch: number | undefined): void {
    if (epoch === undefined) this.epochs.delete(id);
    else this.epochs.set(id, epoch);
    this.pairs.delete(id);
  }

  epochOf(id: string): number | undefined {
    return this.epochs.get(id);
  }

  /** The headers every engine call carries, so the engine side can be audited. */
  headers(id: string): Record<string, string> {
    const [replica, replicaId, lease, epoch] = this.headerPairs(id);
    return { [replica!]: replicaId!, [lease!]: epoch! };
  }

  /**
   * The same headers as name/value pairs, made once per lease epoch rather than per call: every leg
   * of a fan-out or refit carries them.
   */
  headerPairs(id: string): readonly string[] {
    let p = this.pairs.get(id);
    if (!p) {
      const epoch = this.epochs.get(id);
      p = [REPLICA_HEADER, this.opts.replicaId, LEASE_EPOCH_HEADER, epoch === undefined ? '0' : String(epoch)];
      this.pairs.set(id, p);
    }
    return p;
  }

  /** Called with the reason when the lease lapses (calls in flight are abandoned then). */
  onLapse(listener: (reason: string) => void): () => void {
    this.lapseListeners.add(listener);
    return () => this.lapseListeners.delete(listener);
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.opts.timers = false;
    this.lapseListeners.clear();
    this.resyncListeners.clear();
  }

  /** Re-checks the state now; unit tests on a stepped clock call it after a step. */
  check(): void {
    this.changed();
  }

  private changed(): void {
    const within = this.now() < this.deadline();
    if (this.wasWithin && !within) {
      // The lease may move from now on: it stays closed until ownership is read again.
      this.stale = true;
      this.lapseCount++;
      const reason = this.reason() ?? 'lease lapsed';
      for (const l of [...this.lapseListeners]) l(reason);
    }
    this.wasWithin = within;
    this.arm();
  }

  /** One timer, at the deadline, so a lapse is acted on when it happens, not at the next call. */
  private arm(): void {
    if (this.opts.timers === false) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.wasWithin) return;
    const wait = this.deadline() - this.now();
    this.timer = setTimeout(() => this.changed(), Math.max(0, wait) + 1);
    this.timer.unref();
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }
}
