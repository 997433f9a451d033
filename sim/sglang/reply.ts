// How the simulator writes answers: JSON, bare bodies without a content-type (as Starlette's plain
// `Response`), pre-built constant buffers, and SGLang's error shapes. It never decides what to
// answer; handlers do.

import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Call {
  req: IncomingMessage;
  res: ServerResponse;
  method: string;
  path: string;
  query: string;
  body: Buffer;
  /** Set by a `claimSuccessWithoutApplying` fault: answer success, change nothing. */
  claimSuccess: boolean;
}

const JSON_TYPE = 'application/json';

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  sendBuffer(res, status, Buffer.from(JSON.stringify(value)), JSON_TYPE);
}

/** `contentType` null sends no content-type header at all. */
export function sendBuffer(res: ServerResponse, status: number, body: Buffer, contentType: string | null): void {
  if (res.headersSent || res.destroyed) return;
  const headers: Record<string, string | number> = { 'content-length': body.length };
  if (contentType !== null) headers['content-type'] = contentType;
  res.writeHead(status, headers);
  res.end(body);
}

/** 200/503 with no body and no content-type (health, abort_request). */
export function sendEmpty(res: ServerResponse, status: number): void {
  sendBuffer(res, status, EMPTY, null);
}

export const EMPTY = Buffer.alloc(0);
export const json = (v: unknown): Buffer => Buffer.from(JSON.stringify(v));

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
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch (e) {
    return { ok: false, message: `body: JSON decode error: ${(e as Error).message}` };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    return { ok: false, message: 'body: Input should be a valid dictionary or object' };
  }
  return { ok: true, value: v as Record<string, unknown> };
}

/** Like jsonObject, but an absent body counts as `{}` (GET variants of GET/POST routes). */
export function jsonObjectOrEmpty(body: Buffer): Parsed {
  return body.length === 0 ? { ok: true, value: {} } : jsonObject(body);
}

export function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

export function isStringList(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}

export function queryParam(query: string, name: string): string | null {
  if (query === '') return null;
  return new URLSearchParams(query).get(name);
}
