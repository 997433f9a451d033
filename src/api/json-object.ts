// A request body that must be a JSON object: strict UTF-8 JSON, or a 400 whose code the caller
// names and whose message says what was wrong. The HTTP routes and the data-plane checks
// (relay/data-plane-input.ts) refuse a malformed body alike through here.

import { GatewayError } from './errors.ts';

// JSON text is UTF-8 (RFC 8259 §8.1): invalid bytes are a malformed body, not U+FFFD.
const UTF8 = new TextDecoder('utf-8', { fatal: true });

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
