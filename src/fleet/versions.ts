// Weight versions: the single validation gate every externally supplied
// version passes (API writes and passthrough observations), their ordering, and the per-model
// fleet maximum. Pure: never stores a version, never logs (the mixed-kind warning is a hook).

import { GatewayError } from '../api/errors.ts';

export type VersionRejection = 'empty' | 'too_long' | 'not_printable_ascii';

export const MAX_VERSION_BYTES = 128;

/**
 * The placeholder SGLang reports before any refit; it seeds an unversioned entry, so it cannot
 * out-order the first real refit.
 */
export const UNVERSIONED_LABEL = 'default';

const MESSAGES: Record<VersionRejection, string> = {
  empty: 'weight_version is empty',
  too_long: `weight_version exceeds ${MAX_VERSION_BYTES} bytes`,
  not_printable_ascii: 'weight_version contains a byte outside printable ASCII',
};

// Unicode White_Space, the set SMG's Rust `str::trim` strips. JS `trim()` differs (it strips
// U+FEFF and keeps U+0085), and the difference decides whether a padded value is accepted.
const WS = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const TRIM = new RegExp(`^[${WS}]+|[${WS}]+$`, 'g');
const HAS_WS = new RegExp(`[${WS}]`);
const PRINTABLE = /^[\x21-\x7e]*$/;

/** Trim Unicode White_Space from both ends (Rust `str::trim`). */
export function trimWhiteSpace(s: string): string {
  return s.replace(TRIM, '');
}

/** True when `s` contains any Unicode White_Space character (Rust `char::is_whitespace`). */
export function hasWhiteSpace(s: string): boolean {
  return HAS_WS.test(s);
}

/** SMG's version gate: trim, then refuse empty, over 128 bytes, and any byte outside 0x21..=0x7E. */
export function checkVersion(raw: string): { ok: true; value: string } | { ok: false; reason: VersionRejection; message: string } {
  const value = trimWhiteSpace(raw);
  const reject = (reason: VersionRejection) => ({ ok: false as const, reason, message: MESSAGES[reason] });
  if (value.length === 0) return reject('empty');
  // Bytes, not UTF-16 units: a non-ASCII value over the cap is `too_long`, as in SMG.
  if (Buffer.byteLength(value, 'utf8') > MAX_VERSION_BYTES) return reject('too_long');
  if (!PRINTABLE.test(value)) return reject('not_printable_ascii');
  return { ok: true, value };
}

/** The gate of the version writes: the trimmed version, or `invalid_version` / `invalid_body`. */
export function validateVersion(raw: unknown): string {
  if (typeof raw !== 'string') {
    throw new GatewayError('invalid_body', 'weight_version: expected a string');
  }
  const checked = checkVersion(raw);
  if (!checked.ok) throw new GatewayError('invalid_version', checked.message);
  return checked.value;
}

/**
 * A version field of a proxied refit body: a string, or a number rendered as text,
 * passed through the same gate as API writes. Anything else (null, bool, array, object) or a
 * value the gate refuses yields undefined.
 */
export function versionFromBodyField(value: unknown): string | undefined {
  let raw: string;
  if (typeof value === 'string') raw = value;
  else if (typeof value === 'number' && Number.isFinite(value)) raw = String(value);
  else return undefined;
  const checked = checkVersion(raw);
  return checked.ok ? checked.value : undefined;
}

const U64_MAX = 18446744073709551615n;
// Rust's `u64::from_str` accepts one leading `+`; SMG classifies versions with it.
const U64_TEXT = /^\+?[0-9]+$/;

function numericValue(v: string): bigint | null {
  const t = trimWhiteSpace(v);
  if (!U64_TEXT.test(t)) return null;
  const n = BigInt(t);
  return n <= U64_MAX ? n : null;
}

/** Numeric: the trimmed text parses as an unsigned 64-bit integer (`"042"` is numeric). */
export function isNumericVersion(v: string): boolean {
  return numericValue(v) !== null;
}

/** The numeric value of a version, or null for a text version. */
export function versionNumber(v: string): bigint | null {
  return numericValue(v);
}

type MixedListener = (a: string, b: string) => void;
let mixedListener: MixedListener | null = null;
let mixedSeen = false;

/**
 * Register the callback told about the first numeric-vs-text comparison of the process (the
 * caller logs the once-per-process warning). Returns a function that unregisters it.
 */
export function onMixedComparison(cb: MixedListener): () => void {
  mixedListener = cb;
  return () => {
    if (mixedListener === cb) mixedListener = null;
  };
}

/** Forget that a mixed comparison happened, so the next one is reported again (tests only). */
export function resetMixedComparisonWarning(): void {
  mixedSeen = false;
}

/**
 * Byte-order comparison of two strings as UTF-8 (Rust `str` ordering). JS `<` compares UTF-16
 * units, which disagrees with UTF-8 order for astral characters against U+E000..U+FFFF.
 */
export function compareBytes(a: string, b: string): -1 | 0 | 1 {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Lift surrogates above the rest of the BMP so unit order matches code point order.
    if (x >= 0xd800) x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
    if (y >= 0xd800) y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    return x < y ? -1 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

/**
 * Version ordering: numeric vs numeric by value, text vs text by bytes, numeric vs text by bytes
 * (reported once per process through `onMixedComparison`). Equality uses the same rule, so
 * `"042"` equals `"42"`.
 */
export function compareVersions(a: string, b: string): -1 | 0 | 1 {
  const ta = trimWhiteSpace(a);
  const tb = trimWhiteSpace(b);
  const na = numericValue(ta);
  const nb = numericValue(tb);
  if (na !== null && nb !== null) return na < nb ? -1 : na > nb ? 1 : 0;
  if ((na === null) !== (nb === null) && !mixedSeen) {
    mixedSeen = true;
    mixedListener?.(ta, tb);
  }
  return compareBytes(ta, tb);
}

/**
 * Per-model fleet maximum: the largest numeric version if any is numeric, else the
 * lexical maximum of the text versions; undefined when there is none. Numeric versions win
 * outright because the mixed lexical order would let a stray `ckpt-7` outrank every numbered
 * release (`'c' > '1'`) and corrupt the staleness baseline for the whole model.
 */
export function fleetMaximum(versions: Iterable<string>): string | undefined {
  let numeric: { text: string; n: bigint } | undefined;
  let text: string | undefined;
  for (const v of versions) {
    const n = numericValue(v);
    if (n !== null) {
      // `>=` keeps the last of equal values, as Rust's `Iterator::max` does.
      if (numeric === undefined || n >= numeric.n) numeric = { text: v, n };
    } else if (numeric === undefined && (text === undefined || compareBytes(v, text) >= 0)) {
      text = v;
    }
  }
  return numeric?.text ?? text;
}
