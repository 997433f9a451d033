// What a runner may do with a message it takes from the refit queue, judged before any engine is
// touched. The queue's stream keeps whatever a publisher allowed on `<root>.refit.submit` sends,
// so the checks a door made before it queued the refit (service.ts: the schema and the version,
// targets that exist, no overlap with a running refit) are made again here; a gateway's own
// message passes them unchanged. The size of every call is checked where the runner builds the
// calls, as the doors do (`planRefusal` in runner.ts). Pure: the fleet comes in as facts (a
// registry lookup, the clash the caller found); it never reads the bus, writes a journal or
// calls an engine.

import { decode } from '../bus/codec.ts';
import { parseRefitRequest } from './request.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';

/** Another refit holding one of the targets: running (its journal says so), or queued by this replica. */
export interface Clash {
  worker: string;
  refit: string;
  running: boolean;
}

/** The message is a queued refit, or it is not (then it is dropped, `reason` logged). */
export type MessageVerdict = { ok: true; refit: QueuedRefit } | { ok: false; reason: string };

/** Whether a queued refit may start now: run it, hand it back for later, or refuse it whole. */
export type TakeVerdict = { take: 'run' } | { take: 'later' } | { take: 'refuse'; reason: string };

const REFIT_ID = /^[A-Za-z0-9_-]{1,128}$/;
// A worker id becomes a subject token (rl.engine.<id>.cmd).
const WORKER_ID = /^[^.*>\s]{1,256}$/;

/**
 * The message as a gateway queues it (service.ts), or why it is not: JSON; an id equal to its
 * `Nats-Msg-Id` (the queue de-duplicates on it) and to the request's `refit_id` when given; a
 * request that passes the doors' schema and version check and is no dry run; distinct target
 * ids; the skipped engines, origin and submission time the report is built from.
 */
export function readQueuedRefit(data: Uint8Array, msgId: string | undefined): MessageVerdict {
  let v: unknown;
  try {
    v = decode(data);
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  if (!isObject(v)) return { ok: false, reason: 'not a JSON object' };
  const { id, request, selector, targets, skipped, origin, submitted_at: submittedAt } = v;
  if (typeof id !== 'string' || !REFIT_ID.test(id)) return { ok: false, reason: 'no refit id of [A-Za-z0-9_-]{1,128}' };
  if (msgId !== id) return { ok: false, reason: `its Nats-Msg-Id ${JSON.stringify(msgId ?? null)} is not its id` };
  let req: QueuedRefit['request'];
  try {
    req = parseRefitRequest(request);
  } catch (err) {
    return { ok: false, reason: `its request is refused: ${(err as Error).message}` };
  }
  if (req.refit_id !== undefined && req.refit_id !== id) return { ok: false, reason: 'its request names another refit_id' };
  if (req.dry_run === true) return { ok: false, reason: 'a dry run is never queued' };
  if (selector !== null && typeof selector !== 'string') return { ok: false, reason: 'its selector is neither text nor null' };
  if (!Array.isArray(targets) || targets.length === 0 || !targets.every((t) => typeof t === 'string' && WORKER_ID.test(t))) {
    return { ok: false, reason: 'its targets are not a list of worker ids' };
  }
  if (new Set(targets).size !== targets.length) return { ok: false, reason: 'its targets name a worker twice' };
  if (!Array.isArray(skipped) || !skipped.every(isSkipped))
    return { ok: false, reason: 'its skipped engines are not a list of {worker_id, url, reason, message}' };
  if (typeof origin !== 'string') return { ok: false, reason: 'no origin' };
  if (typeof submittedAt !== 'string' || Number.isNaN(Date.parse(submittedAt))) return { ok: false, reason: 'no submission time' };
  return {
    ok: true,
    refit: { id, request: req, selector, targets: targets as string[], skipped: skipped as QueuedRefit['skipped'], origin, submitted_at: submittedAt },
  };
}

/**
 * Whether a refit read from the queue may start. A refit taken over (its journal exists: its
 * runner died) goes on as journaled whatever the fleet became, and waits while another refit
 * holds an engine. A new one is refused, as the door refuses it, when a running refit holds one
 * of its engines or a target is not a registered worker (removed since it was accepted, or never
 * one); it waits only for a refit this replica queued that has not started (two doors accepted
 * overlapping refits at once: the first to start runs, the other is then refused).
 */
export function takeVerdict(q: QueuedRefit, facts: { takeover: boolean; clash: Clash | undefined; known: (workerId: string) => boolean }): TakeVerdict {
  const { clash } = facts;
  if (clash && (facts.takeover || !clash.running)) return { take: 'later' };
  if (facts.takeover) return { take: 'run' };
  if (clash) return { take: 'refuse', reason: `worker \`${clash.worker}\` is already part of running refit \`${clash.refit}\`` };
  const unknown = q.targets.find((id) => !facts.known(id));
  if (unknown !== undefined) return { take: 'refuse', reason: `worker \`${unknown}\` is not registered` };
  return { take: 'run' };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isSkipped(s: unknown): boolean {
  return isObject(s) && ['worker_id', 'url', 'reason', 'message'].every((k) => typeof s[k] === 'string');
}
