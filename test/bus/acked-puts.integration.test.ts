// Plain bucket puts go out pipelined, their JetStream acks on one subscription (src/bus/acked-puts.ts):
// a burst of writes all land with their own revisions, a second connection's watch sees every one,
// a put that no stream stores fails at once, and one that gets no ack fails at its deadline.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AckedPuts } from '../../src/bus/acked-puts.ts';
import { openBuckets, type FleetBuckets } from '../../src/bus/buckets.ts';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import type { EngineRecord } from '../../src/wire/engine-state.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';

const record = (i: number) => ({ id: `w${i}`, url: `http://127.0.0.1:${20_000 + i}`, state: 'serving', owner: 'r1' }) as unknown as EngineRecord;

describe('pipelined bucket puts', () => {
  let nats: TestNats;
  let writer: Bus;
  let reader: Bus;
  let mine: FleetBuckets;
  let theirs: FleetBuckets;
  beforeAll(async () => {
    nats = await startTestNats();
    writer = await connectBus({ url: nats.url, name: 'test-writer' });
    reader = await connectBus({ url: nats.url, name: 'test-reader' });
    mine = await openBuckets(writer.nc, 'acks');
    theirs = await openBuckets(reader.nc, 'acks');
  });
  afterAll(async () => {
    await reader?.close();
    await writer?.close();
    await nats?.stop();
  });

  it('a burst of 500 puts at once: every one acked with its own revision, stored, and seen by another connection', async () => {
    const seen = new Map<string, EngineRecord | null>();
    const stop = await theirs.engines.watch((id, value) => seen.set(id, value));
    const revisions = await Promise.all(Array.from({ length: 500 }, (_, i) => mine.engines.put(`w${i}`, record(i))));
    expect(new Set(revisions).size).toBe(500);
    for (const r of revisions) expect(r).toBeGreaterThan(0);
    for (const i of [0, 250, 499]) {
      const got = await theirs.engines.get(`w${i}`);
      expect(got?.value).toEqual(record(i));
      expect(got?.revision).toBe(revisions[i]);
    }
    const until = Date.now() + 10_000;
    while (seen.size < 500 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    stop();
    expect(seen.size).toBe(500);
    expect(seen.get('w123')).toEqual(record(123));
  });

  it('the newest of several puts of one key wins, as with nats.js', async () => {
    const revs = await Promise.all([1, 2, 3].map((n) => mine.engines.put('same', { ...record(n), state: `s${n}` } as EngineRecord)));
    expect(revs[0]).toBeLessThan(revs[1]!);
    expect(revs[1]).toBeLessThan(revs[2]!);
    expect((await theirs.engines.get('same'))?.value.state).toBe('s3');
  });

  it('a key the bucket refuses is an error, and nothing is published', async () => {
    await expect(mine.engines.put('bad key*', record(1))).rejects.toThrow();
  });

  it('a subject no stream stores fails at once (no responders); an ack that never comes fails at the deadline', async () => {
    const puts = new AckedPuts(writer.nc, 300);
    await expect(puts.publish('nowhere.stores.this', new Uint8Array([1]))).rejects.toThrow('jetstream is not enabled');
    // A plain subscriber takes the message and never answers: no ack.
    const silent = reader.nc.subscribe('silent.subject');
    await reader.nc.flush();
    const t0 = Date.now();
    const err = await puts.publish('silent.subject', new Uint8Array([1])).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).name).toBe('TimeoutError');
    // Not before its deadline (300 ms), and no later than a sweep after it.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    silent.unsubscribe();
  });
});
