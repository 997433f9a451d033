// The bearer checks, in constant time: one implementation for /v1/rl, worker changes and
// worker registration.

import { timingSafeEqual } from 'node:crypto';
import { GatewayError } from '../api/errors.ts';

export function bearerMatches(header: string | undefined, key: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1]!.trim());
  const want = Buffer.from(key);
  return given.length === want.length && timingSafeEqual(given, want);
}

/**
 * `POST /workers` and `/add_worker` with `--registration-key` set: its bearer, or the admin one.
 * Without a registration key, registering stays open (slime sends no key).
 */
export function checkRegistrationBearer(header: string | undefined, keys: { registrationKey?: string; adminKey?: string }): void {
  if (!keys.registrationKey) return;
  if (bearerMatches(header, keys.registrationKey) || (keys.adminKey !== undefined && keys.adminKey !== '' && bearerMatches(header, keys.adminKey))) return;
  throw new GatewayError('unauthorized', 'registering a worker needs the registration (or admin) bearer token');
}
