// The consistent-hash ring of consistent_hashing and prefix_hash, as SMG builds it: each engine at
// 150 points (the hash of `<url>#<n>`), a key served by the first point at or after the key's hash,
// clockwise. Adding or removing one of N engines moves about 1/N of the keys, only those of the
// points it adds or takes away. A ring of the eligible engines answers as a ring of every engine
// walked past the ineligible ones would, so it is built over the candidates, and kept while they
// stay the same.

import { hashKey } from './key-hash.ts';
import type { Candidate } from './policy.ts';

/** SMG's count of virtual nodes per engine. */
export const VIRTUAL_NODES = 150;

export class HashRing {
  /** Ring positions, ascending. */
  private readonly points: Uint32Array;
  /** For each position, the index of its engine in the candidates the ring was built from. */
  private readonly owners: Uint32Array;

  constructor(urls: readonly string[], vnodes = VIRTUAL_NODES) {
    const entries: Array<{ pos: number; owner: number; url: string }> = [];
    urls.forEach((url, owner) => {
      for (let v = 0; v < vnodes; v++) entries.push({ pos: hashKey(`${url}#${v}`), owner, url });
    });
    // Equal positions (rare with 32 bits) are ordered by URL, so the ring never depends on input order.
    entries.sort((a, b) => a.pos - b.pos || (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
    this.points = Uint32Array.from(entries, (e) => e.pos);
    this.owners = Uint32Array.from(entries, (e) => e.owner);
  }

  /** Index of the key's engine in the list the ring was built from. */
  ownerOf(key: string): number {
    const h = hashKey(key);
    const { points } = this;
    let lo = 0;
    let hi = points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (points[mid]! < h) lo = mid + 1;
      else hi = mid;
    }
    return this.owners[lo === points.length ? 0 : lo]!;
  }
}

/** The rings of the candidate sets seen lately (a few: one per model and mode in use). */
export class RingCache {
  private readonly rings = new Map<string, HashRing>();

  /** The key's engine among `candidates` (never empty). */
  lookup<W extends Candidate>(candidates: readonly W[], key: string): W {
    if (candidates.length === 1) return candidates[0]!;
    const urls = candidates.map((c) => c.url);
    // The same URLs in the same order: the ring's owner indexes point into this array too.
    const signature = urls.join('\n');
    let ring = this.rings.get(signature);
    if (!ring) {
      if (this.rings.size >= 16) this.rings.clear();
      ring = new HashRing(urls);
      this.rings.set(signature, ring);
    }
    return candidates[ring.ownerOf(key)]!;
  }
}
