// One page of a sorted fleet listing (`?limit=&cursor=` on GET /v1/rl/workers and GET /workers):
// the rows strictly after the cursor's sort key, and the cursor of the next page. A cursor names
// the last row's sort key, not a position, so a fleet that changes between pages neither repeats
// nor skips a row that stayed. It owns the cursor's encoding; the order is the caller's.

import { GatewayError } from '../api/errors.ts';

/** Rows a page may hold at most (the whole listing stays available without `limit`). */
export const MAX_PAGE = 10_000;

export interface Page<T> {
  items: T[];
  /** The cursor of the next page; null on the last one. */
  next: string | null;
}

/**
 * The page of `sorted` (ascending by `keyOf`, compared element by element) after `cursor`, at
 * most `limit` rows. Throws GatewayError('invalid_request') for a cursor this gateway never gave.
 */
export function pageAfter<T>(sorted: readonly T[], keyOf: (t: T) => readonly string[], cursor: string | undefined, limit: number): Page<T> {
  let start = 0;
  if (cursor !== undefined) {
    const after = decodeCursor(cursor);
    // The first row whose key is greater than the cursor's: binary search.
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareKeys(keyOf(sorted[mid]!), after) <= 0) lo = mid + 1;
      else hi = mid;
    }
    start = lo;
  }
  const items = sorted.slice(start, start + limit);
  const last = items.at(-1);
  const next = start + limit < sorted.length && last !== undefined ? encodeCursor(keyOf(last)) : null;
  return { items, next };
}

export function encodeCursor(key: readonly string[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

function decodeCursor(cursor: string): string[] {
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    key = undefined;
  }
  if (!Array.isArray(key) || key.length === 0 || !key.every((k) => typeof k === 'string')) {
    throw new GatewayError('invalid_request', 'cursor is not one this listing gave (take it from `next_cursor`)', { field: 'cursor' });
  }
  return key as string[];
}

function compareKeys(a: readonly string[], b: readonly string[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i]! < b[i]!) return -1;
    if (a[i]! > b[i]!) return 1;
  }
  return a.length - b.length;
}
