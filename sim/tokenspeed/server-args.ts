// What the engine says about itself: TokenSpeed-style ServerArgs (`attn_tp_size` unless launched
// with `none`, `dp_size` only when attention-DP > 1), the rl.* advertisement (all string
// values), secret redaction (recursive), and scheduler_info with `shm_namespace_id`. Read-only over engine state.

import { readFileSync, statSync } from 'node:fs';
import type { TsEngine } from './engine.ts';

const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '[::]', '']);

/** Keys containing api_key, secret or password, or ending in _token, are never shown. */
export function isSecretKey(key: string): boolean {
  const k = key.toLowerCase();
  return k.includes('api_key') || k.includes('secret') || k.includes('password') || k.endsWith('_token');
}

export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) if (!isSecretKey(k)) out[k] = redact(v);
    return out;
  }
  return value;
}

/** `http://<host>:<port>` (IPv6 bracketed); null for a wildcard bind (current builds). */
export function controlUrlFor(host: string, port: number): string | null {
  if (WILDCARD_HOSTS.has(host.trim())) return null;
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `http://${h}:${port}`;
}

/** The raw ServerArgs, secrets included (redacted before anything leaves). */
function rawServerArgs(engine: TsEngine): Record<string, unknown> {
  const o = engine.opts;
  const args: Record<string, unknown> = {
    model: engine.weights.modelPath,
    served_model_name: o.servedModelName,
    tokenizer: o.tokenizerPath || null,
    host: o.host,
    port: engine.grpcPort,
    weight_version: engine.factsVersion(),
    context_length: o.contextLength,
    max_running_requests: o.maxRunningRequests,
    max_total_tokens: engine.maxTotalTokens,
    data_parallel_size: o.dpSize,
    page_size: engine.pageSize,
    load_balance_method: 'round_robin',
    is_embedding: false,
    disaggregation_mode: 'null',
    enable_output_logprobs: o.enableOutputLogprobs,
    kv_events_config: o.kvEvents.config,
    kvstore_storage_backend: o.kvstoreStorageBackend,
    rl_control_port: engine.controlPort,
    rl_control_host: o.rlControlPort === null ? null : o.rlControlHost,
    rl_control_api_key: o.rlControlApiKey,
    api_key: null,
    log_level: 'info',
  };
  if (o.attnTpSize !== null) args.attn_tp_size = o.attnTpSize;
  if (o.dpSize > 1) args.dp_size = o.dpSize;
  const pairing = o.env.SMG_PAIRING_PROTOCOL;
  if (pairing) args.pairing_protocol = pairing;
  return { ...args, ...o.serverArgs };
}

/** The rl.* keys a python servicer merges in when the control app runs (all string values). */
export function rlAdvertisement(engine: TsEngine): Record<string, string> {
  const o = engine.opts;
  if (!o.profile.advertisesRl || !o.rlAdvertise || o.rlControlPort === null) return {};
  const out: Record<string, string> = {};
  // Computed from the bind (null for a wildcard host); a stopped app is still advertised.
  if (engine.controlUrl !== null) out['rl.control_url'] = engine.controlUrl;
  out['rl.pause_modes'] = 'wait,abort,keep';
  out['rl.update_from'] = o.rlUpdateFrom.join(',');
  for (const k of ['rl.abort', 'rl.flush_cache', 'rl.sleep_wake', 'rl.reports_weight_version']) out[k] = 'true';
  return out;
}

/** GetServerInfo.server_args: ServerArgs (redacted) plus the advertisement. */
export function serverArgs(engine: TsEngine): Record<string, unknown> {
  const args = redact(rawServerArgs(engine)) as Record<string, unknown>;
  let rl: Record<string, string> = {};
  try {
    rl = rlAdvertisement(engine);
  } catch {
    // A failing advertisement must not break the call: the worker just has no rl.* labels.
  }
  return { ...args, ...rl };
}

let shmId: string | null = null;

/** `<boot_id>:<st_dev of /dev/shm>`, '' when it cannot be read. */
export function shmNamespaceId(): string {
  if (shmId !== null) return shmId;
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'ascii').trim();
    shmId = `${boot}:${statSync('/dev/shm').dev}`;
  } catch {
    shmId = '';
  }
  return shmId;
}

export function schedulerInfo(engine: TsEngine): Record<string, unknown> {
  return {
    max_total_num_tokens: engine.maxTotalTokens,
    max_req_input_len: engine.opts.contextLength - 1,
    max_running_requests: engine.opts.maxRunningRequests,
    shm_namespace_id: shmNamespaceId(),
  };
}
