// The refit read model on its own: a watch that lags never replaces a newer revision (read
// afresh or delivered earlier), which engines a refit holds (queued here, or running anywhere),
// reports reaching the callers that wait for them, the cut-off answer to those callers, the
// fleet's version, answers by id and the number of reports kept. The bucket is two functions over
// a map (the watch driven by the test), the fence a real LeaseFence on a stepped clock.

import { afterEach, describe, expect, it, vi } from 'vitest';
import { LeaseFence } from '../../src/fleet/lease-fence.ts';
import type { RefitJournal } from '../../src/refit/journal.ts';
import { RefitJournals } from '../../src/refit/journals.ts';
import type { QueuedRefit } from '../../src/refit/queue-message.ts';
import type { RefitReport } from '../../src/refit/report.ts';

type Entry = { value: RefitJournal; revision: number };

/** What the read model reads of the `refits` bucket: `get` over a map, and a watch the test feeds. */
function refitsBucket() {
  const entries = new Map<string, Entry>();
  let onEntry: ((id: string, j: RefitJournal | null, revision: number) => void) | undefined;
  const reads: string[] = [];
  return {
    entries,
    reads,
    bucket: {
      get: async (id: string) => {
        reads.push(id);
        return entries.get(id) ?? null;
      },
      watch: async (cb: typeof onEntry) => {
        onEntry = cb;
        return () => (onEntry = undefined);
      },
    },
    /** The watch delivers this revision (late or not). */
    deliver: (id: string, value: RefitJournal | null, revision: number) => onEntry!(id, value, revision),
  };
}

const request = (version: string) => ({ weight_version: version, source: { kind: 'disk' as const, model_path: '/m' } });

function journal(id: string, over: Partial<RefitJournal> = {}): RefitJournal {
  return {
    id,
    status: 'running',
    holder: 'a',
    origin: 'http',
    submitted_at: '2026-01-01T00:00:00.000Z',
    request: request(id),
    selector: null,
    targets: ['e1', 'e2'],
    asleep: [],
    keep_paused: [],
    phase: 'refit',
    step_index: 0,
    pending: [],
    engines: {},
    paused: [],
    resumed: [],
    takeovers: [],
    ...over,
  };
}

/** A finished journal whose report says which engines took `version`. */
function done(id: string, version: string, ok: string[], failed: string[] = []): RefitJournal {
  const engine = (worker_id: string, outcome: 'ok' | 'failed') => ({ worker_id, outcome });
  const report = { id, weight_version: version, status: failed.length ? 'partial' : 'succeeded', engines: [...ok.map((w) => engine(w, 'ok')), ...failed.map((w) => engine(w, 'failed'))] } as unknown as RefitReport;
  return journal(id, { status: 'done', request: request(version), report });
}

function queued(id: string, targets: string[]): QueuedRefit {
  return { id, request: request(id), selector: null, targets, skipped: [], origin: 'http', submitted_at: '2026-01-01T00:00:00.000Z' };
}

const models: Record<string, string> = { e1: 'llama', e2: 'llama', q1: 'qwen' };

async function started(opts: { fence?: LeaseFence; cutAnswerMs?: number } = {}) {
  const b = refitsBucket();
  const journals = new RefitJournals({ bucket: b.bucket, modelOf: (id) => models[id], ...opts });
  await journals.start();
  opened.push(journals);
  return { ...b, journals };
}

const opened: RefitJournals[] = [];
afterEach(() => {
  for (const j of opened.splice(0)) j.close();
  vi.useRealTimers();
});

describe('RefitJournals: revisions', () => {
  it('a lagging watch cannot bring back an older revision of a journal', async () => {
    const t = await started();
    t.deliver('r1', journal('r1'), 5);
    t.deliver('r1', done('r1', 'r1', ['e1']), 7);
    t.deliver('r1', journal('r1'), 6);
    expect(t.journals.done('r1')).toBe(true);
    expect(t.journals.running('r1')).toBe(false);
  });

  it('a journal read afresh stands against an older one the watch brings afterwards', async () => {
    const t = await started();
    t.deliver('r1', journal('r1', { phase: 'pause' }), 3);
    t.entries.set('r1', { value: journal('r1', { phase: 'resume', pending: ['e2'] }), revision: 9 });
    expect(await t.journals.get('r1')).toMatchObject({ status: 'running', phase: 'resume', pending: ['e2'] });
    t.deliver('r1', journal('r1', { phase: 'verify' }), 8);
    expect(t.journals.journal('r1')?.phase).toBe('resume');
  });

  it('tells its listeners of every change it takes, and of none it refuses', async () => {
    const t = await started();
    const seen: Array<string | null> = [];
    const stop = t.journals.onJournal((j) => seen.push(j.phase));
    t.deliver('r1', journal('r1', { phase: 'pause' }), 1);
    t.deliver('r1', journal('r1', { phase: 'refit' }), 2);
    t.deliver('r1', journal('r1', { phase: 'pause' }), 1);
    stop();
    t.deliver('r1', journal('r1', { phase: 'resume' }), 3);
    expect(seen).toEqual(['pause', 'refit']);
  });

  it('a deleted journal is forgotten', async () => {
    const t = await started();
    t.deliver('r1', journal('r1'), 1);
    t.deliver('r1', null, 2);
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
    t.deliver('q', journal('q', { targets: ['e1'] }), 1);
    expect(t.journals.holds('e1')).toBe(true);
    t.deliver('q', done('q', 'q', ['e1']), 2);
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
    t.deliver('r', journal('r', { targets: ['e2'] }), 1);
    t.entries.set('r', { value: journal('r', { targets: ['e2'] }), revision: 1 });
    expect(await t.journals.clashes('new', ['e2'])).toEqual({ worker: 'e2', refit: 'r', running: true });
    // Ended meanwhile, and the watch has not said so yet: read afresh, it no longer clashes.
    t.entries.set('r', { value: done('r', 'r', ['e2']), revision: 2 });
    expect(await t.journals.clashes('new', ['e2'])).toBeUndefined();
    expect(t.journals.holds('e2')).toBe(false);
  });
});

