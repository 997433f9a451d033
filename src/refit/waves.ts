// The waves of a rolling refit: how many engines one wave takes (`max_unavailable`, a count or a
// share of the targets) and which, in the targets' order; when the waves stop early
// (`max_failed`). Pure: no I/O, no clocks.

import type { RefitStrategy } from '../wire/refit-request.ts';

/** A wave drains for this long at most when the request does not say. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;

/**
 * Engines per wave: a count as given (never more than the targets), or a percentage of the
 * targets rounded down, at least one (Kubernetes' `maxUnavailable` rounds the same way).
 */
export function waveSize(maxUnavailable: RefitStrategy['max_unavailable'], targets: number): number {
  if (targets <= 0) return 0;
  if (maxUnavailable === undefined) return 1;
  if (typeof maxUnavailable === 'number') return Math.min(targets, Math.max(1, Math.floor(maxUnavailable)));
  const pct = Number(maxUnavailable.slice(0, -1));
  return Math.min(targets, Math.max(1, Math.floor((targets * pct) / 100)));
}

/** The targets cut into waves of `waveSize`, in their order; the last wave may be smaller. */
export function planWaves(targets: readonly string[], maxUnavailable: RefitStrategy['max_unavailable']): string[][] {
  const size = waveSize(maxUnavailable, targets.length);
  const waves: string[][] = [];
  for (let i = 0; i < targets.length; i += size) waves.push(targets.slice(i, i + size));
  return waves;
}

/** Whether another wave may start after `failed` engines failed so far (more than `max_failed`, default 0, stops it). */
export function mayGoOn(failed: number, maxFailed: number | undefined): boolean {
  return failed <= (maxFailed ?? 0);
}

/** The refit id of wave `index` (0-based) of refit `id`: its own journal, events and report. */
export function waveRefitId(id: string, index: number): string {
  return `${id}-w${index + 1}`;
}
