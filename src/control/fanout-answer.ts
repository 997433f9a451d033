// A fan-out's answer: every engine that answered by worker id, the failures sorted by worker id,
// the counts, and its status (200, or 207 when a leg failed). Two forms of the same answer: the
// object (fanoutResponse) and its JSON text (fanoutJson), written straight from the outcomes, so
// a fan-out to many engines builds no object per leg and serialises nothing twice. The text is
// exactly JSON.stringify of the object (test/control/fanout-answer.test.ts holds it).

import type { Worker } from '../fleet/worker.ts';
import type { ControlOutcome } from '../wire/control-call.ts';
import { callOutcome, failedCall, isSuccess, type RlCallOutcome, type RlFailedCall } from './outcome.ts';

export interface RlFanoutResponse {
  results: Record<string, RlCallOutcome>;
  failed: RlFailedCall[];
  total: number;
  succeeded: number;
}

type Target = Pick<Worker, 'id' | 'url'>;

/** The outcome of a target no leg reported (cannot happen unless a dispatcher loses one). */
function outcomeOf(w: Target, outcomes: Map<string, ControlOutcome>): ControlOutcome {
  return outcomes.get(w.id) ?? { kind: 'unreachable' as const, latencyMs: 0, message: `upstream \`${w.url}\` unreachable: no outcome` };
}

function byId(a: Target, b: Target): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

export function fanoutResponse(targets: Target[], outcomes: Map<string, ControlOutcome>): RlFanoutResponse {
  const results: Record<string, RlCallOutcome> = {};
  const failed: RlFailedCall[] = [];
  let succeeded = 0;
  for (const w of [...targets].sort(byId)) {
    const o = outcomeOf(w, outcomes);
    if (o.kind === 'answer') results[w.id] = callOutcome(w, o);
    if (isSuccess(o)) succeeded++;
    const f = failedCall(w, o);
    if (f) failed.push(f);
  }
  return { results, failed, total: targets.length, succeeded };
}

export interface FanoutJson {
  status: 200 | 207;
  /** JSON.stringify(fanoutResponse(targets, outcomes)), byte for byte. */
  json: string;
  total: number;
  succeeded: number;
  failed: number;
}

const str = JSON.stringify as (s: string) => string;

/** A key an object orders before the others, numerically (an array index), as JSON.stringify lists them. */
function isIndex(key: string): boolean {
  if (key.length === 0) return false;
  const c = key.charCodeAt(0);
  if (c < 48 || c > 57 || (c === 48 && key.length > 1) || key.length > 10) return false;
  for (let i = 1; i < key.length; i++) {
    const d = key.charCodeAt(i);
    if (d < 48 || d > 57) return false;
  }
  return Number(key) < 4_294_967_295;
}

/** The answer's JSON text and its figures, written from the outcomes without the object form. */
export function fanoutJson(targets: Target[], outcomes: Map<string, ControlOutcome>): FanoutJson {
  const sorted = [...targets].sort(byId);
  let results = '';
  let indexed: Array<[number, string]> | undefined;
  let failed = '';
  let failures = 0;
  let succeeded = 0;
  for (const w of sorted) {
    const o = outcomeOf(w, outcomes);
    if (o.kind === 'answer') {
      if (isSuccess(o)) succeeded++;
      else failed = appendFailure(failed, w, o, failures++);
      // `__proto__` would set the object's prototype, not a key: it is not listed there either.
      if (w.id === '__proto__') continue;
      // callOutcome's keys in its order; a value JSON has no text for (undefined) leaves its key out, as in the object.
      let entry = `{"worker_id":${str(w.id)},"url":${str(w.url)}`;
      entry = member(entry, 'status', o.status);
      entry = member(entry, 'latency_ms', o.latencyMs);
      entry = member(entry, 'body', o.body);
      entry += o.truncated ? ',"body_truncated":true}' : '}';
      if (isIndex(w.id)) (indexed ??= []).push([Number(w.id), `${str(w.id)}:${entry}`]);
      else results += `${results.length === 0 ? '' : ','}${str(w.id)}:${entry}`;
    } else {
      failed = appendFailure(failed, w, o, failures++);
    }
  }
  if (indexed) {
    const first = indexed
      .sort((a, b) => a[0] - b[0])
      .map(([, e]) => e)
      .join(',');
    results = results.length === 0 ? first : `${first},${results}`;
  }
  const json = `{"results":{${results}},"failed":[${failed}],"total":${targets.length},"succeeded":${succeeded}}`;
  return { status: failures === 0 ? 200 : 207, json, total: targets.length, succeeded, failed: failures };
}

/** `,"key":value` after `out`, or nothing when JSON has no text for the value (JSON.stringify leaves such a key out). */
function member(out: string, key: string, value: unknown): string {
  const text = JSON.stringify(value) as string | undefined;
  return text === undefined ? out : `${out},"${key}":${text}`;
}

/** One failed[] entry (outcome.ts's failedCall, in its key order) after those already written. */
function appendFailure(out: string, w: Target, o: ControlOutcome, written: number): string {
  const f = failedCall(w, o)!;
  let entry = `{"worker_id":${str(f.worker_id)},"url":${str(f.url)}`;
  entry = member(entry, 'error', f.error);
  entry = member(entry, 'message', f.message);
  entry = member(entry, 'status', f.status);
  entry = member(entry, 'connection_mode', f.connection_mode);
  return `${out}${written === 0 ? '' : ','}${entry}}`;
}
