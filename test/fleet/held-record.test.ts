// Which engine records may wait before they are written (a refit's `refitting` of a paused
// engine), and that a held record is written once it has lasted, or never when a newer one
// replaces it first. The bucket is a stand-in that counts writes; time is stepped.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { JsonBucket } from '../../src/bus/buckets.ts';
import { RecordWriter } from '../../src/fleet/record-writer.ts';
import { HELD_RECORD_MS, mayHoldRecord, type PublishedState } from '../../src/fleet/state-publisher.ts';
import type { Logger } from '../../src/obs/logger.ts';
import type { EngineRecord } from '../../src/wire/engine-state.ts';

const published = (state: string, control: string): PublishedState => ({
  state,
  control,
  breaker: 'closed',
  version: '1',
  versionSource: 'registration',
  quarantine: null,
});

describe('mayHoldRecord', () => {
  it('holds the refitting record of an engine a pause already took out of routing', () => {
    expect(mayHoldRecord(published('paused', 'paused'), 'refitting', 'paused')).toBe(true);
  });

  it('writes at once every move a replica routes by', () => {
    // A pause on its way: the engine is still routable in the record it replaces.
    expect(mayHoldRecord(published('serving', 'active'), 'pausing', 'active')).toBe(false);
    // A load on a serving engine (no pause first): other replicas must stop routing to it now.
    expect(mayHoldRecord(published('serving', 'active'), 'refitting', 'active')).toBe(false);
    expect(mayHoldRecord(published('serving', 'paused'), 'refitting', 'paused')).toBe(false);
    // An active engine in the record it replaces.
    expect(mayHoldRecord(published('paused', 'active'), 'refitting', 'paused')).toBe(false);
    // Resting states, and the first record of an engine.
    expect(mayHoldRecord(published('refitting', 'paused'), 'paused', 'paused')).toBe(false);
    expect(mayHoldRecord(published('paused', 'paused'), 'serving', 'active')).toBe(false);
    expect(mayHoldRecord(undefined, 'refitting', 'paused')).toBe(false);
  });
});

describe('RecordWriter.putUnlessReplaced', () => {
  const writes: Array<[string, string | null]> = [];
  const bucket = {
    put: async (key: string, value: EngineRecord) => {
      writes.push([key, value.state]);
      return writes.length;
    },
    delete: async (key: string) => {
      writes.push([key, null]);
    },
  } as unknown as JsonBucket<EngineRecord>;
  const log = { debug() {}, info() {}, warn() {}, error() {} } as unknown as Logger;
  const record = (state: string) => ({ id: 'e1', state }) as EngineRecord;

  beforeEach(() => {
    writes.length = 0;
    vi.useFakeTimers();
  });
  afterEach(() => vi.useRealTimers());

  it('never writes a held record that a newer one replaces in time', async () => {
    const w = new RecordWriter({ records: bucket, log });
    w.putUnlessReplaced('e1', record('refitting'), HELD_RECORD_MS);
    await vi.advanceTimersByTimeAsync(HELD_RECORD_MS - 1);
    w.put('e1', record('paused'));
    await vi.advanceTimersByTimeAsync(HELD_RECORD_MS * 2);
    expect(writes).toEqual([['e1', 'paused']]);
  });

  it('writes a held record once it has lasted', async () => {
    const w = new RecordWriter({ records: bucket, log });
    w.putUnlessReplaced('e1', record('refitting'), HELD_RECORD_MS);
    await vi.advanceTimersByTimeAsync(HELD_RECORD_MS - 1);
    expect(writes).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(writes).toEqual([['e1', 'refitting']]);
    w.put('e1', record('paused'));
    await vi.advanceTimersByTimeAsync(0);
    expect(writes).toEqual([
      ['e1', 'refitting'],
      ['e1', 'paused'],
    ]);
  });

  it('drops a held record when the engine leaves or the writer closes', async () => {
    const w = new RecordWriter({ records: bucket, log });
    w.putUnlessReplaced('e1', record('refitting'), HELD_RECORD_MS);
    w.forget('e1');
    w.putUnlessReplaced('e2', { ...record('refitting'), id: 'e2' }, HELD_RECORD_MS);
    w.remove('e2');
    w.putUnlessReplaced('e3', { ...record('refitting'), id: 'e3' }, HELD_RECORD_MS);
    w.close();
    await vi.advanceTimersByTimeAsync(HELD_RECORD_MS * 2);
    expect(writes).toEqual([['e2', null]]);
  });
});
