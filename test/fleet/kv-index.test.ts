// The KV-event index (src/fleet/kv-index.ts, docs/routing.md "KV events"): blocks stored, removed
// and cleared per worker; a request's whole pages matched from the root along the engine's own
// chain (parent hash, page tokens), never by tokens alone; overlap counted in leading blocks;
// size per model; a lost batch (a gap in the sequence numbers) starts the worker over; a replayed
// repeat is skipped; DP ranks; workers forgotten when removed or lost past the grace period; the
// cap on blocks per worker.

import { describe, expect, it } from 'vitest';
import type { KvBatch, KvBlock, KvEvent } from '../../src/engines/kv-events.ts';
import { KV_STREAM_GRACE_MS, KvIndex } from '../../src/fleet/kv-index.ts';
import { steppedClock } from '../fixtures/policy-fleet.ts';

const PAGE = 16;
/** Page `i` of a prompt family: 16 distinct token ids. */
const page = (i: number): number[] => Array.from({ length: PAGE }, (_, k) => 1000 + i * PAGE + k);
const prompt = (...pages: number[]): number[] => pages.flatMap(page);

/** The engine's hash of a block: anything the index cannot recompute (it only compares them). */
const hashOf = (parent: string | undefined, tokens: readonly number[]): string => {
  let h = 7n;
  for (const t of [...(parent ?? 'root')].map((c) => c.charCodeAt(0)).concat(tokens)) h = (h * 1_000_003n + BigInt(t)) % 9_223_372_036_854_775_783n;
  return h.toString();
};

/** Blocks for `pages` chained on `parent`, as an engine stores them, and the last hash. */
function chain(parent: string | undefined, pages: number[][], size = PAGE): { blocks: KvBlock[]; last: string | undefined } {
  const blocks: KvBlock[] = [];
  let p = parent;
  for (const tokens of pages) {
    const hash = hashOf(p, tokens);
    blocks.push({ hash, tokens, size });
    p = hash;
  }
  return { blocks, last: p };
}

const stored = (parent: string | undefined, blocks: KvBlock[]): KvEvent => ({ kind: 'stored', parent, blocks });
const batch = (sequence: number, events: KvEvent[], dpRank?: number): KvBatch => ({ sequence: BigInt(sequence), dpRank, events });
const heartbeat = (sequence: number): KvBatch => batch(sequence, []);

function index(models: Record<string, string> = {}, opts: { maxBlocks?: number } = {}) {
  const clock = steppedClock(1_000);
  const kv = new KvIndex({ clock, modelOf: (id) => models[id] ?? 'm', ...opts });
  return { kv, clock };
}

describe('stored blocks and the overlap of a request', () => {
  it('counts the leading whole pages a worker holds, matched from the root', () => {
    const { kv } = index();
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(0), page(1), page(2)]).blocks)]));
    const o = kv.overlap('m', [...prompt(0, 1, 2, 3), 7, 7, 7]);
    expect(o.scores.get('a')).toBe(3);
    expect(o.blocks.get('a')).toBe(3);
    // The second page differs: only the first matches, the third does not count after the break.
    expect(kv.overlap('m', prompt(0, 9, 2)).scores.get('a')).toBe(1);
    // A different first page: nothing, however much of the rest is the same.
    expect(kv.overlap('m', prompt(9, 1, 2)).scores.has('a')).toBe(false);
    // A tail shorter than a page never matches: 31 tokens are one page.
    expect(kv.overlap('m', prompt(0, 1).slice(0, 31)).scores.get('a')).toBe(1);
  });

  it('follows parent_block_hash: a later event extending a cached path continues the chain', () => {
    const { kv } = index();
    const first = chain(undefined, [page(0), page(1)]);
    kv.apply('a', batch(1, [stored(undefined, first.blocks)]));
    kv.apply('a', batch(2, [stored(first.last, chain(first.last, [page(2), page(3)]).blocks)]));
    expect(kv.overlap('m', prompt(0, 1, 2, 3)).scores.get('a')).toBe(4);
    expect(kv.size('m')).toBe(4);
  });

  it('never matches a page by its tokens alone: the same page under another parent is another block', () => {
    const { kv } = index();
    // `b` holds page 1 at the root (a prompt that starts with it), not after page 0.
    kv.apply('b', batch(1, [stored(undefined, chain(undefined, [page(1)]).blocks)]));
    expect(kv.overlap('m', prompt(0, 1)).scores.has('b')).toBe(false);
    expect(kv.overlap('m', prompt(1, 0)).scores.get('b')).toBe(1);
    // A chain whose parent the index never saw (stored before it subscribed) is unreachable.
    kv.apply('c', batch(1, [stored('12345', chain('12345', [page(0)]).blocks)]));
    expect(kv.overlap('m', prompt(0)).scores.has('c')).toBe(false);
    expect(kv.overlap('m', prompt(0)).blocks.get('c')).toBe(1);
  });

  it('reads the page size from the events', () => {
    const { kv } = index();
    const four = [0, 1, 2, 3].map((i) => page(0).slice(i * 4, i * 4 + 4));
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, four, 4).blocks)]));
    expect(kv.overlap('m', [...page(0).slice(0, 14), 1, 1]).scores.get('a')).toBe(3);
  });

  it('scores every worker of the model; the totals say how much each holds', () => {
    const { kv } = index({ a: 'm', b: 'm', c: 'other' });
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(0), page(1)]).blocks)]));
    kv.apply('b', batch(1, [stored(undefined, chain(undefined, [page(0), page(5), page(6), page(7)]).blocks)]));
    kv.apply('c', batch(1, [stored(undefined, chain(undefined, [page(0), page(1), page(2)]).blocks)]));
    const o = kv.overlap('m', prompt(0, 1, 2));
    expect(Object.fromEntries(o.scores)).toEqual({ a: 2, b: 1 });
    expect(Object.fromEntries(o.blocks)).toEqual({ a: 2, b: 4 });
    expect(kv.size('m')).toBe(6);
    expect(kv.size('other')).toBe(3);
    expect(kv.size(undefined)).toBe(9);
    expect(kv.size('none')).toBe(0);
  });
});

