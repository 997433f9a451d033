// How the control app reads bodies and answers over the shared reply
// helpers (sim/core/reply.ts): success answers, the `{"success": false, "message": "Invalid
// request: …"}` 400 shape, and the two body rules of current builds (required → 400 when missing
// or malformed; optional → absent means `{}`). It never decides what to answer; the route files do.

import { readObject, sendJson, type Call } from '../core/reply.ts';

export function ok(call: Call, value: Record<string, unknown> = {}): void {
  sendJson(call.res, 200, { success: true, ...value });
}

/** Handler said no: 400 with its message. */
export function refuse(call: Call, message: string, status = 400): void {
  sendJson(call.res, status, { success: false, message });
}

/** Missing or invalid fields. */
export function invalid(call: Call, detail: string): void {
  refuse(call, `Invalid request: ${detail}`);
}

function parsed(call: Call): Record<string, unknown> | null {
  const b = readObject(call.body);
  if (b.ok) return b.value;
  invalid(call, b.syntaxError === null ? 'the body must be a JSON object' : `malformed JSON body (${b.syntaxError})`);
  return null;
}

/** Routes that need a body: none → 400. */
export function requiredBody(call: Call): Record<string, unknown> | null {
  if (call.body.length === 0) {
    invalid(call, 'a JSON body is required');
    return null;
  }
  return parsed(call);
}

/** Routes whose body is optional: none (or whitespace) counts as `{}`. */
export function optionalBody(call: Call): Record<string, unknown> | null {
  if (call.body.toString('utf8').trim() === '') return {};
  return parsed(call);
}
