// Options of the TokenSpeed simulator: their defaults and how they resolve against the servicer
// profile and the environment (KV events, health timeout, rust tuning). It owns every option name
// and default; the command line lives in cli.ts. It never starts a server.

import type { JoinGroup } from '../broadcast/types.ts';
import type { CostModel } from '../core/cost-model.ts';
import { positiveInt, resolveEngineOptions, type EngineOptions } from '../core/options.ts';
import type { FaultRule } from './faults.ts';
import { healthCheckTimeoutMs, profileFor, rustTuning, type ImplSource, type RustTuning, type ServicerImpl, type ServicerProfile } from './profile.ts';

/** What goes into weight_version fields 7/12: the live version, nothing, or a fixed string. */
export type StampMode = { kind: 'live' } | { kind: 'none' } | { kind: 'fixed'; value: string };

export interface TokenspeedSimOptions extends EngineOptions {
  /** gRPC bind address; default 127.0.0.1. */
  host?: string;
  /** gRPC port; 0 = any free port. */
  port?: number;
  /** Admin HTTP port (`/_sim/*`, always 127.0.0.1); 0 = any free port. */
  adminPort?: number;
  /** Start the RL control app on this port (0 = any free port); null/undefined = no control app. */
  rlControlPort?: number | null;
  /** Control app bind host; default 127.0.0.1 (current builds default to loopback). */
  rlControlHost?: string;
  /** Bearer key every control route requires. */
  rlControlApiKey?: string | null;
  /** Merge the rl.* keys into GetServerInfo (python profile only); default true. */
  rlAdvertise?: boolean;
  /** Supported refit sources, advertised sorted as rl.update_from; default ['distributed']. */
  rlUpdateFrom?: string[];
  servicerImpl?: ServicerImpl;
  servicerImplSource?: ImplSource;
  /** Tokenizer path reported and served by GetTokenizer; '' = none (FAILED_PRECONDITION). Default = model. */
  tokenizerPath?: string;
  /** Default: live for python, none for rust. */
  stamp?: StampMode;
  /**
   * `attn_tp_size` in server_args; also the GPUs joined to a group. Default 1, what a single-GPU
   * engine reports; null leaves it out, as a bare launch of builds that report no width does.
   */
  attnTpSize?: number | null;
  /** Attention-DP width: `data_parallel_size`, `dp_size` when > 1, one load entry per rank. */
  dpSize?: number;
  /** `--enable-output-logprobs`: without it, Generate carries no logprobs. Default false. */
  enableOutputLogprobs?: boolean;
  /** `--kv-events-config` JSON as given (or 'off'); undefined = the profile's default. */
  kvEventsConfig?: string;
  /** Interval of load-only KvEventBatch pushes on SubscribeKvEvents streams; default 1000 ms. */
  kvLoadIntervalMs?: number;
  /** L3 KV storage backend (refuses update_weight_version and versionless flushing refits). */
  kvstoreStorageBackend?: string | null;
  faults?: FaultRule[];
  /** Deep health probe timeout; default TOKENSPEED_HEALTH_CHECK_TIMEOUT (20 s). */
  healthCheckTimeoutMs?: number;
  /** Extra ServerArgs keys (a way to show redaction or add `tp_size`). */
  serverArgs?: Record<string, unknown>;
  /** How long SIGTERM lets in-flight requests finish; default rust DRAIN_SECS, else 5 s. */
  drainMs?: number;
  /** Broadcast transport; without it the group routes validate and record metadata only. */
  joinGroup?: JoinGroup;
  /** Called by `exit` faults and POST /_sim/exit; default: close everything. */
  onExit?: (code: number) => void;
  /** Environment the profile and tuning variables are read from; default process.env. */
  env?: NodeJS.ProcessEnv;
}

export interface KvEventsSetting {
  enabled: boolean;
  /** What server_args.kv_events_config reports (a JSON string), or null. */
  config: string | null;
  /** Where it came from: explicit flag, the rust default, or off. */
  source: 'flag' | 'rust-default' | 'off';
}

