// The refit progress model (refit-progress.ts) fed the documented refit events
// (docs/refit-events.md), and the text made of it: the per-event lines, the live view and the
// watch table within a width and a height, and the live region's drawing on a stream.

import { describe, expect, it } from 'vitest';
import { FleetWatch, tableLines, transitionLine, type EngineRow } from '../../src/cli/fleet-table.ts';
import { applyRefitEvent, newRefitProgress, stepLabel, tally } from '../../src/cli/refit-progress.ts';
import { eventLine, progressLines } from '../../src/cli/refit-view.ts';
import { LiveRegion } from '../../src/cli/terminal.ts';

const T = '2026-01-02T03:04:05.678Z';
const ev = (type: string, fields: Record<string, unknown> = {}, refit_id = 'r1') => ({ refit_id, type, time: T, ...fields });
const url = (i: number) => `http://10.0.0.${i}:30000`;

/** A disk refit of engines w1 and w2 in which w2's load answers 501. */
function partialRefit(): Array<Record<string, unknown>> {
  const leg = (w: string, i: number, phase: string, extra: Record<string, unknown> = {}) =>
    ev('leg', {
      worker_id: w,
      url: url(i),
      phase,
      step: phase === 'refit' ? 'update_weights_from_disk' : null,
      step_index: 0,
      outcome: 'ok',
      latency_ms: 3,
      ...extra,
    });
  return [
    ev('accepted', { weight_version: '7', source: 'disk', selector: null, targets: ['w1', 'w2'], skipped: [], replica: 'a' }),
    ev('started', { replica: 'b', targets: ['w1', 'w2'], quorum: 1, steps: ['update_weights_from_disk'], verify: false, recovered: null }),
    ev('phase', { phase: 'pause', step: null, step_index: 0, steps: 1, targets: ['w1', 'w2'] }),
    leg('w1', 1, 'pause'),
    leg('w2', 2, 'pause'),
    ev('phase', { phase: 'refit', step: 'update_weights_from_disk', step_index: 0, steps: 1, targets: ['w1', 'w2'] }),
    leg('w2', 2, 'refit', { outcome: 'failed', error: 'upstream_error', status: 501, message: 'HTTP 501' }),
    leg('w1', 1, 'refit'),
    ev('phase', { phase: 'resume', step: null, step_index: 0, steps: 1, targets: ['w1', 'w2'] }),
  ];
}

const report = {
  id: 'r1',
  status: 'partial',
  weight_version: '7',
  total: 2,
  succeeded: 1,
  duration_ms: 40,
  engines: [
    { worker_id: 'w1', url: url(1), outcome: 'ok' },
    { worker_id: 'w2', url: url(2), outcome: 'failed', failed_phase: 'refit', failed_step: 'update_weights_from_disk', error: 'upstream_error', status: 501 },
  ],
  failed: [{ worker_id: 'w2' }],
  skipped: [],
};

