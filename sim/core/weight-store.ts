// The weight store both engine simulators keep: what the engine has loaded (per-tensor checksums,
// so a refit can be verified against the trainer's), its broadcast groups, the load counters and
// the one queue every weight operation runs through. Each simulator subclasses it for its own
// group entry; it never parses HTTP or gRPC and never decides whether a load succeeds.

import type { GroupMember } from '../broadcast/types.ts';

export interface LoadedTensorRecord {
  name: string;
  dtype: string;
  shape: number[];
  bytes: number;
  /** Hex sha256 as received over the group; null when no bytes moved (metadata-only mode). */
  checksum: string | null;
  /** Base64 of its first bytes as received (null in metadata-only mode): read back by `/get_weights_by_name`. */
  head: string | null;
  group: string;
  /** weight_version of the call that loaded it (null when the call carried none). */
  weightVersion: string | null;
  at: string;
}

export interface LastLoad<Source extends string = string> {
  source: Source;
  at: string;
  weightVersion: string | null;
  claimedWithoutApplying: boolean;
  detail: Record<string, unknown>;
}

/** What every simulator records of a broadcast group (each adds its own join bookkeeping). */
export interface StoredGroup {
  name: string;
  masterAddress: string;
  masterPort: number;
  rankOffset: number;
  worldSize: number;
  backend: string;
  ranks: number[];
  /** null: metadata-only (no transport), or no join (yet). */
  member: GroupMember | null;
  chunks: number;
}

export class WeightStore<Group extends StoredGroup, Source extends string = string> {
  readonly tensors = new Map<string, LoadedTensorRecord>();
  readonly groups = new Map<string, Group>();
  lastLoad: LastLoad<Source> | null = null;
  loads = 0;
  failedLoads = 0;
  /** Loads answered as successful by a `claimSuccessWithoutApplying` fault. */
  claimedLoads = 0;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(public modelPath: string) {}

  /** Weight operations run one at a time, as the scheduler processes them. */
  serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  snapshot(): Record<string, unknown> {
    return {
      modelPath: this.modelPath,
      loads: this.loads,
      failedLoads: this.failedLoads,
      claimedLoads: this.claimedLoads,
      lastLoad: this.lastLoad,
      tensors: [...this.tensors.values()],
      groups: [...this.groups.values()].map((g) => this.groupView(g)),
    };
  }

  close(): void {
    for (const g of this.groups.values()) g.member?.close();
    this.groups.clear();
  }

  /** A group as `/_sim/weights` shows it: no live handles, the transport named instead. */
  protected groupView({ member, ...g }: StoredGroup): Record<string, unknown> {
    return { ...g, transport: member ? 'tcp' : 'metadata' };
  }
}
