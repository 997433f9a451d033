// The refit's pure verdict rules: what an engine's answer comes to as a leg (2xx and not
// `success: false`, the values a read-back must show, the version a check must report), the
// quorum a request asks for, and which engines a finished refit quarantines or lets out.

import { describe, expect, it } from 'vitest';
import type { CoordinatorContext } from '../../actors/coordinator.ts';
import type { ControlOutcome } from '../../src/wire/control-call.ts';
import type { EngineRefitRecord } from '../../src/wire/refit-phase.ts';
import { parseRefitRequest } from '../../src/refit/request.ts';
import { legResult, quarantineAfter, quorumOf } from '../../src/refit/verdicts.ts';

const answer = (body: unknown, status = 200): ControlOutcome => ({ kind: 'answer', status, latencyMs: 4, body, truncated: false });

describe('legResult', () => {
  it.each([
    ['a timeout', { kind: 'timeout', latencyMs: 9, message: 'slow' }, 'upstream_timeout'],
    ['an engine nobody reached', { kind: 'unreachable', latencyMs: 1, message: 'refused' }, 'upstream_unreachable'],
    ['a call the bus could not carry', { kind: 'unreachable', code: 'bus_unavailable', latencyMs: 0, message: 'no bus' }, 'bus_unavailable'],
    ['an engine without a control endpoint', { kind: 'no_control_endpoint', latencyMs: 0, message: 'none', connectionMode: 'grpc' }, 'no_control_endpoint'],
  ] as Array<[string, ControlOutcome, string]>)('%s fails as %s, with its message and time', (_name, o, error) => {
    expect(legResult('pause', o, '7')).toEqual({ ok: false, error, message: (o as { message: string }).message, latencyMs: o.latencyMs });
  });

  it('a 2xx passes; success: false is the engine refusing', () => {
    expect(legResult('pause', answer({ success: true }), '7')).toEqual({ ok: true, status: 200, latencyMs: 4 });
    expect(legResult('refit', answer('plain text'), '7')).toEqual({ ok: true, status: 200, latencyMs: 4 });
    expect(legResult('refit', answer({ success: false, message: 'no such file' }), '7')).toMatchObject({
      ok: false,
      error: 'engine_refused',
      status: 200,
      message: 'no such file',
    });
    expect(legResult('refit', answer({ success: false }), '7')).toMatchObject({ error: 'engine_refused', message: 'engine answered success: false' });
  });

  it("another status is an upstream_error naming it (and the body's message)", () => {
    expect(legResult('refit', answer({ message: 'not implemented' }, 501), '7')).toMatchObject({
      ok: false,
      error: 'upstream_error',
      status: 501,
      message: 'HTTP 501: not implemented',
    });
    expect(legResult('resume', answer(null, 503), '7')).toMatchObject({ error: 'upstream_error', message: 'HTTP 503' });
  });

  it('a read-back must show the values the trainer sent, up to float rounding; one that cannot be read is verify_failed', () => {
    expect(legResult('refit', answer([[0.5, 0.25000001], [1]]), '7', [0.5, 0.25]).ok).toBe(true);
    expect(legResult('refit', answer([null, 2]), '7', [null, 2]).ok).toBe(true);
    expect(legResult('refit', answer([0.5, 0.3]), '7', [0.5, 0.25])).toMatchObject({ ok: false, error: 'verify_failed', status: 200 });
    expect(legResult('refit', answer([0.5]), '7', [0.5, 0.25])).toMatchObject({ error: 'verify_failed' });
    expect(legResult('refit', answer({ values: [0.5] }), '7', [0.5])).toMatchObject({ error: 'verify_failed' });
    expect(legResult('refit', answer({ message: 'unknown parameter' }, 400), '7', [0.5])).toMatchObject({
      error: 'verify_failed',
      status: 400,
      message: 'HTTP 400: unknown parameter',
    });
  });

  it('the version check needs the target version, as text or number, trimmed, compared as versions', () => {
    expect(legResult('verify', answer({ weight_version: ' 7 ' }), '7').ok).toBe(true);
    expect(legResult('verify', answer({ weight_version: 7 }), '7').ok).toBe(true);
    expect(legResult('verify', answer({ weight_version: '07' }), '7').ok).toBe(true);
    expect(legResult('verify', answer({ weight_version: '6' }), '7')).toMatchObject({
      ok: false,
      error: 'verify_failed',
      status: 200,
      message: 'engine reports weight_version "6", expected "7"',
    });
    expect(legResult('verify', answer({}), '7')).toMatchObject({ error: 'verify_failed', message: 'engine reports weight_version null, expected "7"' });
    // Outside the version check, the version an answer carries is not judged.
    expect(legResult('refit', answer({ weight_version: '6' }), '7').ok).toBe(true);
  });
});

