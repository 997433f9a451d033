// How the control app reads bodies and writes answers (spec/engines.md §3.3): JSON answers, the
// `{"success": false, "message": "Invalid request: …"}` 400 shape, and the two body rules of
// current builds (required → 400 when missing or malformed; optional → absent means `{}`).
// It never decides what to answer; the route files do.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TsEngine } from './engine.ts';

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

export type Handler = (engine: TsEngine, call: Call) => void | Promise<void>;

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const body = Buffer.from(JSON.stringify(value));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

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

export type Body = { ok: true; value: Record<string, unknown> } | { ok: false; detail: string };

function parse(body: Buffer): Body {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch (e) {
    return { ok: false, detail: `malformed JSON body (${(e as Error).message})` };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { ok: false, detail: 'the body must be a JSON object' };
  return { ok: true, value: v as Record<string, unknown> };
}

/** Routes that need a body: none → 400. */
export function requiredBody(call: Call): Record<string, unknown> | null {
  if (call.body.length === 0) { invalid(call, 'a JSON body is required'); return null; }
  const b = parse(call.body);
  if (!b.ok) { invalid(call, b.detail); return null; }
  return b.value;
}

/** Routes whose body is optional: none (or whitespace) counts as `{}`. */
export function optionalBody(call: Call): Record<string, unknown> | null {
  if (call.body.toString('utf8').trim() === '') return {};
  const b = parse(call.body);
  if (!b.ok) { invalid(call, b.detail); return null; }
  return b.value;
}

export function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

export function isStringList(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}