describe('RefitJournals: reports and the callers waiting for them', () => {
  it('every caller waiting for a refit gets its report when its journal is done', async () => {
    const t = await started();
    const first = t.journals.waitFor('r1');
    const second = t.journals.waitFor('r1');
    t.deliver('r1', journal('r1'), 1);
    const finished = done('r1', 'r1', ['e1']);
    t.deliver('r1', finished, 2);
    expect(await first).toBe(finished.report);
    expect(await second).toBe(finished.report);
  });

  it('cut off from NATS past the cut-off time, each waiting caller is answered bus_unavailable with the refit id; back, callers wait again', async () => {
    vi.useFakeTimers();
    const fence = new LeaseFence({ replicaId: 'a', leaseMs: 1_000, now: () => Date.now(), timers: false });
    fence.beatConfirmed(Date.now());
    const t = await started({ fence, cutAnswerMs: 5_000 });
    const waiting = t.journals.waitFor('r1');
    vi.advanceTimersByTime(1_000);
    fence.check(); // the lease lapsed
    vi.advanceTimersByTime(4_999);
    let answered = false;
    void waiting.catch(() => (answered = true));
    await Promise.resolve();
    expect(answered).toBe(false);
    vi.advanceTimersByTime(1);
    await expect(waiting).rejects.toMatchObject({ code: 'bus_unavailable', context: { refit_id: 'r1' } });
    // Still cut off: a new caller is answered at once.
    await expect(t.journals.waitFor('r2')).rejects.toMatchObject({ code: 'bus_unavailable', context: { refit_id: 'r2' } });
    fence.resynced();
    const again = t.journals.waitFor('r3');
    const finished = done('r3', 'r3', ['e1']);
    t.deliver('r3', finished, 1);
    expect(await again).toBe(finished.report);
    fence.close();
  });

  it('answers by id: a report, a running refit\'s progress, a refit queued here, or refit_not_found', async () => {
    const t = await started();
    const finished = done('old', 'old', ['e1']);
    t.entries.set('old', { value: finished, revision: 4 });
    expect(await t.journals.get('old')).toBe(finished.report);
    t.journals.accept(queued('q', ['e1', 'e2']));
    expect(await t.journals.get('q')).toMatchObject({ id: 'q', status: 'queued', replica: null, total: 2 });
    t.deliver('r', journal('r', { holder: 'b', phase: 'verify' }), 1);
    expect(await t.journals.get('r')).toMatchObject({ id: 'r', status: 'running', replica: 'b', phase: 'verify' });
    await expect(t.journals.get('nope')).rejects.toMatchObject({ code: 'refit_not_found' });
    // An id no journal can have is not looked up.
    await expect(t.journals.get('a.b')).rejects.toMatchObject({ code: 'refit_not_found' });
    expect(t.reads).not.toContain('a.b');
  });

  it('lists the running refits first, then the reports, newest first', async () => {
    const t = await started();
    t.deliver('d1', done('d1', '1', ['e1']), 1);
    t.deliver('r1', journal('r1'), 2);
    t.deliver('d2', done('d2', '2', ['e1']), 3);
    expect((await t.journals.list()).map((r) => r.id)).toEqual(['r1', 'd2', 'd1']);
  });

  it('keeps the newest 256 reports, and every running refit', async () => {
    const t = await started();
    t.deliver('run', journal('run'), 1);
    for (let i = 0; i < 300; i++) t.deliver(`d${i}`, done(`d${i}`, String(i), ['e1']), 2 + i);
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
    t.deliver('a', done('a', '5', ['e1']), 1);
    t.deliver('b', done('b', '6', [], ['e1', 'e2']), 2);
    t.deliver('c', done('c', '9', ['q1']), 3);
    t.deliver('d', journal('d'), 4);
    expect(t.journals.fleetVersion('llama')).toBe('5');
    expect(t.journals.fleetVersion('qwen')).toBe('9');
    expect(t.journals.fleetVersion('other')).toBeUndefined();
  });
});
