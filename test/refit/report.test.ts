// buildReport and reportStatus as tables: the report's status (succeeded / partial / failed) and
// HTTP status (200 / 207) for each way a refit ends, the counts, each engine's row (failed phase,
// step, error, per-phase times, rank offset, breaker, state and version after the refit), asleep
// and skipped engines, and the refit called off by the quorum (docs/rl-control-plane.md, Report).
// Engine states come from a real FleetView over a stand-in host that serves shared records.

import { describe, expect, it } from 'vitest';
import type { CoordinatorContext } from '../../actors/coordinator.ts';
import type { EngineRefitRecord as EngineRecord } from '../../src/wire/refit-phase.ts';
import type { EngineHost } from '../../src/fleet/engine-host.ts';
import type { EngineRecord as SharedRecord } from '../../src/wire/engine-state.ts';
import { FleetView } from '../../src/fleet/fleet-view.ts';
import { Registry } from '../../src/fleet/registry.ts';
import type { Worker } from '../../src/fleet/worker.ts';
import { buildReport, reportStatus } from '../../src/refit/report.ts';
import type { RefitReport, SkippedEngine } from '../../src/wire/refit-report.ts';
import type { RefitRequest } from '../../src/wire/refit-request.ts';

const registry = new Registry('replica-a');
const [e1, e2, e3, sleeper] = [30001, 30002, 30003, 30004].map((port) => registry.register({ url: `http://127.0.0.1:${port}` }).worker) as [
  Worker,
  Worker,
  Worker,
  Worker,
];
const TARGETS = [e1, e2, e3];

// What each engine's owner last published: the report shows it as the state after the refit.
const records = new Map<string, SharedRecord>(
  [e1, e2, e3, sleeper].map((w, i) => [
    w.id,
    {
      id: w.id,
      url: w.url,
      owner: 'replica-b',
      state: w === sleeper ? 'asleep' : 'serving',
      control: w === sleeper ? 'asleep' : 'active',
      weight_version: i === 1 ? '7' : '8',
      version_source: 'passthrough',
      breaker: i === 2 ? 'open' : 'closed',
      quarantine: null,
      in_flight: 0,
      queued: 0,
      error: null,
      time: '2026-01-01T00:00:00.000Z',
    },
  ]),
);
const host = { snapshot: () => undefined, remote: (id: string) => records.get(id), load: () => 0 } as unknown as EngineHost;
const view = new FleetView({ registry, host });

const DISK: RefitRequest = { weight_version: '8', source: { kind: 'disk', model_path: '/models/step-8' } };
const DISTRIBUTED: RefitRequest = {
  weight_version: '8',
  source: { kind: 'distributed', master_address: '10.0.0.1', master_port: 29500, chunks: [{ names: ['w'], dtypes: ['bfloat16'], shapes: [[2]] }] },
};
const ALL_PHASES = { pause: 10, refit: 20, verify: 5, resume: 3 };
const okRec = (): EngineRecord => ({ phases: { ...ALL_PHASES } });
const ids = TARGETS.map((w) => w.id);

/** A coordinator result where every target paused and nothing failed, then the overrides. */
function result(over: Partial<CoordinatorContext> = {}, engines: Record<string, EngineRecord> = {}): CoordinatorContext {
  return {
    refitId: 'r1',
    targets: ids,
    steps: [{ name: 'update_weights_from_disk', runOn: 'remaining' }],
    verify: true,
    quorum: 1,
    keepPaused: [],
    deadlines: { pauseMs: 1_000, refitMs: 3_000, verifyMs: 1_000, resumeMs: 1_000 },
    graceMs: 500,
    engines: { ...Object.fromEntries(ids.map((id) => [id, okRec()])), ...engines },
    paused: ids,
    resumed: ids,
    stepIndex: 0,
    phase: 'resume',
    pending: [],
    ...over,
  };
}

const SKIPPED: SkippedEngine[] = [
  { worker_id: 'w-gone', url: 'http://127.0.0.1:30009', reason: 'unreachable', message: 'the engine did not answer its last probes or its discovery' },
];

function report(res: CoordinatorContext, more: Partial<Parameters<typeof buildReport>[0]> = {}): RefitReport {
  return buildReport({
    id: 'r1',
    request: DISK,
    selector: 'role=actor',
    targets: TARGETS,
    asleep: [],
    result: res,
    phaseMs: { pause: 11, refit: 22, verify: 6, resume: 4 },
    startedAt: new Date('2026-01-01T00:00:00.000Z'),
    finishedAt: new Date('2026-01-01T00:00:01.250Z'),
    view,
    skipped: [],
    ...more,
  });
}

const refitFailure: EngineRecord = {
  failedIn: 'refit',
  step: 'update_weights_from_disk',
  error: 'upstream_error',
  status: 500,
  message: 'HTTP 500',
  phases: { pause: 10, refit: 20, resume: 3 },
};
const pauseFailure: EngineRecord = { failedIn: 'pause', error: 'upstream_unreachable', message: 'connect ECONNREFUSED', phases: { resume: 3 } };

