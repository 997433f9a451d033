// Which replica runs an engine's actor: the `owners` bucket's value, keyed by worker id. Claimed
// with a create and moved with a compare-and-set on the key's revision, so one claimant wins;
// the lease lives as long as its replica's heartbeat (heartbeat.ts). Shapes only:
// src/fleet/ownership.ts claims, moves and reads them.

export interface OwnerLease {
  replica: string;
  since: string;
}
