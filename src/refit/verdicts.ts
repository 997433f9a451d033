// The refit's verdict rules: what one engine's answer comes to as a leg of a phase, how many
// engines must pass the pause, and which engines a finished refit holds out of routing or lets
// back. Pure: outcomes and results come in as values; it never calls an engine, writes a journal
// or changes an engine's quarantine (the runner applies what it says).

import type { CoordinatorContext, LegResult } from '../../actors/coordinator.ts';
import { unreachableCode } from '../control/outcome.ts';
import { compareVersions } from '../fleet/versions.ts';
import type { ControlOutcome } from '../wire/control-call.ts';
import type { Phase } from '../wire/refit-phase.ts';
import type { RefitRequest } from '../wire/refit-request.ts';

/** Failures after which an engine may hold partial weights, or lied about a load: quarantined. */
const QUARANTINING = new Set(['verify_failed', 'cut_after_grace', 'transfer_aborted']);

/**
 * A leg succeeds on a 2xx whose body does not say `success: false` (stricter than the raw
 * fan-out, which leaves bodies to the trainer). Verification also needs the target version.
 */
export function legResult(phase: Phase, o: ControlOutcome, target: string, expected?: ReadonlyArray<number | null>): LegResult {
  if (o.kind !== 'answer') {
    const error = o.kind === 'timeout' ? 'upstream_timeout' : o.kind === 'unreachable' ? unreachableCode(o) : 'no_control_endpoint';
    return { ok: false, error, message: o.message, latencyMs: o.latencyMs };
  }
  const body = o.body as { success?: unknown; message?: unknown; weight_version?: unknown } | string | null;
  if (o.status < 200 || o.status >= 300) {
    const detail = typeof body === 'object' && body && typeof body.message === 'string' ? `: ${body.message}` : '';
    // An engine that cannot show a parameter it was told to load cannot be verified to hold it.
    const error = expected ? 'verify_failed' : 'upstream_error';
    return { ok: false, error, status: o.status, message: `HTTP ${o.status}${detail}`, latencyMs: o.latencyMs };
  }
  if (typeof body === 'object' && body && body.success === false) {
    return {
      ok: false,
      error: 'engine_refused',
      status: o.status,
      message: typeof body.message === 'string' ? body.message : 'engine answered success: false',
      latencyMs: o.latencyMs,
    };
  }
  if (expected) {
    // A parameter read back: its first values must be the trainer's, or the load did not happen.
    const seen = Array.isArray(body) ? (body as unknown[]).flat(Infinity).slice(0, expected.length) : null;
    if (!seen || !sameValues(seen, expected)) {
      return {
        ok: false,
        error: 'verify_failed',
        status: o.status,
        message: `engine holds other values than the trainer sent: read back ${JSON.stringify(seen)}, expected ${JSON.stringify(expected)}`,
        latencyMs: o.latencyMs,
      };
    }
  }
  if (phase === 'verify') {
    const seen = typeof body === 'object' && body ? body.weight_version : undefined;
    const v = typeof seen === 'number' ? String(seen) : seen;
    if (typeof v !== 'string' || compareVersions(v.trim(), target) !== 0) {
      return {
        ok: false,
        error: 'verify_failed',
        status: o.status,
        message: `engine reports weight_version ${JSON.stringify(seen ?? null)}, expected ${JSON.stringify(target)}`,
        latencyMs: o.latencyMs,
      };
    }
  }
  return { ok: true, status: o.status, latencyMs: o.latencyMs };
}

/** Equal values, up to float rounding (a read-back may pass through another float width). */
function sameValues(seen: unknown[], expected: ReadonlyArray<number | null>): boolean {
  if (seen.length !== expected.length) return false;
  return expected.every((e, i) => {
    const s = seen[i];
    if (e === null || s === null) return e === s;
    return typeof s === 'number' && Math.abs(s - e) <= 1e-6 * Math.max(1, Math.abs(e));
  });
}

/**
 * Engines that must pass the pause. Disk refits default to 1: refit whoever could be paused and
 * report the rest. Distributed refits default to every target: the trainer fixed the group's
 * world size before the pause, so a missing engine would leave the others waiting for its ranks.
 */
export function quorumOf(req: RefitRequest, n: number): number {
  const q = req.quorum;
  if (!q) return req.source.kind === 'distributed' ? n : 1;
  const byCount = q.min_engines ?? 0;
  const byFraction = q.min_fraction !== undefined ? Math.ceil(q.min_fraction * n) : 0;
  return Math.min(n, Math.max(1, byCount, byFraction));
}

/**
 * What a finished refit does to each target's quarantine, in target order: a reason holds the
 * engine out of routing, null lets it back, an engine not named is left as it is. An engine that
 * failed in a refit step may hold partial weights, one that failed its version check lied about
 * a load, one cut after the grace period missed it: none is routed to until a refit brings it up
 * and verifies it. `reloaded`: engines loaded again during the version check after a takeover.
 */
export function quarantineAfter(
  result: Pick<CoordinatorContext, 'engines' | 'abortReason'>,
  targets: readonly string[],
  facts: { verify: boolean; reloaded: ReadonlySet<string> },
): Map<string, string | null> {
  const out = new Map<string, string | null>();
  for (const id of targets) {
    const rec = result.engines[id];
    if (rec?.failedIn === 'refit' || (rec?.error !== undefined && QUARANTINING.has(rec.error))) out.set(id, rec.error ?? 'refit_failed');
    // Loaded again in the version check and not verified (its deadline may have cut the load): partial weights, perhaps.
    else if (facts.reloaded.has(id) && rec?.failedIn !== undefined) out.set(id, 'verify_failed');
    // Only an engine whose version check passed leaves quarantine (a refit cut by its deadline skips the check).
    else if (facts.verify && !result.abortReason && rec?.phases.verify !== undefined && rec.failedIn === undefined) out.set(id, null);
  }
  return out;
}