describe('refit progress from events', () => {
  it('follows each engine through the phases and keeps the failure that put one out', () => {
    const p = newRefitProgress('r1');
    for (const e of partialRefit()) expect(applyRefitEvent(p, e)).toBe(true);
    expect(p).toMatchObject({ weightVersion: '7', status: 'running', replica: 'b', phase: 'resume', steps: 1, stepNames: ['update_weights_from_disk'] });
    expect([...p.engines.keys()]).toEqual(['w1', 'w2']);
    expect(p.engines.get('w1')).toMatchObject({ url: url(1), phase: 'resume', leg: 'running', failure: null });
    expect(p.engines.get('w2')!.failure).toEqual({
      phase: 'refit',
      step: 'update_weights_from_disk',
      stepIndex: 0,
      error: 'upstream_error',
      status: 501,
      message: 'HTTP 501',
    });
    expect(tally(p)).toEqual({ ok: 0, failed: 1, running: 1, total: 2 });

    applyRefitEvent(p, ev('report', { report }));
    expect(p.status).toBe('partial');
    expect(p.report).toBe(report);
    expect(tally(p)).toEqual({ ok: 1, failed: 1, running: 0, total: 2 });
  });

  it('changes nothing for another refit, an unknown type or a malformed event', () => {
    const p = newRefitProgress('r1');
    expect(applyRefitEvent(p, ev('phase', { phase: 'pause', targets: ['w1'] }, 'r2'))).toBe(false);
    expect(applyRefitEvent(p, ev('checkpoint'))).toBe(false);
    expect(applyRefitEvent(p, ev('leg', { phase: 'pause' }))).toBe(false); // no worker_id
    expect(applyRefitEvent(p, ev('report', { report: 'done' }))).toBe(false);
    expect(applyRefitEvent(p, null)).toBe(false);
    expect(applyRefitEvent(p, 'text')).toBe(false);
    expect(p.engines.size).toBe(0);
    expect(p.status).toBe('waiting');
  });

  it('takes a failure the events missed from the report', () => {
    const p = newRefitProgress('r1');
    applyRefitEvent(p, ev('report', { report }));
    expect(p.engines.get('w2')!.failure).toMatchObject({ phase: 'refit', step: 'update_weights_from_disk', error: 'upstream_error', status: 501 });
    expect(p.engines.get('w1')!.outcome).toBe('ok');
  });

  it.each([
    [['pause', null, 0, 1], 'pause'],
    [['refit', 'update_weights_from_disk', 0, 1], 'refit 1/1 update_weights_from_disk'],
    [['refit', 'update_weights_from_distributed 1/3', 1, 5], 'refit 2/5 update_weights_from_distributed 1/3'],
    [['refit', 'load', null, null], 'refit load'],
    [['verify', null, 0, 5], 'verify'],
    [[null, null, null, null], '-'],
  ] as const)('labels %j as %s', (args, label) => {
    expect(stepLabel(...(args as unknown as [string | null, string | null, number | null, number | null]))).toBe(label);
  });
});

describe('refit progress as text', () => {
  it('one key=value line per event, naming a failed engine, its error, status and message', () => {
    const [accepted, , pause, , , refitPhase, failedLeg] = partialRefit();
    expect(eventLine(accepted!)).toBe('03:04:05.678 refit=r1 event=accepted version=7 source=disk targets=2 skipped=0 replica=a');
    expect(eventLine(pause!)).toBe('03:04:05.678 refit=r1 event=phase phase=pause targets=2');
    expect(eventLine(refitPhase!)).toBe('03:04:05.678 refit=r1 event=phase phase=refit step=update_weights_from_disk step_index=0 steps=1 targets=2');
    expect(eventLine(failedLeg!)).toBe(
      `03:04:05.678 refit=r1 event=leg phase=refit step=update_weights_from_disk step_index=0 engine=${url(2)} outcome=failed error=upstream_error status=501 latency_ms=3 message="HTTP 501"`,
    );
    expect(eventLine(ev('report', { report }))).toBe('03:04:05.678 refit=r1 event=report status=partial version=7 succeeded=1 total=2 duration_ms=40');
  });

  it('the live view: a header, then one line per engine, each within the width', () => {
    const p = newRefitProgress('r1');
    for (const e of partialRefit()) applyRefitEvent(p, e);
    const lines = progressLines(p, { columns: 100, rows: 20 }, 1_234);
    expect(lines[0]).toBe('refit r1 → version 7 · 1.2 s · 0 ok, 1 failed, 1 running of 2 · resume');
    expect(lines[1]).toMatch(new RegExp(`^  ${url(1)}  running  resume$`));
    expect(lines[2]).toBe(`  ${url(2)}  failed   refit 1/1 update_weights_from_disk — upstream_error HTTP 501`);
    const narrow = progressLines(p, { columns: 30, rows: 20 }, 0);
    expect(narrow).toHaveLength(3);
    for (const l of narrow) expect(l.length).toBeLessThanOrEqual(30);
  });

  it('within the height, keeps the failed and running engines and counts the ones not shown', () => {
    const p = newRefitProgress('r1');
    const ids = Array.from({ length: 10 }, (_, i) => `w${i}`);
    applyRefitEvent(p, ev('accepted', { weight_version: '7', targets: ids }));
    applyRefitEvent(p, ev('phase', { phase: 'pause', step: null, targets: ids }));
    for (const id of ids.slice(0, 8)) applyRefitEvent(p, ev('leg', { worker_id: id, url: `http://${id}`, phase: 'pause', outcome: 'ok', latency_ms: 1 }));
    applyRefitEvent(p, ev('leg', { worker_id: 'w9', url: 'http://w9', phase: 'pause', outcome: 'failed', error: 'upstream_timeout', latency_ms: 5 }));
    const lines = progressLines(p, { columns: 80, rows: 4 }, 0);
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatch(/^ {2}w8 +running +pause$/); // not answered yet: its worker id, its URL unknown
    expect(lines[2]).toMatch(/^ {2}http:\/\/w9 +failed +pause — upstream_timeout$/);
    expect(lines[3]).toBe('  … 8 more engines not shown');
  });
});

