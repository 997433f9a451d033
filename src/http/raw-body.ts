// Route groups that must see the caller's bytes untouched (control pass-through, RL writes)
// install this parser in their own scope: every content type, or none, arrives as a Buffer.

import type { FastifyInstance } from 'fastify';
import { parseJsonObject } from '../api/json-object.ts';

export function acceptRawBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
}

export function rawBody(body: unknown): Buffer | null {
  return Buffer.isBuffer(body) && body.length > 0 ? body : null;
}

/** Parses a JSON object body for the RL write routes; every failure is `invalid_body` (400). */
export function jsonObjectBody(body: unknown): Record<string, unknown> {
  return parseJsonObject(rawBody(body), 'invalid_body');
}
