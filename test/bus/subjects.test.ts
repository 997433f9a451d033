// Every NATS subject builder for the default root and for other roots, against the subject table
// of docs/nats.md, and the token validation that keeps an id from addressing other subjects
// (`.`, `*`, `>`, whitespace, empty).

import { describe, expect, it } from 'vitest';
import { DEFAULT_ROOT, subjects, validateToken, type Subjects } from '../../src/bus/subjects.ts';

const ID = '5f0c2d1e-8d7b-4c52-9a0e-1b2c3d4e5f60';

/** Each builder, called with one id where it takes one. */
const builders: Array<[keyof Omit<Subjects, 'root'>, (s: Subjects) => string, string]> = [
  ['engineCmd', (s) => s.engineCmd(ID), `engine.${ID}.cmd`],
  ['engineState', (s) => s.engineState(ID), `engine.${ID}.state`],
  ['allEngineStates', (s) => s.allEngineStates(), 'engine.*.state'],
  ['engineNotice', (s) => s.engineNotice(ID), `engine.${ID}.notice`],
  ['allEngineNotices', (s) => s.allEngineNotices(), 'engine.*.notice'],
  ['replicaCmd', (s) => s.replicaCmd('replica-a'), 'replica.replica-a.cmd'],
  ['replicaCancel', (s) => s.replicaCancel('replica-a'), 'replica.replica-a.cancel'],
  ['replicaOutcomes', (s) => s.replicaOutcomes('replica-a'), 'replica.replica-a.outcomes'],
  ['refitRequest', (s) => s.refitRequest(), 'refit.request'],
  ['refitSubmit', (s) => s.refitSubmit(), 'refit.submit'],
  ['refitReport', (s) => s.refitReport('step-42'), 'refit.step-42.report'],
  ['refitEvents', (s) => s.refitEvents('step-42'), 'refit.step-42.events'],
  ['allRefitEvents', (s) => s.allRefitEvents(), 'refit.*.events'],
];

describe('subjects: every builder hangs off the root', () => {
  it('the default root is rl', () => {
    expect(DEFAULT_ROOT).toBe('rl');
    expect(subjects().root).toBe('rl');
  });

  it('covers every builder of Subjects', () => {
    const names = Object.keys(subjects()).filter((k) => k !== 'root');
    expect(names.sort()).toEqual(builders.map(([name]) => name).sort());
  });

  it.each(builders)('%s, default root', (_name, build, tail) => {
    expect(build(subjects())).toBe(`rl.${tail}`);
  });

  it.each(builders)('%s, root team.a', (_name, build, tail) => {
    expect(build(subjects('team.a'))).toBe(`team.a.${tail}`);
  });

  it.each(builders)('%s, root rlgate-ci_7', (_name, build, tail) => {
    expect(build(subjects('rlgate-ci_7'))).toBe(`rlgate-ci_7.${tail}`);
  });
});

describe('subjects: a root that would address other subjects is refused', () => {
  it.each([[''], ['.'], ['rl.'], ['.rl'], ['team..a'], ['rl*'], ['*'], ['>'], ['rl.>'], ['r l'], ['rl\t'], ['rl\n']])('%j', (root) => {
    expect(() => subjects(root)).toThrow(/^invalid subject root for a NATS subject token: /);
  });
});

describe('subjects: ids are validated tokens', () => {
  const s = subjects();
  const bad = [[''], ['a.b'], ['*'], ['>'], ['a*'], ['a>'], ['a b'], [' a'], ['a\t'], ['a\nb'], ['a\u00a0b']];

  it.each(bad)('worker id %j is refused by every engine builder', (id) => {
    for (const build of [s.engineCmd, s.engineState, s.engineNotice]) expect(() => build(id)).toThrow(/^invalid worker id for a NATS subject token: /);
  });

  it.each(bad)('replica id %j is refused by every replica builder', (id) => {
    for (const build of [s.replicaCmd, s.replicaCancel, s.replicaOutcomes]) expect(() => build(id)).toThrow(/^invalid replica id for a NATS subject token: /);
  });

  it.each(bad)('refit id %j is refused by every refit builder', (id) => {
    for (const build of [s.refitReport, s.refitEvents]) expect(() => build(id)).toThrow(/^invalid refit id for a NATS subject token: /);
  });

  it.each([[ID], ['replica-a'], ['step_42'], ['A'], ['a-b_c~d']])('token %j is accepted as it is', (token) => {
    expect(validateToken('worker id', token)).toBe(token);
    expect(s.engineCmd(token)).toBe(`rl.engine.${token}.cmd`);
  });

  it('the error names the kind and quotes the token', () => {
    expect(() => validateToken('refit id', 'a.b')).toThrow('invalid refit id for a NATS subject token: "a.b"');
  });
});
