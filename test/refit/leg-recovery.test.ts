// The pure rules for a load whose answer was lost with the replica that made the call: landed when
// the engine reports the target, sent again only when the step is one engine's own repeatable
// load, otherwise failed with what the engine holds; and which verify failures are a mismatch.

import { describe, expect, it } from 'vitest';
import type { RefitStepPlan } from '../../actors/coordinator.ts';
import { answerLost, lostAnswerVerdict, repeatable, reportedVersion, setsVersion, versionMismatch } from '../../src/refit/leg-recovery.ts';
import type { ControlOutcome } from '../../src/wire/control-call.ts';

const lost: ControlOutcome = {
  kind: 'unreachable',
  code: 'owner_lost',
  latencyMs: 2_000,
  message: 'upstream `http://e:1`: gateway replica `a`, which ran this call, died before answering; the call may have run',
};
const info = (body: unknown, status = 200): ControlOutcome => ({ kind: 'answer', status, latencyMs: 3, body, truncated: false });
const disk: RefitStepPlan = { name: 'update_weights_from_disk', runOn: 'remaining', collective: false } as RefitStepPlan;
const tensor: RefitStepPlan = { name: 'update_weights_from_tensor', runOn: 'remaining', collective: false } as RefitStepPlan;
const chunk: RefitStepPlan = { name: 'chunk 1/2', runOn: 'remaining', collective: true } as RefitStepPlan;
const destroy: RefitStepPlan = { name: 'destroy_weights_update_group', runOn: 'joined', collective: false } as RefitStepPlan;

describe('leg recovery', () => {
  it('only an owner_lost outcome is a lost answer (a refusal was never sent, a timeout was answered by the engine side)', () => {
    expect(answerLost(lost)).toBe(true);
    expect(answerLost({ kind: 'unreachable', code: 'bus_unavailable', latencyMs: 0, message: 'not called' })).toBe(false);
    expect(answerLost({ kind: 'timeout', latencyMs: 5, message: 't' })).toBe(false);
    expect(answerLost(info({}))).toBe(false);
  });

  it('a single disk or tensor load is repeatable; a distributed transfer and its steps are not', () => {
    expect(repeatable([disk], 0)).toBe(true);
    expect(repeatable([tensor], 0)).toBe(true);
    expect(repeatable([chunk], 0)).toBe(false);
    expect(repeatable([chunk, destroy], 1)).toBe(false);
    expect(repeatable([disk], 1)).toBe(false);
  });

  it('reads the version from model_info as SGLang reports it (text or number, trimmed)', () => {
    expect(reportedVersion(info({ weight_version: ' 7 ' }))).toBe('7');
    expect(reportedVersion(info({ weight_version: 7 }))).toBe('7');
    expect(reportedVersion(info({}))).toBeUndefined();
    expect(reportedVersion(info({ weight_version: '7' }, 500))).toBeUndefined();
    expect(reportedVersion({ kind: 'timeout', latencyMs: 1, message: 't' })).toBeUndefined();
  });

  it('landed when the engine holds the target, whatever the step', () => {
    expect(lostAnswerVerdict(lost, info({ weight_version: '7' }), '7', false)).toEqual({ kind: 'landed' });
    expect(lostAnswerVerdict(lost, info({ weight_version: '07' }), '7', true).kind).toBe('landed'); // numeric comparison
  });

  it('sent again when it did not land (or cannot be read) and the step is repeatable', () => {
    expect(lostAnswerVerdict(lost, info({ weight_version: '6' }), '7', true)).toEqual({ kind: 'repeat' });
    expect(lostAnswerVerdict(lost, { kind: 'unreachable', latencyMs: 0, message: 'down' }, '7', true)).toEqual({ kind: 'repeat' });
  });

  it('failed with what the engine holds when the step cannot be repeated alone', () => {
    const v = lostAnswerVerdict(lost, info({ weight_version: '6' }), '7', false);
    expect(v.kind).toBe('failed');
    if (v.kind !== 'failed') return;
    expect(v.result.ok).toBe(false);
    expect(v.result.error).toBe('upstream_unreachable');
    expect(v.result.message).toContain('it holds weight_version "6", not "7"');
    expect(v.result.message).toContain('died before answering');
    const unread = lostAnswerVerdict(lost, { kind: 'timeout', latencyMs: 9, message: 'timed out after 5s' }, '7', false);
    expect(unread.kind === 'failed' && unread.result.message).toContain('could not be read (timed out after 5s)');
  });

  it('the step that sets the version is the last load: a disk load, the last chunk; not the join, an earlier chunk, a read-back or the teardown', () => {
    const join = { name: 'init_weights_update_group', runOn: 'remaining', collective: true } as RefitStepPlan;
    const c = (i: number) => ({ name: `update_weights_from_distributed ${i}/2`, runOn: 'remaining', collective: true }) as RefitStepPlan;
    const readBack = { name: 'get_weights_by_name w', runOn: 'remaining' } as RefitStepPlan;
    const steps = [join, c(1), c(2), readBack, destroy];
    expect(steps.map((_, i) => setsVersion(steps, i))).toEqual([false, false, true, false, false]);
    expect(setsVersion([disk], 0)).toBe(true);
    expect(setsVersion([join], 0)).toBe(false);
  });

  it('a lost step that does not set the version never counts as landed, even on an engine that already held the target', () => {
    const v = lostAnswerVerdict(lost, info({ weight_version: '7' }), '7', false, false);
    expect(v.kind).toBe('failed');
    expect(v.kind === 'failed' && v.result.message).toContain('it holds weight_version "7" (this step does not set the version)');
    expect(lostAnswerVerdict(lost, info({ weight_version: '7' }), '7', false, true)).toEqual({ kind: 'landed' });
  });

  it('a verify failure is a version mismatch only when the engine answered 2xx', () => {
    expect(versionMismatch({ ok: false, error: 'verify_failed', status: 200, message: 'engine reports weight_version "6"', latencyMs: 1 })).toBe(true);
    expect(versionMismatch({ ok: false, error: 'verify_failed', status: 500, latencyMs: 1 })).toBe(false);
    expect(versionMismatch({ ok: false, error: 'upstream_timeout', latencyMs: 1 })).toBe(false);
    expect(versionMismatch({ ok: true, status: 200, latencyMs: 1 })).toBe(false);
  });
});