describe('quorumOf', () => {
  const disk = { weight_version: '1', source: { kind: 'disk', model_path: '/m' } };
  const distributed = {
    weight_version: '1',
    source: {
      kind: 'distributed',
      master_address: '127.0.0.1',
      master_port: 29500,
      group_name: 'g',
      chunks: [{ names: ['w'], dtypes: ['bfloat16'], shapes: [[1]] }],
    },
  };
  it.each([
    ['disk, no quorum', disk, 5, 1],
    ['distributed, no quorum', distributed, 5, 5],
    ['min_engines', { ...disk, quorum: { min_engines: 3 } }, 5, 3],
    ['min_fraction rounds up', { ...disk, quorum: { min_fraction: 0.5 } }, 5, 3],
    ['the larger of the two', { ...disk, quorum: { min_engines: 2, min_fraction: 0.8 } }, 5, 4],
    ['never above the targets', { ...disk, quorum: { min_engines: 9 } }, 5, 5],
    ['a small fraction still needs one', { ...disk, quorum: { min_fraction: 0.01 } }, 5, 1],
  ] as const)('%s → %i of %i', (_name, body, n, want) => {
    expect(quorumOf(parseRefitRequest(structuredClone(body)), n)).toBe(want);
  });
});

describe('quarantineAfter', () => {
  const rec = (r: Partial<EngineRefitRecord> = {}): EngineRefitRecord => ({ phases: { pause: 1, refit: 2, verify: 1, resume: 1 }, ...r });
  const result = (engines: Record<string, EngineRefitRecord>, abortReason?: CoordinatorContext['abortReason']) => ({ engines, abortReason });
  const none = new Set<string>();

  it('an engine that failed in a refit step, its version check, or was cut after the grace is held out, with its error', () => {
    const r = result({
      load: rec({ failedIn: 'refit', error: 'upstream_error' }),
      transfer: rec({ failedIn: 'refit', error: 'transfer_aborted' }),
      check: rec({ failedIn: 'verify', error: 'verify_failed' }),
      late: rec({ phases: { pause: 500 }, failedIn: 'pause', error: 'cut_after_grace' }),
      noCode: rec({ failedIn: 'refit' }),
    });
    expect([...quarantineAfter(r, ['load', 'transfer', 'check', 'late', 'noCode'], { verify: true, reloaded: none })]).toEqual([
      ['load', 'upstream_error'],
      ['transfer', 'transfer_aborted'],
      ['check', 'verify_failed'],
      ['late', 'cut_after_grace'],
      ['noCode', 'refit_failed'],
    ]);
  });

  it('an engine whose version check passed is let out; one that failed elsewhere, or was not checked, is left as it is', () => {
    const r = result({
      good: rec(),
      pause: rec({ phases: { pause: 1 }, failedIn: 'pause', error: 'upstream_timeout' }),
      resume: rec({ failedIn: 'resume', error: 'upstream_error' }),
      unchecked: rec({ phases: { pause: 1, refit: 2, resume: 1 } }),
    });
    expect([...quarantineAfter(r, ['good', 'pause', 'resume', 'unchecked'], { verify: true, reloaded: none })]).toEqual([['good', null]]);
  });

  it('without a version check, or with the refit called off, nobody is let out', () => {
    expect(quarantineAfter(result({ good: rec() }), ['good'], { verify: false, reloaded: none }).size).toBe(0);
    expect(quarantineAfter(result({ good: rec() }, 'quorum_not_met'), ['good'], { verify: true, reloaded: none }).size).toBe(0);
  });

  it('an engine loaded again during the version check that then failed is held out as verify_failed', () => {
    const r = result({ again: rec({ failedIn: 'verify', error: 'phase_deadline_exceeded' }), fine: rec() });
    expect([...quarantineAfter(r, ['again', 'fine'], { verify: true, reloaded: new Set(['again', 'fine']) })]).toEqual([
      ['again', 'verify_failed'],
      ['fine', null],
    ]);
  });

  it('only targets are judged, in their order', () => {
    const r = result({ a: rec({ failedIn: 'refit', error: 'x' }), b: rec({ failedIn: 'refit', error: 'y' }) });
    expect([...quarantineAfter(r, ['b'], { verify: true, reloaded: none }).keys()]).toEqual(['b']);
  });
});
