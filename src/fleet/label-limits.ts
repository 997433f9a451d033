// The bounds on a worker's caller labels, in one place: the request schemas document them and
// checkLabels enforces them (the registry calls it before any change). Every replica holds the
// whole registry and every `GET /workers` lists it, so unbounded labels cost memory and answer
// size fleet-wide.

import { GatewayError } from '../api/errors.ts';

export const LABEL_LIMITS = Object.freeze({
  /** Labels on one worker. */
  maxCount: 64,
  /** Characters in one key (the schema's bound since the first release). */
  maxKeyLength: 256,
  /** Characters in one value. */
  maxValueLength: 4096,
  /** UTF-8 bytes of all keys and values together. */
  maxTotalBytes: 64 * 1024,
});

function refuse(message: string, limit: string, max: number, key?: string): GatewayError {
  return new GatewayError('invalid_request', message, { field: 'labels', limit, max, key: key === undefined ? undefined : key.slice(0, 64) });
}

/** Throws GatewayError('invalid_request') naming the bound a label set breaks. */
export function checkLabels(labels: Record<string, string> | undefined): void {
  if (labels === undefined) return;
  const L = LABEL_LIMITS;
  const keys = Object.keys(labels);
  if (keys.length > L.maxCount) throw refuse(`at most ${L.maxCount} labels, got ${keys.length}`, 'count', L.maxCount);
  let total = 0;
  for (const key of keys) {
    const value = labels[key]!;
    if (key.length > L.maxKeyLength)
      throw refuse(`a label key must be at most ${L.maxKeyLength} characters, got ${key.length}`, 'key_length', L.maxKeyLength, key);
    if (typeof value !== 'string') throw refuse(`label \`${key.slice(0, 64)}\` must be a string`, 'value_type', 0, key);
    if (value.length > L.maxValueLength)
      throw refuse(`label \`${key.slice(0, 64)}\` must be at most ${L.maxValueLength} characters, got ${value.length}`, 'value_length', L.maxValueLength, key);
    total += Buffer.byteLength(key) + Buffer.byteLength(value);
  }
  if (total > L.maxTotalBytes)
    throw refuse(`labels must total at most ${L.maxTotalBytes} bytes (keys and values, UTF-8), got ${total}`, 'total_bytes', L.maxTotalBytes);
}
