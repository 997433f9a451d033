// The engine route of a proxied control call: validation of the `{*path}`
// catch-all, the bounded `op` metric label, and the query string forwarded to the engine.
// Pure string work: never decodes the path (the router already did) and never re-encodes a query.

import { GatewayError } from '../api/errors.ts';

/** `inference/v1/generate` is 3; one more leaves room without opening arbitrary depth. */
export const MAX_SEGMENTS = 4;

const SEGMENT = /^[A-Za-z0-9._-]+$/;

function invalid(reason: string): GatewayError {
  return new GatewayError('invalid_engine_path', `invalid engine path: ${reason}`);
}

/**
 * SMG's engine path rules: `decoded` is the percent-decoded catch-all. Strips one leading `/`
 * and returns the path without it, or throws `invalid_engine_path`.
 */
export function validateEnginePath(decoded: string): string {
  const path = decoded.startsWith('/') ? decoded.slice(1) : decoded;
  if (path.length === 0) throw invalid('path is empty');
  if (path.includes('?') || path.includes('#')) throw invalid('path must not contain `?` or `#`');
  const segments = path.split('/');
  if (segments.length > MAX_SEGMENTS) throw invalid(`path has more than ${MAX_SEGMENTS} segments`);
  for (const seg of segments) {
    if (seg.length === 0) throw invalid('path has an empty segment');
    if (seg === '.' || seg === '..') throw invalid('path must not contain `.` or `..` segments');
    if (!SEGMENT.test(seg)) throw invalid(`segment \`${seg}\` contains characters outside [A-Za-z0-9._-]`);
  }
  return path;
}

/**
 * The engine routes that get their own metric `op` label; everything else is `other`, so callers
 * cannot mint label values.
 */
export const CONTROL_OPS: ReadonlySet<string> = new Set([
  'pause_generation',
  'continue_generation',
  'pause',
  'resume',
  'update_weights_from_disk',
  'update_weights_from_tensor',
  'update_weights_from_distributed',
  'init_weights_update_group',
  'destroy_weights_update_group',
  'update_weight_version',
  'flush_cache',
  'abort_request',
  'release_memory_occupation',
  'resume_memory_occupation',
  'sleep',
  'wake_up',
  'collective_rpc',
  'server_info',
  'get_server_info',
  'health',
]);

/** Calls that move weights onto the engine. */
export const WEIGHT_PATHS: ReadonlySet<string> = new Set([
  'update_weights_from_disk',
  'update_weights_from_tensor',
  'update_weights_from_ipc',
  'update_weights_from_distributed',
]);
/** Calls during which the engine is `refitting`: the weight moves and the group set-up around them. */
const REFIT_PATHS: ReadonlySet<string> = new Set([...WEIGHT_PATHS, 'init_weights_update_group', 'destroy_weights_update_group']);
/** Calls that stop generation: the engine leaves routing when they are sent. */
const PAUSE_PATHS: ReadonlySet<string> = new Set(['pause_generation', 'pause', 'release_memory_occupation', 'sleep']);

/** What a call does to the engine's lifecycle while it runs (the engine actor's command op). */
export function lifecycleOp(path: string): 'refit' | 'pause' | 'other' {
  return REFIT_PATHS.has(path) ? 'refit' : PAUSE_PATHS.has(path) ? 'pause' : 'other';
}

/** The metric `op` label for a validated path: the path itself when listed, else `other`. */
export function controlOp(path: string): string {
  return CONTROL_OPS.has(path) ? path : 'other';
}

/** A query key as the gateway's own query parser sees it (`+` is a space, `%xx` decoded). */
function decodedKey(rawKey: string): string {
  try {
    return decodeURIComponent(rawKey.replace(/\+/g, ' '));
  } catch {
    return rawKey;
  }
}

/**
 * The query sent to the engine: the caller's raw query (without `?`) minus every `selector`
 * pair and every empty pair; other pairs keep their order and bytes, duplicates included. `''` when
 * nothing is left (send no `?`).
 */
export function queryWithoutSelector(rawQuery: string): string {
  if (rawQuery.length === 0) return '';
  const kept: string[] = [];
  for (const pair of rawQuery.split('&')) {
    if (pair.length === 0) continue;
    const eq = pair.indexOf('=');
    const key = eq === -1 ? pair : pair.slice(0, eq);
    // Compared decoded, so `sel%65ctor=...` (which the gateway took as its selector) is not
    // forwarded either; a bare `selector` is the parameter with an empty value and goes too.
    if (decodedKey(key) === 'selector') continue;
    kept.push(pair);
  }
  return kept.join('&');
}
