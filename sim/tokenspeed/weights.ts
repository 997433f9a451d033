// TokenSpeed's weight store: the shared store (sim/core/weight-store.ts: tensors, groups, load
// counters, the serial queue every weight operation runs through) over TokenSpeed's lazily
// joined groups, which it closes even when a join is still running. It never parses HTTP.

import type { GroupMember } from '../broadcast/types.ts';
import { WeightStore as BaseWeightStore, type StoredGroup } from '../core/weight-store.ts';

export interface GroupEntry extends StoredGroup {
  /**
   * TokenSpeed answers init at once and forms the communicator lazily: the join runs in the
   * background and the first transfer awaits it. Resolves to null in metadata-only mode.
   */
  joining: Promise<GroupMember | null>;
  joinError: string | null;
}

export class WeightStore extends BaseWeightStore<GroupEntry> {
  /** Closes one group's membership (destroy, or a join that lost the race with destroy). */
  drop(name: string): boolean {
    const g = this.groups.get(name);
    if (!g) return false;
    this.groups.delete(name);
    g.member?.close();
    void g.joining.then(
      (m) => m?.close(),
      () => undefined,
    );
    return true;
  }

  override close(): void {
    for (const name of [...this.groups.keys()]) this.drop(name);
  }

  /** The pending join is a live handle too: the snapshot leaves it out. */
  protected override groupView({ joining: _joining, ...g }: GroupEntry): Record<string, unknown> {
    return super.groupView(g);
  }
}
