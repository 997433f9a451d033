// What a refit does with a load whose answer was lost with the replica that made the call (it died,
// or lost its lease, before answering): the engine is read before the leg is called failed. The
// decisions are pure; the runner makes the calls. A load that landed is a success; a step that is
// safe to repeat (one disk or tensor load to the same version: the engine ends up holding the same
// weights whether it ran once or twice) is sent again to whoever owns the engine now; a distributed
// transfer cannot be repeated by one engine alone, so it is reported with what the engine holds.

import type { LegResult, RefitStepPlan } from '../../actors/coordinator.ts';
import { compareVersions } from '../fleet/versions.ts';
import type { ControlOutcome } from '../wire/control-call.ts';

/** Loads that one engine can take again on its own, to the same result. */
const REPEATABLE = new Set(['update_weights_from_disk', 'update_weights_from_tensor']);

/** The outcome says the call was sent and its answer was lost with the replica that made it. */
export function answerLost(o: ControlOutcome): boolean {
  return o.kind === 'unreachable' && o.code === 'owner_lost';
}

/**
 * The call was not made at all, so sending it again is safe whatever it is: the engine's owner
 * had its lease fence closed, no replica owned the engine yet, or the one asked no longer did.
 */
export function notMade(o: ControlOutcome): boolean {
  if (o.kind !== 'unreachable') return false;
  return o.fenced === true || o.code === 'no_owner' || o.code === 'not_owner';
}

/** Whether this refit step may be sent again to an engine whose first answer was lost. */
export function repeatable(steps: readonly RefitStepPlan[], stepIndex: number): boolean {
  const step = steps[stepIndex];
  return steps.length === 1 && step !== undefined && !step.collective && REPEATABLE.has(step.name);
}

/**
 * Whether step `stepIndex` is the one that gives an engine the target version: the plan's last
 * load (the disk or tensor load, the last chunk of a distributed transfer), not a group join, an
 * earlier chunk, a read-back or the group's teardown.
 */
export function setsVersion(steps: readonly RefitStepPlan[], stepIndex: number): boolean {
  let last = -1;
  steps.forEach((st, k) => {
    if (st.name.startsWith('update_weights_from_')) last = k;
  });
  return last === stepIndex;
}

/** The weight version a `model_info` answer reports, or undefined when it reports none. */
export function reportedVersion(o: ControlOutcome): string | undefined {
  if (o.kind !== 'answer' || o.status < 200 || o.status >= 300) return undefined;
  const body = o.body as { weight_version?: unknown } | null;
  const v = typeof body === 'object' && body ? body.weight_version : undefined;
  if (typeof v === 'number') return String(v);
  return typeof v === 'string' ? v.trim() : undefined;
}

export type LostAnswerVerdict =
  /** The engine holds the target: the load landed. */
  | { kind: 'landed' }
  /** It does not (or cannot say): send the load again. */
  | { kind: 'repeat' }
  /** It does not, and the step cannot be repeated alone: failed, saying what the engine holds. */
  | { kind: 'failed'; result: LegResult };

/**
 * What to do once the engine's version has been read (`read`: the model_info outcome). `setsVersion`:
 * the lost step is the one that gives the engine the target version (a disk or tensor load, the
 * last chunk of a distributed transfer); an earlier chunk cannot have landed the refit, so an
 * engine that held the target before it started proves nothing.
 */
export function lostAnswerVerdict(lost: ControlOutcome, read: ControlOutcome, target: string, canRepeat: boolean, setsVersion = true): LostAnswerVerdict {
  const held = reportedVersion(read);
  if (setsVersion && held !== undefined && compareVersions(held, target) === 0) return { kind: 'landed' };
  if (canRepeat) return { kind: 'repeat' };
  const holds =
    held !== undefined
      ? `it holds weight_version ${JSON.stringify(held)}`
      : read.kind === 'answer'
        ? 'it reports no weight_version'
        : `it could not be read (${read.message})`;
  const landedNot = setsVersion ? `, not ${JSON.stringify(target)}` : ' (this step does not set the version)';
  const message = `${lost.kind === 'unreachable' ? lost.message : 'the answer was lost'}; read afterwards, ${holds}${landedNot}, and a distributed transfer cannot be repeated by one engine`;
  return { kind: 'failed', result: { ok: false, error: 'upstream_unreachable', message, latencyMs: lost.latencyMs } };
}

/** A verify that failed on a version mismatch (the engine answered, with another version). */
export function versionMismatch(result: LegResult): boolean {
  return !result.ok && result.error === 'verify_failed' && result.status !== undefined && result.status >= 200 && result.status < 300;
}