export type ResolvedOptions = Required<
  Omit<
    TokenspeedSimOptions,
    'joinGroup' | 'onExit' | 'env' | 'kvEventsConfig' | 'rlControlPort' | 'rlControlApiKey' | 'attnTpSize' | 'kvstoreStorageBackend' | 'cost'
  >
> & {
  cost: CostModel;
  rlControlPort: number | null;
  rlControlApiKey: string | null;
  attnTpSize: number | null;
  kvstoreStorageBackend: string | null;
  joinGroup: JoinGroup | null;
  onExit: ((code: number) => void) | null;
  profile: ServicerProfile;
  rustTuning: RustTuning | null;
  kvEvents: KvEventsSetting;
  env: NodeJS.ProcessEnv;
};

const RUST_DEFAULT_KV = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: 'tcp://*:5557' };

function resolveKvEvents(raw: string | undefined, profile: ServicerProfile): KvEventsSetting {
  if (raw === undefined) {
    return profile.kvEventsByDefault
      ? { enabled: true, config: JSON.stringify(RUST_DEFAULT_KV), source: 'rust-default' }
      : { enabled: false, config: null, source: 'off' };
  }
  const t = raw.trim();
  if (['', 'off', 'none', 'null', 'false'].includes(t.toLowerCase())) return { enabled: false, config: t || null, source: 'flag' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(t);
  } catch {
    throw new Error(`--kv-events-config needs JSON or "off", got ${raw}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('--kv-events-config must be a JSON object');
  return { enabled: (parsed as Record<string, unknown>).enable_kv_cache_events === true, config: t, source: 'flag' };
}

export function resolveOptions(o: TokenspeedSimOptions): ResolvedOptions {
  const env = o.env ?? process.env;
  const impl = o.servicerImpl ?? 'python';
  const profile = profileFor(impl, env);
  const tuning = impl === 'rust' ? rustTuning(env) : null;
  const engine = resolveEngineOptions(o);
  const port = (v: number | null | undefined, name: string): number | null => {
    if (v === undefined || v === null) return null;
    if (!Number.isInteger(v) || v < 0 || v > 65535) throw new Error(`${name} must be a port number`);
    return v;
  };
  const updateFrom = [...new Set((o.rlUpdateFrom ?? ['distributed']).map((s) => s.trim()).filter(Boolean))].sort();
  return {
    host: o.host ?? '127.0.0.1',
    port: port(o.port, 'port') ?? 0,
    adminPort: port(o.adminPort, 'adminPort') ?? 0,
    rlControlPort: port(o.rlControlPort, 'rlControlPort'),
    rlControlHost: o.rlControlHost ?? '127.0.0.1',
    rlControlApiKey: o.rlControlApiKey ? o.rlControlApiKey : null,
    rlAdvertise: o.rlAdvertise ?? true,
    rlUpdateFrom: updateFrom,
    servicerImpl: impl,
    servicerImplSource: o.servicerImplSource ?? 'default',
    ...engine,
    tokenizerPath: o.tokenizerPath ?? engine.model,
    stamp: o.stamp ?? (profile.stampsWeightVersion ? { kind: 'live' } : { kind: 'none' }),
    attnTpSize: o.attnTpSize === null ? null : positiveInt(o.attnTpSize, 1, 'attnTpSize'),
    dpSize: positiveInt(o.dpSize, 1, 'dpSize'),
    enableOutputLogprobs: o.enableOutputLogprobs ?? false,
    kvEvents: resolveKvEvents(o.kvEventsConfig, profile),
    kvLoadIntervalMs: positiveInt(o.kvLoadIntervalMs, 1000, 'kvLoadIntervalMs'),
    kvstoreStorageBackend: o.kvstoreStorageBackend ? o.kvstoreStorageBackend : null,
    version: o.version ?? '0.2.0',
    faults: o.faults ?? [],
    healthCheckTimeoutMs: o.healthCheckTimeoutMs ?? healthCheckTimeoutMs(env),
    serverArgs: o.serverArgs ?? {},
    drainMs: o.drainMs ?? (tuning ? tuning.drainSecs * 1000 : 5_000),
    joinGroup: o.joinGroup ?? null,
    onExit: o.onExit ?? null,
    profile,
    rustTuning: tuning,
    env,
  };
}
