// SGLang's answers over the shared ones (sim/core/reply.ts: the call, JSON and bare answers, body
// reading): its pre-built constant buffers, its `ErrorResponse` and `{"error": {"message"}}`
// shapes, and the body rules of its struct routes. It never decides what to answer; handlers do.

import type { ServerResponse } from 'node:http';
import { JSON_TYPE, readObject, sendBuffer, sendJson } from '../core/reply.ts';

const json = (v: unknown): Buffer => Buffer.from(JSON.stringify(v));

export const BUF = {
  paused: json({ message: 'Generation paused successfully.', status: 'ok' }),
  continued: json({ message: 'Generation continued successfully.', status: 'ok' }),
  ok: json({ success: true, message: 'ok' }),
  null: Buffer.from('null'),
  notFound: json({ detail: 'Not Found' }),
  methodNotAllowed: json({ detail: 'Method Not Allowed' }),
  unauthorized: json({ error: 'Unauthorized' }),
  flushed: Buffer.from(
    'Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n',
  ),
};

/** A pre-built JSON answer. */
export function sendConst(res: ServerResponse, status: number, body: Buffer): void {
  sendBuffer(res, status, body, JSON_TYPE);
}

/**
 * A request that does not match the route's struct: SGLang's 400 `ErrorResponse`. Weight routes
 * add `success: false` so clients reading `{success, message}` see a failure either way.
 */
export function sendInvalid(res: ServerResponse, message: string, weightRoute = false): void {
  const body: Record<string, unknown> = { object: 'error', message, type: 'Bad Request', param: null, code: 400 };
  if (weightRoute) body.success = false;
  sendJson(res, 400, body);
}

/** SGLang's `_create_error_response`: 400 `{"error": {"message"}}`. */
export function sendError(res: ServerResponse, message: string, status = 400): void {
  sendJson(res, status, { error: { message } });
}

export type Parsed = { ok: true; value: Record<string, unknown> } | { ok: false; message: string };

/** The JSON object body every SGLang struct route requires (no body → 400, even if all optional). */
export function jsonObject(body: Buffer): Parsed {
  if (body.length === 0) return { ok: false, message: "body: Field required (type=missing, loc=('body',))" };
  const b = readObject(body);
  if (b.ok) return b;
  return { ok: false, message: b.syntaxError === null ? 'body: Input should be a valid dictionary or object' : `body: JSON decode error: ${b.syntaxError}` };
}

/** Like jsonObject, but an absent body counts as `{}` (GET variants of GET/POST routes). */
export function jsonObjectOrEmpty(body: Buffer): Parsed {
  return body.length === 0 ? { ok: true, value: {} } : jsonObject(body);
}

export function queryParam(query: string, name: string): string | null {
  if (query === '') return null;
  return new URLSearchParams(query).get(name);
}