describe('buildReport: status, counts and the HTTP status', () => {
  it.each<[string, RefitReport, RefitReport['status'], number, number, 200 | 207]>([
    ['every engine refitted', report(result()), 'succeeded', 3, 3, 200],
    ['every engine refitted, some skipped before the pause', report(result(), { skipped: SKIPPED }), 'succeeded', 3, 3, 200],
    ['one load failed', report(result({}, { [e2.id]: refitFailure })), 'partial', 3, 2, 207],
    ['one pause failed (quorum 1)', report(result({ paused: [e1.id, e2.id] }, { [e3.id]: pauseFailure })), 'partial', 3, 2, 207],
    [
      'one verify failed',
      report(result({}, { [e1.id]: { failedIn: 'verify', error: 'verify_failed', status: 200, message: 'x', phases: {} } })),
      'partial',
      3,
      2,
      207,
    ],
    [
      'one resume failed',
      report(result({ resumed: [e1.id, e2.id] }, { [e3.id]: { failedIn: 'resume', error: 'phase_deadline_exceeded', message: 'x', phases: {} } })),
      'partial',
      3,
      2,
      207,
    ],
    ['every load failed', report(result({}, Object.fromEntries(ids.map((id) => [id, refitFailure])))), 'failed', 3, 0, 207],
    [
      'called off by the quorum',
      report(result({ quorum: 3, paused: [e1.id, e2.id], abortReason: 'quorum_not_met' }, { [e3.id]: pauseFailure })),
      'failed',
      3,
      0,
      207,
    ],
    [
      'no target paused',
      report(result({ paused: [], abortReason: 'no_target_paused' }, Object.fromEntries(ids.map((id) => [id, pauseFailure])))),
      'failed',
      3,
      0,
      207,
    ],
    ['taken over before its refit phase', report(result({ abortReason: 'gateway_failover' })), 'failed', 3, 0, 207],
    ['every target refitted, one selected engine asleep', report(result(), { asleep: [sleeper] }), 'partial', 4, 3, 207],
  ])('%s → %s (total %i, succeeded %i), HTTP %i', (_name, r, status, total, succeeded, http) => {
    expect(r.status).toBe(status);
    expect(r.total).toBe(total);
    expect(r.succeeded).toBe(succeeded);
    expect(r.failed).toEqual(r.engines.filter((e) => e.outcome === 'failed'));
    expect(r.failed).toHaveLength(total - succeeded);
    expect(reportStatus(r)).toBe(http);
  });

  it('carries the request, the times and the phases the runner measured', () => {
    const r = report(result());
    expect(r).toMatchObject({
      id: 'r1',
      weight_version: '8',
      source: 'disk',
      selector: 'role=actor',
      started_at: '2026-01-01T00:00:00.000Z',
      finished_at: '2026-01-01T00:00:01.250Z',
      duration_ms: 1_250,
      phases: { pause: 11, refit: 22, verify: 6, resume: 4 },
      quorum: 1,
      skipped: [],
    });
    expect(r).not.toHaveProperty('aborted');
    expect(r).not.toHaveProperty('world_size');
  });

  it('skipped engines are listed as given and are not among the engines', () => {
    const r = report(result(), { skipped: SKIPPED });
    expect(r.skipped).toEqual(SKIPPED);
    expect(r.engines.map((e) => e.worker_id)).toEqual(ids);
  });
});

