// Version policies: the grammar shared by the `--rl-version-policy` setting
// and the `x-smg-version-policy` / `x-rl-version-policy` headers, and the per-candidate verdict
// of the routing pre-filter. Pure: it never reads the table or counts drops; callers do.

import { GatewayError } from '../api/errors.ts';
import { compareVersions, hasWhiteSpace, trimWhiteSpace, versionNumber } from './versions.ts';

export type VersionPolicy = { kind: 'any' } | { kind: 'latest-only' } | { kind: 'min-version'; version: string } | { kind: 'max-staleness'; k: bigint };

export const DEFAULT_VERSION_POLICY: VersionPolicy = { kind: 'any' };

const U64_MAX = 18446744073709551615n;
// Rust's `u64::from_str`, which SMG uses for `k`, accepts one leading `+`.
const U64_TEXT = /^\+?[0-9]+$/;

function invalid(input: string, reason: string): GatewayError {
  return new GatewayError('invalid_version_policy', `invalid version policy \`${input}\`: ${reason}`);
}

/** The policy grammar, case-sensitive and untrimmed (trim header values first: `policyFromHeader`). */
export function parseVersionPolicy(text: string): VersionPolicy {
  if (text === 'any') return { kind: 'any' };
  if (text === 'latest-only') return { kind: 'latest-only' };
  if (text.startsWith('min-version:')) {
    const v = text.slice('min-version:'.length);
    if (v.length === 0 || hasWhiteSpace(v)) throw invalid(text, 'min-version needs a version with no whitespace');
    return { kind: 'min-version', version: v };
  }
  if (text.startsWith('max-staleness:')) {
    const k = text.slice('max-staleness:'.length);
    if (!U64_TEXT.test(k) || BigInt(k) > U64_MAX) throw invalid(text, 'max-staleness needs a decimal integer');
    return { kind: 'max-staleness', k: BigInt(k) };
  }
  throw invalid(text, 'expected any | latest-only | min-version:<v> | max-staleness:<k>');
}

/** A request header value: trimmed, then parsed. */
export function policyFromHeader(value: string): VersionPolicy {
  return parseVersionPolicy(trimWhiteSpace(value));
}

/** The text form; `parseVersionPolicy(formatVersionPolicy(p))` equals `p`. */
export function formatVersionPolicy(p: VersionPolicy): string {
  switch (p.kind) {
    case 'any':
    case 'latest-only':
      return p.kind;
    case 'min-version':
      return `min-version:${p.version}`;
    case 'max-staleness':
      return `max-staleness:${p.k}`;
  }
}

export type DropReason = 'paused' | 'asleep' | 'stale' | 'unversioned';

export interface Candidate {
  control: 'active' | 'paused' | 'asleep';
  /** The engine's table version; undefined when unversioned or absent from the table. */
  version: string | undefined;
}

/**
 * The routing pre-filter: why `candidate` is dropped under `policy` given the model's fleet
 * maximum, or null to keep it. Paused and asleep engines are dropped under every policy.
 */
export function admit(policy: VersionPolicy, candidate: Candidate, fleetMax: string | undefined): DropReason | null {
  if (candidate.control === 'paused') return 'paused';
  if (candidate.control === 'asleep') return 'asleep';
  const v = candidate.version;
  switch (policy.kind) {
    case 'any':
      return null;
    case 'latest-only':
      if (fleetMax === undefined) return null;
      if (v === undefined) return 'unversioned';
      return compareVersions(v, fleetMax) === 0 ? null : 'stale';
    case 'max-staleness': {
      if (fleetMax === undefined) return null;
      if (v === undefined) return 'unversioned';
      // Staleness is a numeric distance: a text version on either side has none, so it is stale.
      const nv = versionNumber(v);
      const nmax = versionNumber(fleetMax);
      if (nv === null || nmax === null) return 'stale';
      const behind = nmax > nv ? nmax - nv : 0n;
      return behind <= policy.k ? null : 'stale';
    }
    case 'min-version':
      // The floor is absolute: it applies whether or not the fleet has a maximum.
      if (v === undefined) return 'unversioned';
      return compareVersions(v, policy.version) >= 0 ? null : 'stale';
  }
}

/**
 * Whether a request admitted when its engine held `admitted` is now too stale under `policy`: the
 * fleet's maximum moved more than `k` versions past it (`max-staleness:k`; the same numeric
 * distance the admission filter measures, a text version on either side being stale once the
 * maximum differs). Only `max-staleness` bounds a request in flight.
 */
export function staleInFlight(policy: VersionPolicy, admitted: string, fleetMax: string | undefined): boolean {
  if (policy.kind !== 'max-staleness' || fleetMax === undefined) return false;
  if (compareVersions(admitted, fleetMax) >= 0) return false;
  return admit(policy, { control: 'active', version: admitted }, fleetMax) === 'stale';
}
