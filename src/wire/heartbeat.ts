// A replica's sign of life: the `replicas` bucket's value, keyed by replica id, rewritten every
// beat. A replica whose heartbeat has not changed for a lease, by the observer's own clock, is
// dead; one that shuts down cleanly deletes it. Shapes only: src/fleet/ownership.ts writes and
// judges them.

export interface Heartbeat {
  replica: string;
  time: string;
  /** The replica's HTTP address, for operators. */
  url?: string;
}