describe('the watch table', () => {
  const row = (i: number, patch: Partial<EngineRow> = {}): EngineRow => ({
    id: `w${i}`,
    url: url(i),
    state: 'serving',
    control: 'active',
    weight_version: '6',
    version_source: 'engine',
    breaker: 'closed',
    quarantine: null,
    in_flight: i,
    queued: 0,
    error: null,
    time: T,
    owner: 'a',
    ...patch,
  });

  it('names the refit and step touching an engine, in the table and in a transition line', () => {
    const w = new FleetWatch();
    for (const i of [2, 1]) w.engine(row(i));
    for (const e of partialRefit().slice(0, 7)) w.refitEvent(e);
    expect(w.touch('w1')).toEqual({ refitId: 'r1', step: 'refit 1/1 update_weights_from_disk' });
    expect(w.touch('w2')).toEqual({ refitId: 'r1', step: 'refit 1/1 update_weights_from_disk failed upstream_error 501' });
    expect(transitionLine(row(1, { state: 'refitting' }), w.touch('w1'))).toMatch(/ refitting .* owner=a refit=r1 step="refit 1\/1 update_weights_from_disk"$/);
    const lines = tableLines(w, { columns: 200, rows: 10 }, 'HEADER');
    expect(lines[0]).toBe('HEADER');
    expect(lines[1]!.split(/\s{2,}/)).toEqual(['ENGINE', 'STATE', 'CONTROL', 'VERSION', 'BREAKER', 'IN-FLIGHT', 'OWNER', 'REFIT', 'STEP']);
    expect(lines[2]!.split(/\s{2,}/)).toEqual([url(1), 'serving', 'active', '6', 'closed', '1', 'a', 'r1', 'refit 1/1 update_weights_from_disk']);
    w.refitEvent(ev('report', { report }));
    expect(w.touch('w1')).toBeNull();
  });

  it('an older view of an engine does not overwrite a newer one, but its owner is kept', () => {
    const w = new FleetWatch();
    w.engine(row(1, { state: 'paused', time: '2026-01-02T03:04:06.000Z', owner: undefined }));
    w.engine(row(1, { state: 'serving', owner: 'b' }));
    expect(w.engines.get('w1')).toMatchObject({ state: 'paused', owner: 'b' });
  });

  it('fits the height, with a count of the rows not shown', () => {
    const w = new FleetWatch();
    for (let i = 0; i < 50; i++) w.engine(row(i));
    const lines = tableLines(w, { columns: 60, rows: 8 }, 'HEADER');
    expect(lines).toHaveLength(8);
    expect(lines.at(-1)).toBe('… 45 more engines not shown');
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(60);
  });
});

describe('the live region', () => {
  function sink(columns: number, rows: number) {
    const writes: string[] = [];
    return { writes, stream: { isTTY: true, columns, rows, write: (s: string) => writes.push(s) > 0 } };
  }

  it('draws in place: one write per frame, cut to the size, nothing when the frame is unchanged', () => {
    const { writes, stream } = sink(10, 4);
    let lines = ['first line is long', 'b', 'c', 'd', 'e'];
    const region = new LiveRegion(stream, () => lines);
    region.flush();
    expect(writes).toHaveLength(1);
    // 3 rows (one row kept free), 9 columns (one kept free), each line cleared to its end.
    expect(writes[0]).toBe('\x1b[?25l\rfirst li…\x1b[K\nb\x1b[K\nc\x1b[K\x1b[J');
    region.flush();
    expect(writes).toHaveLength(1);
    lines = ['x'];
    region.flush();
    expect(writes[1]).toBe('\x1b[?25l\r\x1b[2Ax\x1b[K\x1b[J');
    region.print('note');
    expect(writes[2]).toBe('\x1b[?25l\rnote\x1b[K\nx\x1b[K\x1b[J');
    region.close();
    expect(writes.at(-1)).toBe('\n\x1b[?25h');
  });
});
