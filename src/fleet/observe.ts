// Passthrough observation: what a 2xx answer to a proxied control route says about
// the engine — a control state, or the weight version its refit body carried. Read-only and
// pure: it never sees statuses (call it for 2xx only), never writes the table, never logs values.

import { checkVersion } from './versions.ts';
import type { VersionRejection } from './versions.ts';

export type ControlState = 'active' | 'paused' | 'asleep';

export interface Observation {
  control?: ControlState;
  version?: string;
  /** Why a version route observed nothing; a tag for the log line, never the value. */
  rejected?: 'not_json' | 'missing' | 'wrong_type' | VersionRejection;
}

const CONTROL_ROUTES: Readonly<Record<string, ControlState>> = {
  pause_generation: 'paused',
  pause: 'paused',
  continue_generation: 'active',
  resume: 'active',
  resume_memory_occupation: 'active',
  wake_up: 'active',
  release_memory_occupation: 'asleep',
  sleep: 'asleep',
};

/** The request-body field each version route carries its version in. */
const VERSION_ROUTES: Readonly<Record<string, string>> = {
  update_weights_from_disk: 'weight_version',
  update_weights_from_tensor: 'weight_version',
  update_weights_from_distributed: 'weight_version',
  // `weight_version` is ignored here: SGLang relabels from `new_version` only.
  update_weight_version: 'new_version',
};

// Invalid UTF-8 and a BOM are not JSON to SMG's serde_json either.
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function textOf(body: Uint8Array | string | null): string | undefined {
  if (body === null) return '';
  if (typeof body === 'string') return body;
  try {
    return UTF8.decode(body);
  } catch {
    return undefined;
  }
}

const JSON_WS = new Set([' ', '\t', '\n', '\r']);
const INTEGER = /^-?(0|[1-9][0-9]*)$/;

/** End index (exclusive) of the JSON string token starting at `i` (a `"`). */
function skipString(text: string, i: number): number {
  let j = i + 1;
  while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
  return j + 1;
}

/**
 * The raw text of the last top-level member `key` of `text`, which `JSON.parse` has already
 * accepted as an object. Used for integer versions: `JSON.parse` rounds integers past 2^53
 * (a nanosecond timestamp), while SMG renders a u64 exactly as it was written.
 */
function rawMember(text: string, key: string): string | undefined {
  let i = 0;
  const ws = () => {
    while (JSON_WS.has(text[i])) i++;
  };
  let found: string | undefined;
  ws();
  i++; // `{`
  for (;;) {
    ws();
    if (text[i] === '}') return found;
    const keyEnd = skipString(text, i);
    const name = JSON.parse(text.slice(i, keyEnd)) as string;
    i = keyEnd;
    ws();
    i++; // `:`
    ws();
    const start = i;
    if (text[i] === '"') {
      i = skipString(text, i);
    } else if (text[i] === '{' || text[i] === '[') {
      let depth = 0;
      do {
        const c = text[i];
        if (c === '"') {
          i = skipString(text, i);
          continue;
        }
        if (c === '{' || c === '[') depth++;
        else if (c === '}' || c === ']') depth--;
        i++;
      } while (depth > 0);
    } else {
      while (i < text.length && !JSON_WS.has(text[i]) && text[i] !== ',' && text[i] !== '}') i++;
    }
    if (name === key) found = text.slice(start, i);
    ws();
    if (text[i] === ',') i++;
  }
}

/**
 * Passthrough observation: what a 2xx call to `path` (the validated engine path; one leading
 * `/` is ignored) with `requestBody` records. Control routes record a state whatever the body; version routes
 * record the validated version field or say why not; every other route records nothing (`{}`).
 */
export function observeControlCall(path: string, requestBody: Uint8Array | string | null): Observation {
  const route = path.startsWith('/') ? path.slice(1) : path;
  if (Object.hasOwn(CONTROL_ROUTES, route)) return { control: CONTROL_ROUTES[route] };
  if (!Object.hasOwn(VERSION_ROUTES, route)) return {};
  const field = VERSION_ROUTES[route];

  const text = textOf(requestBody);
  if (text === undefined) return { rejected: 'not_json' };
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { rejected: 'not_json' };
  }
  // A top-level array, string or number cannot carry the field; SMG's probe fails to decode it.
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return { rejected: 'not_json' };

  const value = Object.hasOwn(body, field) ? (body as Record<string, unknown>)[field] : undefined;
  if (value === undefined || value === null) return { rejected: 'missing' };
  let raw: string;
  if (typeof value === 'string') {
    raw = value;
  } else if (typeof value === 'number') {
    // `-1e400` parses to -Infinity here; serde_json refuses the whole body as out of range.
    if (!Number.isFinite(value)) return { rejected: 'not_json' };
    const token = rawMember(text, field);
    raw = token !== undefined && INTEGER.test(token) ? token : String(value);
  } else {
    return { rejected: 'wrong_type' };
  }
  const checked = checkVersion(raw);
  return checked.ok ? { version: checked.value } : { rejected: checked.reason };
}
