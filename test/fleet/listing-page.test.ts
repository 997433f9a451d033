// Paging a sorted listing by cursor: every row exactly once across pages, a cursor that names a row
// which left meanwhile still resumes after it, and a cursor the gateway never gave is a 400.

import { describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/api/errors.ts';
import { encodeCursor, pageAfter } from '../../src/fleet/listing-page.ts';

const rows = ['a', 'b', 'c', 'd', 'e'].map((base, i) => ({ base: `http://${base}`, url: `http://${base}/${i}` }));
const key = (r: { base: string; url: string }) => [r.base, r.url];

describe('pageAfter', () => {
  it('walks every row exactly once, in order, for every page size', () => {
    for (const limit of [1, 2, 3, 5, 7]) {
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      for (;;) {
        const page = pageAfter(rows, key, cursor, limit);
        seen.push(...page.items.map((r) => r.url));
        pages++;
        if (page.next === null || pages > 20) break;
        cursor = page.next;
      }
      expect(seen, `limit ${limit}`).toEqual(rows.map((r) => r.url));
      expect(pages, `limit ${limit}`).toBe(Math.max(1, Math.ceil(rows.length / limit)));
    }
  });

  it('resumes after a row that left between pages, and ends with null on an exact last page', () => {
    const first = pageAfter(rows, key, undefined, 2);
    expect(first.items.map((r) => r.base)).toEqual(['http://a', 'http://b']);
    const without = rows.filter((r) => r.base !== 'http://b');
    expect(pageAfter(without, key, first.next!, 2).items.map((r) => r.base)).toEqual(['http://c', 'http://d']);
    const last = pageAfter(rows, key, encodeCursor(key(rows[2]!)), 2);
    expect(last.items.map((r) => r.base)).toEqual(['http://d', 'http://e']);
    expect(last.next).toBeNull();
    expect(pageAfter([], key, undefined, 3)).toEqual({ items: [], next: null });
  });

  it('a cursor it never gave is invalid_request naming the cursor', () => {
    for (const bad of ['not-a-cursor', encodeCursor([]), Buffer.from('{"a":1}').toString('base64url'), Buffer.from('[1,2]').toString('base64url')]) {
      let err: unknown;
      try {
        pageAfter(rows, key, bad, 2);
      } catch (e) {
        err = e;
      }
      expect(err, bad).toBeInstanceOf(GatewayError);
      expect((err as GatewayError).code, bad).toBe('invalid_request');
    }
  });
});
