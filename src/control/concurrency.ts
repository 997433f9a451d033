// How many legs of one fan-out run at once on each owning replica. A call that moves weights
// (a disk load, a tensor or IPC update) is held to a few at a time, so a fleet does not read the
// same checkpoint all at once; any other call (pause, resume, a version read) goes to the whole
// fleet at once, since it costs the engine nothing. An operator's setting applies to every call,
// and a request may name its own (`x-rlgate-fanout-concurrency`).

import { GatewayError } from '../api/errors.ts';
import { WEIGHT_PATHS } from '../engines/engine-path.ts';

/** Default for calls that move weights. */
export const WEIGHT_CONCURRENCY = 32;
/** Floor of the default for every other call. */
export const MIN_CONCURRENCY = 256;
/** Largest concurrency a request may ask for. */
const MAX_REQUESTED = 65_536;

export const CONCURRENCY_HEADER = 'x-rlgate-fanout-concurrency';

/**
 * The concurrency of a fan-out of `path` to `targets` engines: the request's own, else the
 * operator's, else by call.
 */
export function fanoutConcurrency(path: string, targets: number, configured: number | undefined, requested?: number): number {
  if (requested !== undefined) return requested;
  if (configured !== undefined) return configured;
  return WEIGHT_PATHS.has(path) ? WEIGHT_CONCURRENCY : Math.max(MIN_CONCURRENCY, targets);
}

/** The request's own concurrency from its header, or undefined; a bad value is a 400. */
export function requestedConcurrency(header: string | string[] | undefined): number | undefined {
  if (header === undefined) return undefined;
  const text = Array.isArray(header) ? (header.length === 1 ? header[0]! : '') : header;
  const n = /^\s*\d{1,6}\s*$/.test(text) ? Number(text) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > MAX_REQUESTED) {
    throw new GatewayError('invalid_request', `header \`${CONCURRENCY_HEADER}\` must be one integer from 1 to ${MAX_REQUESTED}`, {
      header: CONCURRENCY_HEADER,
    });
  }
  return n;
}
