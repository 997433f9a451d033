import { describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { admit, formatVersionPolicy, parseVersionPolicy, policyFromHeader } from '../../src/fleet/version-policy.ts';
import type { Candidate, VersionPolicy } from '../../src/fleet/version-policy.ts';

describe('parseVersionPolicy', () => {
  it.each<[string, VersionPolicy]>([
    ['any', { kind: 'any' }],
    ['latest-only', { kind: 'latest-only' }],
    ['min-version:42', { kind: 'min-version', version: '42' }],
    ['min-version:step-3', { kind: 'min-version', version: 'step-3' }],
    ['max-staleness:2', { kind: 'max-staleness', k: 2n }],
    ['max-staleness:0', { kind: 'max-staleness', k: 0n }],
    ['max-staleness:18446744073709551615', { kind: 'max-staleness', k: 18446744073709551615n }],
  ])('parses %j and round-trips', (text, policy) => {
    expect(parseVersionPolicy(text)).toEqual(policy);
    expect(formatVersionPolicy(policy)).toBe(text);
    expect(parseVersionPolicy(formatVersionPolicy(policy))).toEqual(policy);
  });

  it.each([
    '',
    'Any',
    'latest',
    'newest',
    'freshest',
    'min-version:',
    'min-version:a b',
    'min-version:a\u3000b',
    'max-staleness:x',
    'max-staleness:-1',
    'max-staleness:',
    'max-staleness:1.5',
    'max-staleness:18446744073709551616',
    ' any',
    'LATEST-ONLY',
  ])('rejects %j with invalid_version_policy', (text) => {
    const err = gatewayError(() => parseVersionPolicy(text));
    expect(err.code).toBe('invalid_version_policy');
    expect(err.status).toBe(400);
    // The input is echoed between backticks (SMG's message shape).
    expect(err.message.startsWith(`invalid version policy \`${text}\`: `)).toBe(true);
  });

  it('trims header values first', () => {
    expect(policyFromHeader(' latest-only ')).toEqual({ kind: 'latest-only' });
    expect(gatewayError(() => policyFromHeader(' bogus ')).message.startsWith('invalid version policy `bogus`')).toBe(true);
  });
});

describe('admit', () => {
  const any: VersionPolicy = { kind: 'any' };
  const latest: VersionPolicy = { kind: 'latest-only' };
  const stale1: VersionPolicy = { kind: 'max-staleness', k: 1n };
  const min2: VersionPolicy = { kind: 'min-version', version: '2' };
  const active = (version?: string): Candidate => ({ control: 'active', version });

  it.each<[string, VersionPolicy, Candidate, string | undefined, string | null]>([
    // Paused and asleep engines are dropped under every policy, versioned or not.
    ['any paused', any, { control: 'paused', version: '3' }, '3', 'paused'],
    ['any asleep', any, { control: 'asleep', version: undefined }, undefined, 'asleep'],
    ['latest paused', latest, { control: 'paused', version: '3' }, '3', 'paused'],
    ['staleness asleep', stale1, { control: 'asleep', version: '3' }, '3', 'asleep'],
    ['min asleep', min2, { control: 'asleep', version: '9' }, '9', 'asleep'],
    // any
    ['any, no max', any, active(), undefined, null],
    ['any, unversioned', any, active(), '3', null],
    ['any, versioned', any, active('1'), '3', null],
    // latest-only
    ['latest, no max, unversioned', latest, active(), undefined, null],
    ['latest, unversioned', latest, active(), '3', 'unversioned'],
    ['latest, at max', latest, active('3'), '3', null],
    ['latest, at max by value', latest, active('003'), '3', null],
    ['latest, behind', latest, active('2'), '3', 'stale'],
    ['latest, text at max', latest, active('step-9'), 'step-9', null],
    ['latest, text behind', latest, active('step-10'), 'step-9', 'stale'],
    // max-staleness:1
    ['staleness, no max', stale1, active(), undefined, null],
    ['staleness, unversioned', stale1, active(), '3', 'unversioned'],
    ['staleness, at max', stale1, active('3'), '3', null],
    ['staleness, one behind', stale1, active('2'), '3', null],
    ['staleness, two behind', stale1, active('1'), '3', 'stale'],
    ['staleness, ahead of max', stale1, active('5'), '3', null],
    ['staleness, text candidate', stale1, active('step-3'), '3', 'stale'],
    ['staleness, text max', stale1, active('3'), 'step-3', 'stale'],
    ['staleness, text equal to text max', stale1, active('step-3'), 'step-3', 'stale'],
    // min-version:2 (the floor applies with or without a fleet maximum)
    ['min, no max, unversioned', min2, active(), undefined, 'unversioned'],
    ['min, no max, above', min2, active('3'), undefined, null],
    ['min, no max, below', min2, active('1'), undefined, 'stale'],
    ['min, unversioned', min2, active(), '3', 'unversioned'],
    ['min, equal', min2, active('2'), '3', null],
    ['min, equal by value', min2, active('02'), '3', null],
    ['min, above', min2, active('10'), '10', null],
    ['min, below', min2, active('1'), '3', 'stale'],
  ])('%s', (_name, policy, candidate, fleetMax, expected) => {
    expect(admit(policy, candidate, fleetMax)).toBe(expected);
  });

  it('keeps max-staleness:0 only at the maximum', () => {
    const zero: VersionPolicy = { kind: 'max-staleness', k: 0n };
    expect(admit(zero, active('9'), '9')).toBeNull();
    expect(admit(zero, active('8'), '9')).toBe('stale');
  });

  it('measures staleness exactly past 2^53', () => {
    const k1: VersionPolicy = { kind: 'max-staleness', k: 1n };
    expect(admit(k1, active('18446744073709551614'), '18446744073709551615')).toBeNull();
    expect(admit(k1, active('18446744073709551613'), '18446744073709551615')).toBe('stale');
  });

  it('min-version:2 over unversioned, 1 and 3 keeps only 3', () => {
    const kept = [active(), active('1'), active('3')].filter((c) => admit(min2, c, '3') === null);
    expect(kept).toEqual([active('3')]);
  });
});
