// The 32-bit string hash every key-driven policy uses (rendezvous scores, ring positions, prefix
// hashes): FNV-1a over UTF-16 code units, finished with MurmurHash3's mixer. Fast on the hot path
// and stable across processes and versions of Node, which is all routing needs of it; it is no
// defence against keys chosen to collide.

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** 32-bit FNV-1a over UTF-16 code units, continuing from `h` (FNV's offset basis by default). */
export function fnv1a(s: string, h = FNV_OFFSET): number {
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, FNV_PRIME);
  }
  return h >>> 0;
}

/** MurmurHash3's finaliser: FNV alone avalanches poorly on the last characters (ids ending in 0-9). */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** A string's well-mixed 32-bit hash. */
export function hashKey(s: string): number {
  return fmix32(fnv1a(s));
}

/** The state after hashing `key` and a separator byte: ("ab","c") and ("a","bc") stay apart when continued. */
export function keySeed(key: string): number {
  return Math.imul(fnv1a(key) ^ 0xff, FNV_PRIME) >>> 0;
}
