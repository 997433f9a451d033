// The weight store: what the engine has loaded (per-tensor checksums, so a refit can be verified
// against the trainer's), its broadcast groups, load counters, and the one queue every weight
// operation runs through (the scheduler handles them one at a time). It never parses HTTP.

import type { GroupMember } from '../broadcast/types.ts';

export interface LoadedTensorRecord {
  name: string;
  dtype: string;
  shape: number[];
  bytes: number;
  /** Hex sha256 as received over the group; null when no bytes moved (metadata-only mode). */
  checksum: string | null;
  group: string;
  /** weight_version of the call that loaded it (null when the call carried none). */
  weightVersion: string | null;
  at: string;
}

export interface GroupEntry {
  name: string;
  masterAddress: string;
  masterPort: number;
  rankOffset: number;
  worldSize: number;
  backend: string;
  ranks: number[];
  /**
   * TokenSpeed answers init at once and forms the communicator lazily: the join runs in the
   * background and the first transfer awaits it. Resolves to null in metadata-only mode.
   */
  joining: Promise<GroupMember | null>;
  member: GroupMember | null;
  joinError: string | null;
  chunks: number;
}

export interface LastLoad {
  source: string;
  at: string;
  weightVersion: string | null;
  claimedWithoutApplying: boolean;
  detail: Record<string, unknown>;
}

export class WeightStore {
  readonly tensors = new Map<string, LoadedTensorRecord>();
  readonly groups = new Map<string, GroupEntry>();
  lastLoad: LastLoad | null = null;
  loads = 0;
  failedLoads = 0;
  /** Loads answered as successful by a `claimSuccessWithoutApplying` fault. */
  claimedLoads = 0;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(public modelPath: string) {}

  /** Weight operations run one at a time. */
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
      groups: [...this.groups.values()].map(({ member, joining: _joining, ...g }) => ({
        ...g, transport: member ? 'tcp' : 'metadata',
      })),
    };
  }

  /** Closes one group's membership (destroy, or a join that lost the race with destroy). */
  drop(name: string): boolean {
    const g = this.groups.get(name);
    if (!g) return false;
    this.groups.delete(name);
    g.member?.close();
    void g.joining.then((m) => m?.close(), () => undefined);
    return true;
  }

  close(): void {
    for (const name of [...this.groups.keys()]) this.drop(name);
  }
}
