// Faults on HTTP routes, as the SGLang server and the TokenSpeed control app take them: the keys
// they share (delay, canned status/body, hang, drop, exit, "claims success without applying"),
// their checks, the canned answer built once per rule, and the match of a
// rule against one call. It performs nothing itself (http-front.ts does); which of these keys a
// simulator accepts is its own parser's choice.

import { checkHttpStatus, checkNonNegInt, FaultError, isObject, normaliseRoute, patternMatches } from './faults.ts';

export interface RouteFault {
  /** Path without the leading '/', e.g. `pause_generation`; `*` = any; `prefix/*` = prefix match. */
  route?: string;
  /** Only this method (case-insensitive); any when omitted. */
  method?: string;
  delayMs?: number;
  /** Applies to the next N matching calls, then disappears; every call when omitted. */
  times?: number;
  /** Answer this status instead of the real handler. */
  status?: number;
  /** Canned body: a string is sent as-is, anything else as JSON. */
  body?: unknown;
  /** Canned JSON body padded to exactly this many bytes (e.g. 2 MiB answers). */
  bodyBytes?: number;
  /** Content type of the canned body; null sends none. Default: JSON, or text/plain for strings. */
  contentType?: string | null;
  headers?: Record<string, string>;
  /** Never answered, until `/_sim/release-hung` or stop. */
  hang?: boolean;
  /** The socket is destroyed without an answer. */
  drop?: boolean;
  /** Exit the process (true = code 1, or the given code). */
  exit?: boolean | number;
  /** The route answers success but does not do the work (weights, version, group). */
  claimSuccessWithoutApplying?: boolean;
  /**
   * After its delay the call runs even if its caller went away meanwhile, as SGLang's handlers do
   * (a pause or a load the gateway gave up on still lands). By default an abandoned call is dropped.
   */
  runIfAbandoned?: boolean;
}

export interface CannedAnswer {
  status: number;
  headers: Record<string, string | number>;
  body: Buffer;
}

/** A route rule with its canned answer built (null: the real handler answers). */
export interface RouteRule {
  fault: RouteFault;
  canned: CannedAnswer | null;
}

/** The route-fault keys' own checks (the table's common ones are faults.ts' `checkCommon`). */
export function checkRouteFault(f: RouteFault, i: number): void {
  checkNonNegInt(f.bodyBytes, 'bodyBytes', i);
  checkHttpStatus(f.status, 'status', i);
  if (f.method !== undefined && typeof f.method !== 'string') throw new FaultError(`fault ${i}: method must be a string`);
  if (f.contentType !== undefined && f.contentType !== null && typeof f.contentType !== 'string') {
    throw new FaultError(`fault ${i}: contentType must be a string or null`);
  }
  if (f.headers !== undefined && !isObject(f.headers)) throw new FaultError(`fault ${i}: headers must be an object`);
  if (f.runIfAbandoned !== undefined && typeof f.runIfAbandoned !== 'boolean') throw new FaultError(`fault ${i}: runIfAbandoned must be a boolean`);
}

/** The answer a rule sends instead of the handler, or null when it has no status or body. */
export function cannedAnswer(f: RouteFault): CannedAnswer | null {
  if (f.status === undefined && f.body === undefined && f.bodyBytes === undefined) return null;
  const status = f.status ?? 200;
  let body: Buffer;
  let type: string | null;
  if (f.bodyBytes !== undefined) {
    const head = `{"success":${status < 400},"data":"`;
    const pad = Math.max(0, f.bodyBytes - head.length - 2);
    body = Buffer.from(head + 'x'.repeat(pad) + '"}');
    type = 'application/json';
  } else if (typeof f.body === 'string') {
    body = Buffer.from(f.body);
    type = 'text/plain; charset=utf-8';
  } else {
    const value = f.body === undefined ? { success: status < 400, message: status < 400 ? 'ok' : 'injected fault' } : f.body;
    body = Buffer.from(JSON.stringify(value));
    type = 'application/json';
  }
  if (f.contentType !== undefined) type = f.contentType;
  const headers: Record<string, string | number> = { ...(f.headers ?? {}), 'content-length': body.length };
  if (type !== null) headers['content-type'] = type;
  return { status, headers, body };
}

/** Matches route rules against one call: its method, and its path as rules name it. */
export function routeMatch(method: string, path: string): (f: RouteFault) => boolean {
  const route = normaliseRoute(path);
  return (f) => f.route !== undefined && (f.method === undefined || f.method.toUpperCase() === method) && patternMatches(f.route, route);
}