describe('removed and cleared', () => {
  it('a removed block is no longer held, and the chain stops where it was', () => {
    const { kv } = index();
    const c = chain(undefined, [page(0), page(1), page(2)]);
    kv.apply('a', batch(1, [stored(undefined, c.blocks)]));
    kv.apply('a', batch(2, [{ kind: 'removed', hashes: [c.blocks[2]!.hash] }]));
    expect(kv.overlap('m', prompt(0, 1, 2)).scores.get('a')).toBe(2);
    kv.apply('a', batch(3, [{ kind: 'removed', hashes: [c.blocks[0]!.hash] }]));
    expect(kv.overlap('m', prompt(0, 1, 2)).scores.has('a')).toBe(false);
    expect(kv.blocksOf('a')).toBe(1);
    // A hash it never held changes nothing.
    kv.apply('a', batch(4, [{ kind: 'removed', hashes: ['999'] }]));
    expect(kv.blocksOf('a')).toBe(1);
  });

  it('cleared empties the worker: its prefix no longer counts', () => {
    const { kv } = index({ a: 'm', b: 'm' });
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(0), page(1)]).blocks)]));
    kv.apply('b', batch(1, [stored(undefined, chain(undefined, [page(4)]).blocks)]));
    kv.apply('a', batch(2, [{ kind: 'cleared' }]));
    expect(kv.overlap('m', prompt(0, 1)).scores.size).toBe(0);
    expect(kv.blocksOf('a')).toBe(0);
    expect(kv.size('m')).toBe(1);
    // What it stores after the flush counts again.
    kv.apply('a', batch(3, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    expect(kv.overlap('m', prompt(0, 1)).scores.get('a')).toBe(1);
  });

  it('a page two ranks behind one worker both stored stays until both removed it', () => {
    const { kv } = index();
    const c = chain(undefined, [page(0)]);
    kv.apply('a', batch(1, [stored(undefined, c.blocks)], 0));
    kv.apply('a', batch(2, [stored(undefined, c.blocks)], 1));
    kv.apply('a', batch(3, [{ kind: 'removed', hashes: [c.blocks[0]!.hash] }], 0));
    expect(kv.overlap('m', prompt(0)).scores.get('a')).toBe(1);
    kv.apply('a', batch(4, [{ kind: 'removed', hashes: [c.blocks[0]!.hash] }], 1));
    expect(kv.overlap('m', prompt(0)).scores.has('a')).toBe(false);
  });
});

