// SGLang's fault rules: route faults (sim/core/route-faults.ts: delay, canned status/body on any
// path, SGLang route or not, hang, connection drop, process exit, "claims success without
// applying", run if abandoned) and nothing else. It owns the accepted keys and parsing; the
// shared front performs them.

import { checkCommon, FaultError, faultObjects, normaliseRoute } from '../core/faults.ts';
import { cannedAnswer, checkRouteFault, type RouteFault, type RouteRule } from '../core/route-faults.ts';

export interface Fault extends RouteFault {
  route: string;
}

const KEYS = new Set([
  'route',
  'method',
  'delayMs',
  'status',
  'body',
  'bodyBytes',
  'contentType',
  'headers',
  'times',
  'hang',
  'drop',
  'exit',
  'claimSuccessWithoutApplying',
  'runIfAbandoned',
]);

/** Validates one fault object or a list of them. */
export function parseFaults(input: unknown): Fault[] {
  return faultObjects(input, KEYS).map((raw, i) => {
    if (typeof raw.route !== 'string' || raw.route.trim() === '') throw new FaultError(`fault ${i}: route is required`);
    const f: Fault = { ...raw, route: normaliseRoute(raw.route) } as Fault;
    checkCommon(f, i);
    checkRouteFault(f, i);
    return f;
  });
}

/** A fault with its canned answer built once. */
export function ruleOf(fault: Fault): RouteRule {
  return { fault, canned: cannedAnswer(fault) };
}
