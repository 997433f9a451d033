// One engine's KV-event stream (src/engines/kv-events.ts, docs/grpc-workers.md "KV events"): a
// KvEventBatch decoded as the gRPC client reads it (proto/ serialized and deserialized with the
// client's loader options, no socket); the subscription resumes after the last batch applied,
// waits between attempts (doubling up to the cap, started over once a stream delivers), never
// asks again an engine that answered UNIMPLEMENTED, and stops for good on close(). Time is
// vitest's fake timers.

import type * as protoLoader from '@grpc/proto-loader';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  KV_RETRY_MAX_MS,
  KV_RETRY_MIN_MS,
  kvBatchFromProto,
  KvSubscription,
  type KvBatch,
  type KvEventSource,
  type KvStreamEnd,
  type KvStreamHandlers,
} from '../../src/engines/kv-events.ts';
import { schedulerDefinition } from '../../src/engines/grpc.ts';

/** SubscribeKvEvents' response codec, as the gateway loads the proto. */
function batchCodec() {
  const def = schedulerDefinition();
  const method = (def['tokenspeed.grpc.scheduler.TokenSpeedScheduler'] as Record<string, protoLoader.MethodDefinition<unknown, unknown>>).SubscribeKvEvents!;
  return (msg: object) => method.responseDeserialize(method.responseSerialize(msg));
}

describe('a KvEventBatch off the wire', () => {
  const roundTrip = batchCodec();

  it('gives the sequence, the DP rank and each event with its blocks, hashes as decimal strings', () => {
    const b = kvBatchFromProto(
      roundTrip({
        sequence_number: '18446744073709551615',
        timestamp: 1.5,
        dp_rank: 1,
        events: [
          {
            event_id: '1',
            stored: {
              parent_block_hash: '-9223372036854775808',
              blocks: [
                { block_hash: '42', token_ids: [1, 2, 3, 4], block_size: 4 },
                { block_hash: '-7', token_ids: [5, 6, 7, 8], block_size: 4 },
              ],
            },
          },
          { event_id: '2', stored: { blocks: [{ block_hash: '9', token_ids: [1, 1], block_size: 0 }] } },
          { event_id: '3', removed: { block_hashes: ['42', '-7'] } },
          { event_id: '4', cleared: {} },
        ],
      }),
    );
    expect(b).toEqual({
      sequence: 18446744073709551615n,
      dpRank: 1,
      events: [
        {
          kind: 'stored',
          parent: '-9223372036854775808',
          blocks: [
            { hash: '42', tokens: [1, 2, 3, 4], size: 4 },
            { hash: '-7', tokens: [5, 6, 7, 8], size: 4 },
          ],
        },
        // No parent: the chain starts at the root; no block_size: its tokens are the block.
        { kind: 'stored', parent: undefined, blocks: [{ hash: '9', tokens: [1, 1], size: 2 }] },
        { kind: 'removed', hashes: ['42', '-7'] },
        { kind: 'cleared' },
      ],
    } satisfies KvBatch);
  });

  it('a load-only heartbeat is a batch without events; no dp_rank is no rank', () => {
    const b = kvBatchFromProto(roundTrip({ sequence_number: '7', timestamp: 2, events: [], load: { running_requests: 3, load_only: true } }));
    expect(b).toEqual({ sequence: 7n, dpRank: undefined, events: [] });
  });

  it('a batch without a usable sequence number is no batch', () => {
    expect(kvBatchFromProto(null)).toBeUndefined();
    expect(kvBatchFromProto({ sequence_number: 'x', events: [] })).toBeUndefined();
  });
});

/** An engine's side of the streams the subscription opens, driven by the test. */
class FakeEngine implements KvEventSource {
  readonly opened: bigint[] = [];
  readonly cancelled: number[] = [];
  private current: KvStreamHandlers | undefined;

  subscribeKvEvents(after: bigint, on: KvStreamHandlers): { cancel(): void } {
    const n = this.opened.push(after) - 1;
    this.current = on;
    return { cancel: () => this.cancelled.push(n) };
  }

  send(sequence: number): void {
    this.current!.batch({ sequence: BigInt(sequence), dpRank: undefined, events: [] });
  }

  end(kind: KvStreamEnd['kind']): void {
    this.current!.ended({ kind, detail: kind });
  }
}

describe('the subscription', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  function subscribe(engine: FakeEngine) {
    let last = 0n;
    const seen: bigint[] = [];
    const lost: string[] = [];
    const sub = new KvSubscription({
      source: engine,
      resumeAfter: () => last,
      batch: (b) => {
        seen.push(b.sequence);
        last = b.sequence;
      },
      lost: (e) => lost.push(e.kind),
      // The longest wait of each step, so the test knows when the reopen is due.
      random: () => 1,
    });
    return { sub, seen, lost };
  }

  it('opens from now, and after a drop resumes after the last batch applied, once the wait is over', () => {
    const engine = new FakeEngine();
    const { seen, lost } = subscribe(engine);
    expect(engine.opened).toEqual([0n]);
    engine.send(4);
    engine.send(5);
    engine.end('failed');
    expect(lost).toEqual(['failed']);
    vi.advanceTimersByTime(KV_RETRY_MIN_MS - 1);
    expect(engine.opened).toEqual([0n]);
    vi.advanceTimersByTime(1);
    expect(engine.opened).toEqual([0n, 5n]);
    engine.send(6);
    expect(seen).toEqual([4n, 5n, 6n]);
  });

  it('waits twice as long after each failure in a row, up to the cap; a stream that delivers starts it over', () => {
    const engine = new FakeEngine();
    subscribe(engine);
    const waits: number[] = [];
    for (let i = 0; i < 10; i++) {
      engine.end(i % 2 ? 'ended' : 'failed');
      const before = engine.opened.length;
      let waited = 0;
      while (engine.opened.length === before) {
        vi.advanceTimersByTime(50);
        waited += 50;
      }
      waits.push(waited);
    }
    expect(waits).toEqual([250, 500, 1000, 2000, 4000, 8000, 16000, KV_RETRY_MAX_MS, KV_RETRY_MAX_MS, KV_RETRY_MAX_MS]);
    engine.send(1);
    engine.end('failed');
    vi.advanceTimersByTime(KV_RETRY_MIN_MS);
    expect(engine.opened).toHaveLength(12);
  });

  it('never asks again an engine that answered UNIMPLEMENTED', () => {
    const engine = new FakeEngine();
    const { sub, lost } = subscribe(engine);
    engine.end('unimplemented');
    expect(lost).toEqual(['unimplemented']);
    expect(sub.active).toBe(false);
    vi.advanceTimersByTime(10 * KV_RETRY_MAX_MS);
    expect(engine.opened).toHaveLength(1);
  });

  it('close() cancels the open stream, or the reopen it waits for', () => {
    const engine = new FakeEngine();
    const { sub } = subscribe(engine);
    sub.close();
    expect(engine.cancelled).toEqual([0]);

    const other = new FakeEngine();
    const waiting = subscribe(other);
    other.end('failed');
    waiting.sub.close();
    vi.advanceTimersByTime(KV_RETRY_MAX_MS);
    expect(other.opened).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });
});
