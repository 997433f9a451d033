// `X-SMG-Target-Worker`: which candidate a request names. SMG reads the header as a 0-based index
// into the available workers (its list, in registry order, is the eligible candidates here) and
// routes nowhere when that index is out of range or the worker unavailable. rlgate also takes a
// worker id or URL, which, unlike an index, does not shift when another engine goes down.

import type { Candidate } from './policy.ts';

/** The candidate `target` names, or undefined (no such candidate: the request gets no worker). */
export function targetOf<W extends Candidate>(target: string, candidates: readonly W[]): W | undefined {
  if (/^\d+$/.test(target)) {
    const i = Number(target);
    return i < candidates.length ? candidates[i] : undefined;
  }
  return candidates.find((c) => c.id === target || c.url === target);
}
