// The refit read model against a real `refits` bucket on a real nats-server: a watch that lags
// never replaces a newer revision (read afresh, or taken by the waiters' direct reads), which
// engines a refit holds (queued here, or running anywhere), reports reaching the callers that
// wait for them, the cut-off answer to those callers, the fleet's version, answers by id and the
// number of reports kept. Each case opens the buckets of a subject root of its own. A case about
// a lagging watch holds the bucket's own watch back (as a watch whose server died stays silent)
// and lets what it delivered through later, in its order; the fence is a real LeaseFence on a
// stepped clock, the cut-off time a real short one.

import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { openBuckets, type JsonBucket } from '../../src/bus/buckets.ts';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import { LeaseFence } from '../../src/fleet/lease-fence.ts';
import { RefitJournals } from '../../src/refit/journals.ts';
import type { QueuedRefit } from '../../src/wire/queued-refit.ts';
import type { RefitJournal } from '../../src/wire/refit-journal.ts';
import type { RefitReport } from '../../src/wire/refit-report.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { runningJournal } from '../fixtures/refit-journal.ts';

let nats: TestNats;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus({ url: nats.url, name: 'journals-test' });
});
afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

const request = (version: string) => ({ weight_version: version, source: { kind: 'disk' as const, model_path: '/m' } });

function journal(id: string, over: Partial<RefitJournal> = {}): RefitJournal {
  return runningJournal({ id, holder: 'a', submitted_at: '2026-01-01T00:00:00.000Z', request: request(id), phase: 'refit', ...over });
}

/** A finished journal whose report says which engines took `version`. */
function done(id: string, version: string, ok: string[], failed: string[] = []): RefitJournal {
  const engine = (worker_id: string, outcome: 'ok' | 'failed') => ({ worker_id, outcome });
  const report = {
    id,
    weight_version: version,
    status: failed.length ? 'partial' : 'succeeded',
    engines: [...ok.map((w) => engine(w, 'ok')), ...failed.map((w) => engine(w, 'failed'))],
  } as unknown as RefitReport;
  return journal(id, { status: 'done', request: request(version), report });
}

function queued(id: string, targets: string[]): QueuedRefit {
  return { id, request: request(id), selector: null, targets, skipped: [], origin: 'http', submitted_at: '2026-01-01T00:00:00.000Z' };
}

const models: Record<string, string> = { e1: 'llama', e2: 'llama', q1: 'qwen' };

let roots = 0;
const opened: Array<{ close(): void }> = [];
afterEach(() => {
  for (const o of opened.splice(0)) o.close();
  vi.restoreAllMocks();
});

/**
 * A read model over a fresh `refits` bucket. `write` and `remove` change the bucket and wait until
 * the read model's watch has delivered the change (while the watch is held: until the change is
 * in the hold); `hold` keeps what the watch delivers from the read model until `release`.
 */