describe('sequence numbers', () => {
  it('a gap drops what the worker held and starts over from the batch that came', () => {
    const { kv } = index();
    kv.apply('a', batch(5, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    kv.apply('a', batch(6, [stored(undefined, chain(undefined, [page(1)]).blocks)]));
    expect(kv.blocksOf('a')).toBe(2);
    // Batch 7 was lost: 8 is applied on an empty worker.
    kv.apply('a', batch(8, [stored(undefined, chain(undefined, [page(2)]).blocks)]));
    expect(kv.blocksOf('a')).toBe(1);
    expect(kv.overlap('m', prompt(0)).scores.has('a')).toBe(false);
    expect(kv.overlap('m', prompt(2)).scores.get('a')).toBe(1);
    expect(kv.resumeAfter('a')).toBe(8n);
  });

  it('a heartbeat repeats the last number; one that moved on says batches were lost', () => {
    const { kv } = index();
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    kv.apply('a', heartbeat(1));
    expect(kv.blocksOf('a')).toBe(1);
    kv.apply('a', heartbeat(3));
    expect(kv.blocksOf('a')).toBe(0);
    expect(kv.resumeAfter('a')).toBe(3n);
    // The next event batch after the heartbeat follows it.
    kv.apply('a', batch(4, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    expect(kv.blocksOf('a')).toBe(1);
  });

  it("numbering that starts over (a restarted engine) drops the old engine's blocks", () => {
    const { kv } = index();
    kv.apply('a', batch(41, [stored(undefined, chain(undefined, [page(0), page(1)]).blocks)]));
    kv.apply('a', heartbeat(0));
    expect(kv.blocksOf('a')).toBe(0);
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(3)]).blocks)]));
    expect(kv.overlap('m', prompt(3)).scores.get('a')).toBe(1);
  });

  it('a replay that starts with the last batch applied skips that batch', () => {
    const { kv } = index();
    const first = chain(undefined, [page(0)]);
    const second = chain(first.last, [page(1)]);
    kv.apply('a', batch(1, [stored(undefined, first.blocks)]));
    kv.apply('a', batch(2, [stored(first.last, second.blocks)]));
    kv.apply('a', batch(2, [stored(first.last, second.blocks)]));
    expect(kv.overlap('m', prompt(0, 1)).scores.get('a')).toBe(2);
    kv.apply('a', batch(3, [{ kind: 'removed', hashes: [second.last!] }]));
    expect(kv.overlap('m', prompt(0, 1)).scores.get('a')).toBe(1);
  });

  it('resumes after the last batch applied, and from now for a worker it does not know', () => {
    const { kv } = index();
    expect(kv.resumeAfter('a')).toBe(0n);
    kv.apply('a', batch(12, []));
    expect(kv.resumeAfter('a')).toBe(12n);
  });
});

describe('DP ranks', () => {
  it("a rank's worker takes its own rank's events and every flush, and keeps count of every batch", () => {
    const { kv } = index();
    kv.apply('r1', batch(1, [stored(undefined, chain(undefined, [page(0)]).blocks)], 0), 1);
    kv.apply('r1', batch(2, [stored(undefined, chain(undefined, [page(1)]).blocks)], 1), 1);
    expect(kv.overlap('m', prompt(0)).scores.has('r1')).toBe(false);
    expect(kv.overlap('m', prompt(1)).scores.get('r1')).toBe(1);
    // Batch 3 is rank 0's flush: rank 1 forgets too, and no gap is seen at batch 4.
    kv.apply('r1', batch(3, [{ kind: 'cleared' }], 0), 1);
    expect(kv.blocksOf('r1')).toBe(0);
    kv.apply('r1', batch(4, [stored(undefined, chain(undefined, [page(2)]).blocks)], 1), 1);
    kv.apply('r1', batch(5, [stored(undefined, chain(undefined, [page(3)]).blocks)], 0), 1);
    expect(kv.blocksOf('r1')).toBe(1);
  });
});

describe('forgetting a worker', () => {
  it('a removed worker is gone from every answer', () => {
    const { kv } = index();
    kv.apply('a', batch(3, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    kv.forget('a');
    expect(kv.size('m')).toBe(0);
    expect(kv.overlap('m', prompt(0)).blocks.has('a')).toBe(false);
    expect(kv.resumeAfter('a')).toBe(0n);
    expect(kv.blocksOf('a')).toBeUndefined();
  });

  it('a lost stream keeps the worker for the grace period, then forgets it', () => {
    const { kv, clock } = index({ a: 'm', b: 'm' });
    kv.apply('a', batch(1, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    kv.apply('b', batch(1, [stored(undefined, chain(undefined, [page(0)]).blocks)]));
    kv.streamLost('a');
    kv.streamLost('b');
    clock.advance(KV_STREAM_GRACE_MS);
    expect(kv.overlap('m', prompt(0)).scores.get('a')).toBe(1);
    // `b` is back in time: a batch ends its outage.
    kv.apply('b', heartbeat(1));
    clock.advance(1);
    expect(Object.fromEntries(kv.overlap('m', prompt(0)).scores)).toEqual({ b: 1 });
    expect(kv.size('m')).toBe(1);
    // Forgotten means started over: the stream opens from now.
    expect(kv.resumeAfter('a')).toBe(0n);
    clock.advance(KV_STREAM_GRACE_MS + 1);
    expect(kv.size('m')).toBe(1);
  });
});

describe('bounded memory', () => {
  it('past the cap new blocks are not recorded, and removals make room again', () => {
    const { kv } = index({}, { maxBlocks: 3 });
    const c = chain(undefined, [page(0), page(1), page(2), page(3), page(4)]);
    kv.apply('a', batch(1, [stored(undefined, c.blocks)]));
    expect(kv.blocksOf('a')).toBe(3);
    expect(kv.overlap('m', prompt(0, 1, 2, 3, 4)).scores.get('a')).toBe(3);
    kv.apply('a', batch(2, [{ kind: 'removed', hashes: [c.blocks[2]!.hash] }]));
    kv.apply('a', batch(3, [stored(c.blocks[1]!.hash, c.blocks.slice(2, 3))]));
    expect(kv.overlap('m', prompt(0, 1, 2, 3)).scores.get('a')).toBe(3);
  });
});
