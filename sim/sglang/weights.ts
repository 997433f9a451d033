// SGLang's weights: its group entry and dtypes over the shared store (sim/core/weight-store.ts:
// tensors, groups, counters, the serial queue). The load transaction over them is load.ts.
// It never parses HTTP bodies; the route files do.

import { WeightStore as BaseWeightStore, type StoredGroup } from '../core/weight-store.ts';

export const DTYPE_BYTES: Readonly<Record<string, number>> = {
  float32: 4,
  bfloat16: 2,
  float16: 2,
  int64: 8,
  int32: 4,
  uint8: 1,
  int8: 1,
  bool: 1,
  float8_e4m3fn: 1,
  float8_e5m2: 1,
};

export type LoadSource = 'distributed' | 'disk' | 'tensor' | 'ipc';

/** SGLang joins during the init call; `member` stays null for a claimed-but-skipped join. */
export interface GroupEntry extends StoredGroup {
  state: 'joining' | 'ready';
}

export function knownDtype(dtype: string): boolean {
  return Object.hasOwn(DTYPE_BYTES, dtype);
}

export function tensorBytes(dtype: string, shape: readonly number[]): number {
  return knownDtype(dtype) ? shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype] : 0;
}

/** SGLang's store: the shared one over its synchronously joined groups and its load sources. */
export class WeightStore extends BaseWeightStore<GroupEntry, LoadSource> {}
