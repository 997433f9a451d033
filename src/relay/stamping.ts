// Response stamping of the data plane: the routed engine's table version as
// `x-smg-weight-version`, the version it was admitted on as `x-rl-admitted-version`,
// `x-smg-mixed-version: true` when a buffered JSON /generate body names a version other than the
// table's, and `x-rl-stale` on a buffered answer past its staleness bound. RL-only; callers decide
// when RL is on. It never changes a body: the mixed check reads it and the caller sends the bytes
// it already has.

import type { FastifyReply } from 'fastify';
import { compareVersions } from '../fleet/versions.ts';

export const ROUTED_HEADER = 'x-smg-routed-worker-id';
export const WEIGHT_HEADERS = ['x-smg-weight-version', 'x-rl-weight-version'] as const;
export const MIXED_HEADERS = ['x-smg-mixed-version', 'x-rl-mixed-version'] as const;
/** The engine's version when the request was admitted (RL on; every data-plane answer). */
export const ADMITTED_HEADER = 'x-rl-admitted-version';
/** `aborted` or `marked`: a buffered answer that went past its `max-staleness` bound while it ran. */
export const STALE_HEADER = 'x-rl-stale';

/**
 * Headers only the gateway may set: an engine's headers of these names never pass through as
 * if they were the gateway's (with RL off none of the RL ones may appear at all).
 */
export const GATEWAY_ONLY_HEADERS: ReadonlySet<string> = new Set([
  ROUTED_HEADER,
  'x-rl-routed-worker-id',
  ...WEIGHT_HEADERS,
  ...MIXED_HEADERS,
  ADMITTED_HEADER,
  STALE_HEADER,
]);

/** What a browser may read of a cross-origin answer (`access-control-expose-headers`). */
export const EXPOSED_HEADERS = [
  'x-smg-weight-version',
  'x-smg-mixed-version',
  ROUTED_HEADER,
  'x-rl-weight-version',
  'x-rl-mixed-version',
  'x-rl-routed-worker-id',
  ADMITTED_HEADER,
  STALE_HEADER,
  'x-request-id',
].join(', ');

/** `x-smg-weight-version` (+ the `x-rl-` twin) = the table version; nothing when unversioned. */
export function stampWeightVersion(reply: FastifyReply, tableVersion: string | undefined): void {
  if (tableVersion === undefined) return;
  for (const h of WEIGHT_HEADERS) reply.header(h, tableVersion);
  // A token engine's answer is stamped as it is sent: the version it was admitted on.
  reply.header(ADMITTED_HEADER, tableVersion);
}

/** `x-smg-mixed-version: true` (+ twin). The caller counts it (`mixed_version_total`). */
export function stampMixed(reply: FastifyReply): void {
  for (const h of MIXED_HEADERS) reply.header(h, 'true');
}

/** A JSON media type (`application/json`, `…+json`), parameters ignored. */
export function isJsonContentType(value: string | string[] | undefined): boolean {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return false;
  const media = v.split(';', 1)[0]!.trim().toLowerCase();
  return media === 'application/json' || media.endsWith('+json');
}

/**
 * SMG's mixed-version rule over a parsed body: the object, or any element of an array, is mixed
 * when its `meta_info.weight_versions` has more than one element, or its
 * `meta_info.weight_version` (a non-empty string or a number) differs from the table version by
 * `compareVersions` (`"042"` equals `"42"`). Without a table version there is nothing for a
 * single version to differ from.
 */
export function isMixedBody(body: unknown, tableVersion: string | undefined): boolean {
  if (Array.isArray(body)) return body.some((el) => isMixedObject(el, tableVersion));
  return isMixedObject(body, tableVersion);
}

/**
 * The same over raw bytes: an unparsable body is not mixed. The common answer — no version
 * field, or one `"weight_version": "<the table version>"` — is read off the bytes without a
 * parse (the buffered /generate hot path); anything else (escapes, several occurrences, another
 * value, `weight_versions`) is parsed and judged by isMixedBody, so the answer is always its.
 */
export function isMixedBytes(bytes: Buffer, tableVersion: string | undefined): boolean {
  const fast = settledWithoutParse(bytes, tableVersion);
  if (fast !== undefined) return fast;
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    return false;
  }
  return isMixedBody(body, tableVersion);
}

const VERSION_KEY = Buffer.from('weight_version');
const SPANS_KEY = Buffer.from('weight_versions');
const UNICODE_ESCAPE = Buffer.from('\\u');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const needles = new Map<string, Buffer>();

/**
 * `false` when the bytes alone prove "not mixed", else undefined (parse). Without `\u` escapes
 * a key can only be spelled literally, so counting `weight_version` finds every version field:
 * none at all is not mixed; without a table version, no `weight_versions` is not mixed; exactly
 * one, a key whose string value is byte-equal to the table version, is not mixed either
 * (`weight_versions` would be a second occurrence).
 */
function settledWithoutParse(bytes: Buffer, tableVersion: string | undefined): false | undefined {
  if (bytes.indexOf(UNICODE_ESCAPE) >= 0) return undefined;
  const at = bytes.indexOf(VERSION_KEY);
  if (at < 0) return false;
  // Without a table version only `weight_versions` (two or more spans) can make a body mixed.
  if (tableVersion === undefined) return bytes.indexOf(SPANS_KEY, at) < 0 ? false : undefined;
  if (bytes.indexOf(VERSION_KEY, at + VERSION_KEY.length) >= 0) return undefined;
  // A key: `"weight_version"` opened by an unescaped quote, then `:`, then the value.
  if (at < 1 || bytes[at - 1] !== QUOTE || (at >= 2 && bytes[at - 2] === BACKSLASH)) return undefined;
  let i = at + VERSION_KEY.length;
  if (bytes[i++] !== QUOTE) return undefined;
  i = skipSpace(bytes, i);
  if (bytes[i++] !== COLON) return undefined;
  i = skipSpace(bytes, i);
  let needle = needles.get(tableVersion);
  if (!needle) {
    if (needles.size > 1024) needles.clear(); // versions are few; never grow without bound
    needle = Buffer.from(JSON.stringify(tableVersion));
    needles.set(tableVersion, needle);
  }
  // Byte-equal to the table version's JSON string (closing quote included), no escape inside.
  if (needle.includes(BACKSLASH) || i + needle.length > bytes.length) return undefined;
  return bytes.compare(needle, 0, needle.length, i, i + needle.length) === 0 ? false : undefined;
}

function skipSpace(bytes: Buffer, i: number): number {
  while (i < bytes.length && (bytes[i] === 0x20 || bytes[i] === 0x0a || bytes[i] === 0x0d || bytes[i] === 0x09)) i++;
  return i;
}

function isMixedObject(obj: unknown, tableVersion: string | undefined): boolean {
  if (!isRecord(obj)) return false;
  const meta = obj.meta_info;
  if (!isRecord(meta)) return false;
  const spans = meta.weight_versions;
  if (Array.isArray(spans) && spans.length > 1) return true;
  if (tableVersion === undefined) return false;
  const v = meta.weight_version;
  if (typeof v === 'string' && v.length > 0) return compareVersions(v, tableVersion) !== 0;
  if (typeof v === 'number' && Number.isFinite(v)) return compareVersions(String(v), tableVersion) !== 0;
  return false;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