describe('buildReport: each engine row', () => {
  it("an ok engine: its phase times, its breaker and state from the fleet view, and the refit's version (the view of another replica's engine may not have heard it yet)", () => {
    const r = report(result());
    expect(r.engines).toEqual([
      { worker_id: e1.id, url: e1.url, outcome: 'ok', phases: ALL_PHASES, breaker: 'closed', state: 'serving', weight_version: '8' },
      { worker_id: e2.id, url: e2.url, outcome: 'ok', phases: ALL_PHASES, breaker: 'closed', state: 'serving', weight_version: '8' },
      { worker_id: e3.id, url: e3.url, outcome: 'ok', phases: ALL_PHASES, breaker: 'open', state: 'serving', weight_version: '8' },
    ]);
  });

  it('a failed engine: the version the fleet view holds for it', () => {
    const r = report(result({}, { [e2.id]: refitFailure }));
    expect(r.engines.find((e) => e.worker_id === e2.id)).toMatchObject({ outcome: 'failed', weight_version: '7' });
  });

  it.each<[string, EngineRecord, Record<string, unknown>]>([
    [
      'a failed load',
      refitFailure,
      {
        failed_phase: 'refit',
        failed_step: 'update_weights_from_disk',
        error: 'upstream_error',
        status: 500,
        message: 'HTTP 500',
        phases: { pause: 10, refit: 20, verify: null, resume: 3 },
      },
    ],
    [
      'a failed verify (no step)',
      { failedIn: 'verify', error: 'verify_failed', status: 200, message: 'engine reports weight_version "7", expected "8"', phases: { verify: 4 } },
      { failed_phase: 'verify', error: 'verify_failed', status: 200 },
    ],
    [
      'a stalled pause (no status: the engine never answered)',
      { failedIn: 'pause', error: 'phase_deadline_exceeded', message: 'engine did not finish the pause phase within 1000 ms', phases: { pause: 1_000 } },
      { failed_phase: 'pause', error: 'phase_deadline_exceeded', phases: { pause: 1_000, refit: null, verify: null, resume: null } },
    ],
    [
      'a cut after the grace',
      { failedIn: 'pause', error: 'cut_after_grace', message: 'cut', phases: { pause: 500 } },
      { failed_phase: 'pause', error: 'cut_after_grace' },
    ],
    [
      'an abandoned transfer',
      { failedIn: 'refit', step: 'update_weights_from_distributed 1/2', error: 'transfer_aborted', message: 'abandoned', phases: {} },
      { failed_phase: 'refit', failed_step: 'update_weights_from_distributed 1/2', error: 'transfer_aborted' },
    ],
  ])('%s: failed with the phase, step, error, status and message the coordinator recorded', (_name, rec, row) => {
    const r = report(result({}, { [e2.id]: rec }));
    const e = r.engines.find((x) => x.worker_id === e2.id)!;
    expect(e).toMatchObject({ outcome: 'failed', message: rec.message, ...row });
    if (rec.status === undefined) expect(e).not.toHaveProperty('status');
    if (rec.step === undefined) expect(e).not.toHaveProperty('failed_step');
  });

  it('called off by the quorum: engines that paused fine are failed quorum_not_met; one whose pause failed keeps its own error', () => {
    const r = report(result({ quorum: 3, paused: [e1.id, e2.id], abortReason: 'quorum_not_met' }, { [e3.id]: pauseFailure }));
    expect(r.aborted).toBe('quorum_not_met');
    for (const id of [e1.id, e2.id]) {
      expect(r.engines.find((e) => e.worker_id === id)).toMatchObject({
        outcome: 'failed',
        error: 'quorum_not_met',
        message: 'only 2 of the 3 engines the quorum needs could be paused; no engine was refitted',
      });
      expect(r.engines.find((e) => e.worker_id === id)).not.toHaveProperty('failed_phase');
    }
    expect(r.engines.find((e) => e.worker_id === e3.id)).toMatchObject({ outcome: 'failed', failed_phase: 'pause', error: 'upstream_unreachable' });
  });

  it.each([
    ['no_target_paused', 'engine was not refitted'],
    ['gateway_failover', 'the replica running the refit died before the refit phase; the replica that took it over resumed the engines without refitting them'],
  ] as const)('aborted %s: engines without a failure of their own carry the abort reason', (reason, message) => {
    const r = report(result({ abortReason: reason }));
    expect(r.aborted).toBe(reason);
    for (const e of r.engines) expect(e).toMatchObject({ outcome: 'failed', error: reason, message });
  });

  it('an engine that never passed the pause and has no failure recorded is not_refitted', () => {
    const r = report(result({ paused: [e1.id, e2.id] }));
    expect(r.engines.find((e) => e.worker_id === e3.id)).toMatchObject({ outcome: 'failed', error: 'not_refitted', message: 'engine was not refitted' });
    expect(r.status).toBe('partial');
  });

  it('an engine kept paused (not resumed by the refit) is ok, with no resume time', () => {
    const r = report(result({ keepPaused: [e2.id], resumed: [e1.id, e3.id] }, { [e2.id]: { phases: { pause: 10, refit: 20, verify: 5 } } }));
    expect(r.engines.find((e) => e.worker_id === e2.id)).toMatchObject({ outcome: 'ok', phases: { pause: 10, refit: 20, verify: 5, resume: null } });
    expect(r.status).toBe('succeeded');
  });

  it('an asleep engine is a failed pause row, engine_asleep, with no phase times, after the targets', () => {
    const r = report(result(), { asleep: [sleeper] });
    expect(r.engines.at(-1)).toEqual({
      worker_id: sleeper.id,
      url: sleeper.url,
      outcome: 'failed',
      failed_phase: 'pause',
      error: 'engine_asleep',
      message: 'the engine is asleep (its memory is released): wake it up, then refit it',
      phases: { pause: null, refit: null, verify: null, resume: null },
      breaker: 'closed',
      state: 'asleep',
      weight_version: '8',
    });
  });

  it('a distributed refit adds world_size and each engine its rank_offset', () => {
    const group = { worldSize: 4, rankOffsets: { [e1.id]: 1, [e2.id]: 2, [e3.id]: 3 } };
    const r = report(result(), { request: DISTRIBUTED, group });
    expect(r.source).toBe('distributed');
    expect(r.world_size).toBe(4);
    expect(r.engines.map((e) => e.rank_offset)).toEqual([1, 2, 3]);
    expect(report(result())).not.toHaveProperty('engines.0.rank_offset');
  });
});
