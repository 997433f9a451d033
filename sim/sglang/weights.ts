// SGLang's weights: its group entry and tensor sizes over the shared store (sim/core/weight-store.ts:
// tensors, groups, counters, the serial queue). The load transaction over them is load.ts.
// It never parses HTTP bodies; the route files do.

import { dtypeWidth } from '../broadcast/dtype.ts';
import { WeightStore as BaseWeightStore, type StoredGroup } from '../core/weight-store.ts';

export type LoadSource = 'distributed' | 'disk' | 'tensor' | 'ipc';

/** SGLang joins during the init call; `member` stays null for a claimed-but-skipped join. */
export interface GroupEntry extends StoredGroup {
  state: 'joining' | 'ready';
}

/** The dtypes SGLang takes are the broadcast group's (torch's names): one width table, in sim/broadcast/dtype.ts. */
export function knownDtype(dtype: string): boolean {
  return dtypeWidth(dtype) !== undefined;
}

export function tensorBytes(dtype: string, shape: readonly number[]): number {
  const width = dtypeWidth(dtype);
  return width === undefined ? 0 : shape.reduce((a, b) => a * b, 1) * width;
}

/** SGLang's store: the shared one over its synchronously joined groups and its load sources. */
export class WeightStore extends BaseWeightStore<GroupEntry, LoadSource> {}
