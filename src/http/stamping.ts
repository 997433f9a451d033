// Response stamping of the data plane (spec §13.4): the routed engine's table version as
// `x-smg-weight-version`, and `x-smg-mixed-version: true` when a buffered JSON /generate body
// names a version other than that one. RL-only; callers decide when RL is on. It never changes
// a body: the mixed check reads it and the caller sends the bytes it already has.

import type { FastifyReply } from 'fastify';
import { compareVersions } from '../fleet/versions.ts';

export const ROUTED_HEADER = 'x-smg-routed-worker-id';
const WEIGHT_HEADERS = ['x-smg-weight-version', 'x-rl-weight-version'] as const;
const MIXED_HEADERS = ['x-smg-mixed-version', 'x-rl-mixed-version'] as const;

/**
 * Headers only the gateway may set: an engine's headers of these names never pass through as
 * if they were the gateway's (with RL off none of the RL ones may appear at all).
 */
export const GATEWAY_ONLY_HEADERS: ReadonlySet<string> = new Set([ROUTED_HEADER, 'x-rl-routed-worker-id', ...WEIGHT_HEADERS, ...MIXED_HEADERS]);

/** `x-smg-weight-version` (+ the `x-rl-` twin) = the table version; nothing when unversioned. */
export function stampWeightVersion(reply: FastifyReply, tableVersion: string | undefined): void {
  if (tableVersion === undefined) return;
  for (const h of WEIGHT_HEADERS) reply.header(h, tableVersion);
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
 * §13.4 over a parsed body: the object, or any element of an array, is mixed when its
 * `meta_info.weight_versions` has more than one element, or its `meta_info.weight_version` (a
 * non-empty string or a number) differs from the table version by §12.2 comparison. Without a
 * table version there is nothing for a single version to differ from.
 */
export function isMixedBody(body: unknown, tableVersion: string | undefined): boolean {
  if (Array.isArray(body)) return body.some((el) => isMixedObject(el, tableVersion));
  return isMixedObject(body, tableVersion);
}

/** The same over raw bytes: an unparsable body is not mixed. */
export function isMixedBytes(bytes: Buffer, tableVersion: string | undefined): boolean {
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    return false;
  }
  return isMixedBody(body, tableVersion);
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