async function started(opts: { fence?: LeaseFence; cutAnswerMs?: number } = {}) {
  const buckets = await openBuckets(bus.nc, `journals${++roots}`);
  const bucket: JsonBucket<RefitJournal> = buckets.refits;
  const reads = vi.spyOn(bucket, 'get');
  /** The newest revision of each key the watch has handed the read model. */
  const delivered = new Map<string, number>();
  /** The newest revision of each key the watch has brought, held or not. */
  const arrived = new Map<string, number>();
  let held: Array<[string, RefitJournal | null, number]> | undefined;
  let onEntry: ((id: string, j: RefitJournal | null, revision: number) => void) | undefined;
  const pass = (id: string, j: RefitJournal | null, revision: number) => {
    delivered.set(id, Math.max(delivered.get(id) ?? 0, revision));
    onEntry!(id, j, revision);
  };
  const journals = new RefitJournals({
    bucket: {
      get: (id) => bucket.get(id),
      watch: (cb) => {
        onEntry = cb;
        return bucket.watch((id, j, revision) => {
          arrived.set(id, Math.max(arrived.get(id) ?? 0, revision));
          if (held) held.push([id, j, revision]);
          else pass(id, j, revision);
        });
      },
    },
    modelOf: (id) => models[id],
    ...opts,
  });
  await journals.start();
  opened.push(journals);
  // Held, a change waits only to reach the hold (the watch is asynchronous: a release straight
  // after a write could otherwise find nothing held yet); else to reach the read model.
  const seen = async (id: string, revision: number) => {
    const by = held ? arrived : delivered;
    await vi.waitFor(() => expect(by.get(id) ?? 0).toBeGreaterThanOrEqual(revision), { timeout: 10_000, interval: 5 });
    return revision;
  };
  return {
    journals,
    bucket,
    reads,
    write: async (id: string, j: RefitJournal) => seen(id, await bucket.put(id, j)),
    remove: async (id: string) => {
      await bucket.delete(id);
      const head = (await bucket.kv.status()).streamInfo.state.last_seq;
      return seen(id, head);
    },
    hold: () => {
      held ??= [];
    },
    /**
     * What the watch delivered while held reaches the read model now, in order: the first `count`
     * of it (the watch catching up part of the way, still held), or all of it (it follows again).
     */
    release: (count?: number) => {
      const late = (held ?? []).splice(0, count ?? Infinity);
      if (count === undefined) held = undefined;
      for (const [id, j, revision] of late) pass(id, j, revision);
      return late.length;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('RefitJournals: revisions', () => {
  it('a lagging watch cannot bring back an older revision of a journal', async () => {
    const t = await started();
    await t.write('r1', journal('r1'));
    // The watch falls silent; the refit goes on and ends meanwhile.
    t.hold();
    await t.write('r1', journal('r1', { phase: 'verify' }));
    await t.write('r1', done('r1', 'r1', ['e1']));
    // A caller waiting for the report has the journal read directly while the watch is silent.
    const report = await t.journals.waitFor('r1');
    expect(report.weight_version).toBe('r1');
    // The watch catches up with the revision it held, an older one that says the refit runs.
    expect(t.release(1)).toBe(1);
    expect(t.journals.done('r1')).toBe(true);
    expect(t.journals.running('r1')).toBe(false);
    expect(t.release()).toBe(1);
    expect(t.journals.done('r1')).toBe(true);
  });

  it('a journal read afresh stands against an older one the watch brings afterwards', async () => {
    const t = await started();
    await t.write('r1', journal('r1', { phase: 'pause' }));
    t.hold();
    await t.write('r1', journal('r1', { phase: 'verify' }));
    await t.write('r1', journal('r1', { phase: 'resume', pending: ['e2'] }));
    expect(await t.journals.get('r1')).toMatchObject({ status: 'running', phase: 'resume', pending: ['e2'] });
    // The watch brings the older verify phase afterwards.
    expect(t.release(1)).toBe(1);
    expect(t.journals.journal('r1')?.phase).toBe('resume');
    expect(t.release()).toBe(1);
    expect(t.journals.journal('r1')).toMatchObject({ phase: 'resume', pending: ['e2'] });
  });

  it('tells its listeners of every change it takes, and of none it refuses', async () => {
    const t = await started();
    const seen: Array<string | null> = [];
    const stop = t.journals.onJournal((j) => seen.push(j.phase));
    await t.write('r1', journal('r1', { phase: 'pause' }));
    t.hold();
    await t.write('r1', journal('r1', { phase: 'pause', pending: ['e1'] }));
    await t.write('r1', journal('r1', { phase: 'refit' }));
    await t.journals.get('r1'); // read afresh: the refit phase is taken
    t.release(); // the older pause, and the refit phase again: both refused
    stop();
    await t.write('r1', journal('r1', { phase: 'resume' }));
    expect(seen).toEqual(['pause', 'refit']);
  });

  it('a deleted journal is forgotten', async () => {
    const t = await started();
    await t.write('r1', journal('r1'));
    expect(t.journals.running('r1')).toBe(true);
    await t.remove('r1');
    expect(t.journals.running('r1')).toBe(false);
    expect(t.journals.journal('r1')).toBeUndefined();
  });
});

describe('RefitJournals: which engines a refit holds', () => {
  it('a refit queued here holds its targets until its journal appears; then the journal says', async () => {
    const t = await started();
    t.journals.accept(queued('q', ['e1']));
    expect(t.journals.holds('e1')).toBe(true);
    expect(t.journals.holds('e2')).toBe(false);
    await t.write('q', journal('q', { targets: ['e1'] }));
    expect(t.journals.holds('e1')).toBe(true);
    await t.write('q', done('q', 'q', ['e1']));
    expect(t.journals.holds('e1')).toBe(false);
  });

  it('a refit that could not be queued holds nothing and is waited for by nobody', async () => {
    const t = await started();
    t.journals.accept(queued('q', ['e1']));
    t.journals.forget('q');
    expect(t.journals.holds('e1')).toBe(false);
    await expect(t.journals.get('q')).rejects.toMatchObject({ code: 'refit_not_found' });
  });

  it('a clash is a refit queued here, or a running one the bucket still says runs', async () => {
    const t = await started();
    t.journals.accept(queued('q', ['e1']));
    expect(await t.journals.clashes('new', ['e2', 'e1'])).toEqual({ worker: 'e1', refit: 'q', running: false });
    expect(await t.journals.clashes('q', ['e1'])).toBeUndefined();
    await t.write('r', journal('r', { targets: ['e2'] }));
    expect(await t.journals.clashes('new', ['e2'])).toEqual({ worker: 'e2', refit: 'r', running: true });
    // Ended meanwhile, and the watch has not said so yet: read afresh, it no longer clashes.
    t.hold();
    await t.write('r', done('r', 'r', ['e2']));
    expect(await t.journals.clashes('new', ['e2'])).toBeUndefined();
    expect(t.journals.holds('e2')).toBe(false);
    t.release();
  });
});

describe('RefitJournals: reports and the callers waiting for them', () => {
  it('every caller waiting for a refit gets its report when its journal is done', async () => {
    const t = await started();
    const first = t.journals.waitFor('r1');
    const second = t.journals.waitFor('r1');
    await t.write('r1', journal('r1'));
    const finished = done('r1', 'r1', ['e1']);
    await t.write('r1', finished);
    expect(await first).toEqual(finished.report);
    expect(await second).toEqual(finished.report);
    expect(await second).toBe(await first);
  });

  it('cut off from NATS past the cut-off time, each waiting caller is answered bus_unavailable with the refit id; back, callers wait again', async () => {
    let now = 0;
    const fence = new LeaseFence({ replicaId: 'a', leaseMs: 1_000, now: () => now, timers: false });
    opened.push(fence);
    fence.beatConfirmed(now);
    const CUT_MS = 600;
    const t = await started({ fence, cutAnswerMs: CUT_MS });
    const waiting = t.journals.waitFor('r1');
    let answeredAt: number | undefined;
    void waiting.catch(() => (answeredAt = performance.now()));
    now += 1_000;
    const lapsedAt = performance.now();
    fence.check(); // the lease lapsed
    await sleep(CUT_MS / 2);
    expect(answeredAt).toBeUndefined();
    await expect(waiting).rejects.toMatchObject({ code: 'bus_unavailable', context: { refit_id: 'r1' } });
    // Answered once the cut-off time had passed, not before.
    expect(answeredAt! - lapsedAt).toBeGreaterThanOrEqual(CUT_MS - 2);
    // Still cut off: a new caller is answered at once.
    await expect(t.journals.waitFor('r2')).rejects.toMatchObject({ code: 'bus_unavailable', context: { refit_id: 'r2' } });
    fence.resynced();
    const again = t.journals.waitFor('r3');
    const finished = done('r3', 'r3', ['e1']);
    await t.write('r3', finished);
    expect(await again).toEqual(finished.report);
  });

  it("answers by id: a report, a running refit's progress, a refit queued here, or refit_not_found", async () => {
    const t = await started();
    // In the bucket, and not (yet) in this replica's copy: read from the bucket.
    t.hold();
    const finished = done('old', 'old', ['e1']);
    await t.write('old', finished);
    expect(await t.journals.get('old')).toEqual(finished.report);
    t.release();
    t.journals.accept(queued('q', ['e1', 'e2']));
    expect(await t.journals.get('q')).toMatchObject({ id: 'q', status: 'queued', replica: null, total: 2 });
    await t.write('r', journal('r', { holder: 'b', phase: 'verify' }));
    expect(await t.journals.get('r')).toMatchObject({ id: 'r', status: 'running', replica: 'b', phase: 'verify' });
    await expect(t.journals.get('nope')).rejects.toMatchObject({ code: 'refit_not_found' });
    // An id no journal can have is not looked up.
    await expect(t.journals.get('a.b')).rejects.toMatchObject({ code: 'refit_not_found' });
    expect(t.reads.mock.calls.map(([id]) => id)).not.toContain('a.b');
  });

  it('lists the running refits first, then the reports, newest first', async () => {
    const t = await started();
    await t.write('d1', done('d1', '1', ['e1']));
    await t.write('r1', journal('r1'));
    await t.write('d2', done('d2', '2', ['e1']));
    expect((await t.journals.list()).map((r) => r.id)).toEqual(['r1', 'd2', 'd1']);
  });

  it('keeps the newest 256 reports, and every running refit', async () => {
    const t = await started();
    await t.write('run', journal('run'));
    for (let i = 0; i < 299; i++) await t.bucket.put(`d${i}`, done(`d${i}`, String(i), ['e1']));
    await t.write('d299', done('d299', '299', ['e1']));
    expect(t.journals.journal('d43')).toBeUndefined();
    expect(t.journals.journal('d44')).toBeDefined();
    expect(t.journals.running('run')).toBe(true);
    expect((await t.journals.list()).filter((r) => 'engines' in r)).toHaveLength(256);
  });
});

describe('RefitJournals: the fleet version', () => {
  it('is the newest finished refit that brought an engine of the model to its version', async () => {
    const t = await started();
    expect(t.journals.fleetVersion('llama')).toBeUndefined();
    await t.write('a', done('a', '5', ['e1']));
    await t.write('b', done('b', '6', [], ['e1', 'e2']));
    await t.write('c', done('c', '9', ['q1']));
    await t.write('d', journal('d'));
    expect(t.journals.fleetVersion('llama')).toBe('5');
    expect(t.journals.fleetVersion('qwen')).toBe('9');
    expect(t.journals.fleetVersion('other')).toBeUndefined();
  });
});
