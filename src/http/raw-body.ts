// Route groups that must see the caller's bytes untouched (control pass-through, RL writes)
// install this parser in their own scope: every content type, or none, arrives as a Buffer.

import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../api/errors.ts';

export function acceptRawBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
}

export function rawBody(body: unknown): Buffer | null {
  return Buffer.isBuffer(body) && body.length > 0 ? body : null;
}

// JSON text is UTF-8 (RFC 8259 §8.1): invalid bytes are a malformed body, not U+FFFD.
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** Parses a JSON object body for the RL write routes; every failure is `invalid_body` (400). */
export function jsonObjectBody(body: unknown): Record<string, unknown> {
  return parseJsonObject(rawBody(body), 'invalid_body');
}

/** Strict UTF-8 JSON object, or a 400 with the given code that says what was wrong. */
export function parseJsonObject(raw: Buffer | null, code: 'invalid_body' | 'invalid_request'): Record<string, unknown> {
  if (!raw) throw new GatewayError(code, 'request body is missing: expected a JSON object');
  let value: unknown;
  try {
    value = JSON.parse(UTF8.decode(raw));
  } catch (err) {
    throw new GatewayError(code, `request body is not valid JSON: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new GatewayError(code, 'request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}
