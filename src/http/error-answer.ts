// What an error thrown by a route becomes on the wire: its status and `{error, message, ...}`
// envelope. One mapping for fastify's error handler (app.ts) and the hot path (hot-path.ts), so a
// refusal reads the same whichever door the request came through. It never writes the answer.

import type { FastifyError } from 'fastify';
import { GatewayError } from '../api/errors.ts';

export interface ErrorAnswer {
  status: number;
  body: Record<string, unknown>;
  /** Not a refusal of ours or the caller's fault: logged as an internal error. */
  internal: boolean;
}

export function errorAnswer(err: unknown, maxBodyBytes: number): ErrorAnswer {
  if (err instanceof GatewayError) return { status: err.status, body: err.toJSON(), internal: false };
  const e = err as FastifyError;
  if (e.validation) return { status: 400, body: { error: 'invalid_request', message: e.message }, internal: false };
  if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return { status: 413, body: { error: 'payload_too_large', message: `request body exceeds ${maxBodyBytes} bytes`, limit: maxBodyBytes }, internal: false };
  }
  if (e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return { status: 415, body: { error: 'unsupported_media_type', message: e.message }, internal: false };
  const status = e.statusCode;
  if (status !== undefined && status >= 400 && status < 500) return { status, body: { error: 'invalid_request', message: e.message }, internal: false };
  return { status: 500, body: { error: 'internal_error', message: 'internal error' }, internal: true };
}
