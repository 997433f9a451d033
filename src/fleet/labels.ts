// Labels discovered from an engine at registration: which server/model info
// keys become labels, how values are rendered as text, TokenSpeed's parallelism spellings, and
// the unsigned-integer reading of size labels. Pure: the discovery calls live in src/engines.

import { trimWhiteSpace } from './versions.ts';

/** The server-info keys taken as labels (SMG `TOKENSPEED_GRPC_KEYS`, newer builds included). */
export const DISCOVERED_KEYS: readonly string[] = Object.freeze([
  'model',
  'served_model_name',
  'tokenizer',
  'tp_size',
  'dp_size',
  'pp_size',
  'context_length',
  'max_total_tokens',
  'max_running_requests',
  'load_balance_method',
  'is_embedding',
  'vocab_size',
  'weight_version',
  'constrained_decoding_mode',
]);

/** TokenSpeed spellings folded into the canonical keys when those are absent. */
export const PARALLELISM_ALIASES: readonly (readonly [alias: string, canonical: string])[] = Object.freeze([
  ['attn_tp_size', 'tp_size'],
  ['pipeline_parallel_size', 'pp_size'],
  ['data_parallel_size', 'dp_size'],
] as const);

/** Engines advertise `rl.control_url` and capabilities under this prefix. */
export const RL_LABEL_PREFIX = 'rl.';

function own(obj: Record<string, unknown>, key: string): unknown {
  return Object.hasOwn(obj, key) ? obj[key] : undefined;
}

/** A server-info value as a label: strings as they are, numbers and booleans as text. */
function labelValue(v: unknown): string | undefined {
  if (typeof v === 'string') return v.length > 0 ? v : undefined;
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : undefined;
  if (typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return String(v);
  return undefined;
}

/** Fill `tp_size`, `pp_size`, `dp_size` from TokenSpeed's spellings where they are absent. */
export function foldParallelism(labels: Record<string, string>): Record<string, string> {
  const out = { ...labels };
  for (const [alias, canonical] of PARALLELISM_ALIASES) {
    const value = own(out, alias);
    if (own(out, canonical) === undefined && typeof value === 'string') out[canonical] = value;
  }
  return out;
}

/**
 * Labels of an SGLang HTTP worker from its flat `/server_info` and `/model_info`: the
 * `DISCOVERED_KEYS` present, `version` (the engine version), every `rl.*` key, and the folded
 * parallelism keys. Model info fills keys server info lacks, and its `weight_version` always
 * wins: it is where the live version is read from. For a gRPC worker pass
 * its `server_args` with `version` set to the engine version.
 */
export function labelsFromServerInfo(serverInfo: Record<string, unknown>, modelInfo: Record<string, unknown> | null): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const key of DISCOVERED_KEYS) {
    const v = labelValue(own(serverInfo, key));
    if (v !== undefined) picked[key] = v;
  }
  for (const [alias] of PARALLELISM_ALIASES) {
    const v = labelValue(own(serverInfo, alias));
    if (v !== undefined) picked[alias] = v;
  }
  const folded = foldParallelism(picked);
  const out: Record<string, string> = {};
  for (const key of DISCOVERED_KEYS) if (own(folded, key) !== undefined) out[key] = folded[key];

  const version = labelValue(own(serverInfo, 'version')) ?? labelValue(own(serverInfo, 'tokenspeed_version'));
  if (version !== undefined) out.version = version;

  for (const key of Object.keys(serverInfo)) {
    if (!key.startsWith(RL_LABEL_PREFIX)) continue;
    const v = labelValue(serverInfo[key]);
    if (v !== undefined) out[key] = v;
  }

  if (modelInfo !== null) {
    for (const key of DISCOVERED_KEYS) {
      const v = labelValue(own(modelInfo, key));
      if (v === undefined) continue;
      if (key === 'weight_version' || own(out, key) === undefined) out[key] = v;
    }
  }
  return out;
}

/**
 * `model_path` of an SGLang HTTP worker: where its weights were loaded from, the path a disk refit
 * is given back (SMG's HTTP discovery keeps it; its end-to-end test refits from it). Model info
 * wins over server info, as in SMG, where the later read overrides the earlier one.
 */
export function modelPathLabel(serverInfo: Record<string, unknown>, modelInfo: Record<string, unknown> | null): string | undefined {
  const fromModel = modelInfo === null ? undefined : labelValue(own(modelInfo, 'model_path'));
  return fromModel ?? labelValue(own(serverInfo, 'model_path'));
}

const U64_TEXT = /^\+?[0-9]+$/;

/**
 * A size label (`tp_size`, `dp_size`, `pp_size`) as an unsigned integer after trimming; null
 * when absent or not one (`"garbage"` → null). Values past 2^53 are null: JS cannot carry them.
 */
export function sizeLabel(value: string | undefined): number | null {
  if (value === undefined) return null;
  const t = trimWhiteSpace(value);
  if (!U64_TEXT.test(t)) return null;
  const n = Number(t);
  return Number.isSafeInteger(n) ? n : null;
}

/**
 * A gRPC `GetModelInfoResponse` as labels (SMG `flat_labels`): empty strings (and the literal
 * `"null"`), zero numbers, null and empty arrays are skipped; booleans are kept as
 * `"true"`/`"false"`; non-empty arrays are JSON-encoded; nested objects are skipped.
 */
export function flattenModelInfo(info: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, v] of Object.entries(info)) {
    if (typeof v === 'string') {
      if (v.length > 0 && v !== 'null') out[key] = v;
    } else if (typeof v === 'number') {
      if (Number.isFinite(v) && v !== 0) out[key] = String(v);
    } else if (typeof v === 'bigint') {
      if (v !== 0n) out[key] = String(v);
    } else if (typeof v === 'boolean') {
      out[key] = String(v);
    } else if (Array.isArray(v)) {
      if (v.length > 0) out[key] = JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? String(x) : x));
    }
  }
  return out;
}
