// The admin bearer check, in constant time: one implementation for /v1/rl and worker changes.

import { timingSafeEqual } from 'node:crypto';

export function bearerMatches(header: string | undefined, key: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1]!.trim());
  const want = Buffer.from(key);
  return given.length === want.length && timingSafeEqual(given, want);
}
