// How every simulator's HTTP handlers see one call and write answers: the call, JSON and bare
// answers, and reading a JSON body. Each simulator keeps its own error shapes and messages on top
// (SGLang's `ErrorResponse`, the control app's `{success, message}`); this file never decides
// what to answer.

import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Call {
  req: IncomingMessage;
  res: ServerResponse;
  method: string;
  path: string;
  /** Raw query string without '?', '' when absent. */
  query: string;
  body: Buffer;
  /** Set by a `claimSuccessWithoutApplying` fault: answer success, change nothing. */
  claimSuccess: boolean;
}

export type Handler<E> = (engine: E, call: Call) => void | Promise<void>;

export function callOf(req: IncomingMessage, res: ServerResponse, body: Buffer): Call {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  return {
    req,
    res,
    method: req.method ?? 'GET',
    path: q < 0 ? url : url.slice(0, q),
    query: q < 0 ? '' : url.slice(q + 1),
    body,
    claimSuccess: false,
  };
}

export const EMPTY = Buffer.alloc(0);
export const JSON_TYPE = 'application/json';

/** `contentType` null sends no content-type header at all (as Starlette's plain `Response`). */
export function sendBuffer(res: ServerResponse, status: number, body: Buffer, contentType: string | null): void {
  if (res.headersSent || res.destroyed) return;
  const headers: Record<string, string | number> = {};
  if (contentType !== null) headers['content-type'] = contentType;
  headers['content-length'] = body.length;
  res.writeHead(status, headers);
  res.end(body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  sendBuffer(res, status, Buffer.from(JSON.stringify(value)), JSON_TYPE);
}

/** No body and no content-type (SGLang's health and abort_request answers). */
export function sendEmpty(res: ServerResponse, status: number): void {
  sendBuffer(res, status, EMPTY, null);
}

/** A body as JSON: `value` undefined when there was none, ok false when it does not parse. */
export function readJson(body: Buffer): { ok: true; value: unknown } | { ok: false } {
  if (body.length === 0) return { ok: true, value: undefined };
  try {
    return { ok: true, value: JSON.parse(body.toString('utf8')) };
  } catch {
    return { ok: false };
  }
}

/** A body that must be a JSON object; on failure, the parser's message (null: valid JSON, not an object). */
export type ObjectBody = { ok: true; value: Record<string, unknown> } | { ok: false; syntaxError: string | null };

export function readObject(body: Buffer): ObjectBody {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch (e) {
    return { ok: false, syntaxError: (e as Error).message };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { ok: false, syntaxError: null };
  return { ok: true, value: v as Record<string, unknown> };
}

export function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

export function isStringList(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}
