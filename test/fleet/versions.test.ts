import { beforeEach, describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import {
  checkVersion,
  compareBytes,
  compareVersions,
  fleetMaximum,
  isNumericVersion,
  onMixedComparison,
  resetMixedComparisonWarning,
  validateVersion,
  versionFromBodyField,
} from '../../src/fleet/versions.ts';

const EMPTY = 'weight_version is empty';
const TOO_LONG = 'weight_version exceeds 128 bytes';
const NOT_ASCII = 'weight_version contains a byte outside printable ASCII';

describe('checkVersion', () => {
  it.each([
    ['42', '42'],
    [' 42 ', '42'],
    ['  step-7  ', 'step-7'],
    ['!~', '!~'],
    ['x'.repeat(128), 'x'.repeat(128)],
    // Trimming comes first, so padding cannot push a legal value over the cap.
    [`  ${'x'.repeat(128)}  `, 'x'.repeat(128)],
    ['\u00857\u0085', '7'],
  ])('accepts %j as %j', (raw, value) => {
    expect(checkVersion(raw)).toEqual({ ok: true, value });
  });

  it.each([
    ['', 'empty', EMPTY],
    ['  ', 'empty', EMPTY],
    ['\t\n', 'empty', EMPTY],
    ['x'.repeat(129), 'too_long', TOO_LONG],
    // 65 two-byte characters are 130 bytes: over the cap before the ASCII check.
    ['é'.repeat(65), 'too_long', TOO_LONG],
    ['v1\u0007', 'not_printable_ascii', NOT_ASCII],
    ['step 7', 'not_printable_ascii', NOT_ASCII],
    ['a b', 'not_printable_ascii', NOT_ASCII],
    ['v\u0001', 'not_printable_ascii', NOT_ASCII],
    ['v\u007f', 'not_printable_ascii', NOT_ASCII],
    ['vé', 'not_printable_ascii', NOT_ASCII],
    ['v\n1', 'not_printable_ascii', NOT_ASCII],
    // U+FEFF is not White_Space, so it is not trimmed (JS `trim()` would strip it).
    ['\ufeff7', 'not_printable_ascii', NOT_ASCII],
  ])('rejects %j as %s', (raw, reason, message) => {
    expect(checkVersion(raw)).toEqual({ ok: false, reason, message });
  });
});

describe('validateVersion', () => {
  it('returns the trimmed value', () => {
    expect(validateVersion(' 42 ')).toBe('42');
  });

  it.each([
    ['  ', EMPTY],
    ['x'.repeat(129), TOO_LONG],
    ['v1\u0007', NOT_ASCII],
    ['step 7', NOT_ASCII],
  ])('rejects %j with invalid_version', (raw, message) => {
    const err = gatewayError(() => validateVersion(raw));
    expect(err.code).toBe('invalid_version');
    expect(err.status).toBe(400);
    expect(err.message).toBe(message);
  });

  it.each([[undefined], [null], [42], [true], [['1']], [{ v: '1' }]])('rejects %j with invalid_body', (raw) => {
    expect(gatewayError(() => validateVersion(raw)).code).toBe('invalid_body');
  });
});

describe('versionFromBodyField', () => {
  it.each([
    ['42', '42'],
    [' 7 ', '7'],
    [7, '7'],
    [0, '0'],
    [1.5, '1.5'],
    ['s3', 's3'],
    ['   ', undefined],
    ['step 7', undefined],
    ['x'.repeat(129), undefined],
    [null, undefined],
    [undefined, undefined],
    [true, undefined],
    [['42'], undefined],
    [{ v: '42' }, undefined],
  ])('%j → %j', (value, expected) => {
    expect(versionFromBodyField(value)).toBe(expected);
  });
});

describe('isNumericVersion', () => {
  it.each([
    ['0', true],
    ['42', true],
    ['042', true],
    [' 7 ', true],
    ['+5', true],
    ['18446744073709551615', true],
    ['18446744073709551616', false],
    ['-1', false],
    ['1a', false],
    ['default', false],
    ['', false],
    ['+', false],
    ['1.0', false],
  ])('%j → %s', (v, expected) => {
    expect(isNumericVersion(v)).toBe(expected);
  });
});

describe('compareVersions', () => {
  beforeEach(() => resetMixedComparisonWarning());

  it.each([
    // numeric vs numeric by value
    ['10', '9', 1],
    ['9', '10', -1],
    ['042', '42', 0],
    ['7', ' 7 ', 0],
    ['+5', '5', 0],
    ['18446744073709551615', '18446744073709551614', 1],
    // text vs text by bytes
    ['step-9', 'step-10', 1],
    ['abc', 'acd', -1],
    ['abc', 'abc', 0],
    ['v', 'v1', -1],
    // numeric vs text lexically
    ['1', 'default', -1],
    ['1', '1a', -1],
    ['9', '10a', 1],
  ])('%j vs %j → %i', (a, b, expected) => {
    expect(compareVersions(a, b)).toBe(expected);
    expect(compareVersions(b, a)).toBe(-expected || 0);
  });

  it('reports the first mixed-kind comparison of the process once', () => {
    const seen: [string, string][] = [];
    const off = onMixedComparison((a, b) => seen.push([a, b]));
    compareVersions('1', '2');
    compareVersions('a', 'b');
    expect(seen).toEqual([]);
    compareVersions('1', 'default');
    compareVersions('2', 'default');
    expect(seen).toEqual([['1', 'default']]);
    off();
  });

  it('orders bytes as UTF-8 does, not as UTF-16 units', () => {
    // U+FF61 is below U+1F600 in code points; as UTF-16 units 0xFF61 > 0xD83D.
    expect(compareBytes('\uff61', '\u{1f600}')).toBe(-1);
    expect('\uff61' < '\u{1f600}').toBe(false);
  });
});

describe('fleetMaximum', () => {
  it.each([
    [[], undefined],
    [['3'], '3'],
    [['1', '10', '9'], '10'],
    [['step-10', 'step-9'], 'step-9'],
    // Any numeric version wins over text: `ckpt-7` must not outrank numbered releases.
    [['ckpt-7', '2', '11'], '11'],
    [['default', '1'], '1'],
    [['18446744073709551615', '9'], '18446744073709551615'],
  ])('%j → %j', (versions, expected) => {
    expect(fleetMaximum(versions)).toBe(expected);
  });

  it('treats "042" and "42" as the same maximum', () => {
    const max = fleetMaximum(['042', '7', '42']);
    expect(max).toBeDefined();
    expect(compareVersions(max!, '42')).toBe(0);
  });
});
