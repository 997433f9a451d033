// The two servicer personalities (smg_grpc_servicer's python and rust): how one is chosen (flag > env
// `SMG_TOKENSPEED_SERVICER_IMPL` > default python, invalid values refused), what each one does
// differently, and the rust profile's tuning environment. Pure: it reads the environment
// it is given and never serves anything.

export const SERVICER_IMPLS = ['python', 'rust'] as const;
export type ServicerImpl = (typeof SERVICER_IMPLS)[number];
export type ImplSource = 'flag' | 'env' | 'default';

export const IMPL_ENV = 'SMG_TOKENSPEED_SERVICER_IMPL';
export const KV_EVENTS_ENV = 'SMG_TOKENSPEED_SERVICER_KV_EVENTS';

/** A bad `--servicer-impl` / env value: startup fails, nothing is served. */
export class ServicerImplError extends Error {
  override name = 'ServicerImplError';
  /** 2 for a bad flag (argparse usage error), 1 for a bad environment value. */
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

/** Precedence flag > env > default; values are trimmed and lower-cased. */
export function resolveServicerImpl(flag: string | undefined, env: NodeJS.ProcessEnv): { impl: ServicerImpl; source: ImplSource } {
  const allowed = SERVICER_IMPLS.map((v) => `'${v}'`).join(', ');
  if (flag !== undefined) {
    const v = flag.trim().toLowerCase();
    if (!(SERVICER_IMPLS as readonly string[]).includes(v)) {
      throw new ServicerImplError(`argument --servicer-impl: invalid choice: '${flag}' (choose from ${allowed})`, 2);
    }
    return { impl: v as ServicerImpl, source: 'flag' };
  }
  const raw = env[IMPL_ENV];
  if (raw !== undefined && raw.trim() !== '') {
    const v = raw.trim().toLowerCase();
    if (!(SERVICER_IMPLS as readonly string[]).includes(v)) {
      throw new ServicerImplError(`${IMPL_ENV}='${raw}' is not a servicer implementation (choose from ${allowed})`, 1);
    }
    return { impl: v as ServicerImpl, source: 'env' };
  }
  return { impl: 'python', source: 'default' };
}

/** The one log line the real package prints. */
export function implLogLine(impl: ServicerImpl, source: ImplSource): string {
  return `Servicer implementation: ${impl} (source=${source})`;
}

/** What differs between the personalities; everything else is the same contract. */
export interface ServicerProfile {
  impl: ServicerImpl;
  /** Live `weight_version` on chunk (7) and complete (12); rust leaves both unset. */
  stampsWeightVersion: boolean;
  /** `rl.*` keys merged into GetServerInfo.server_args. */
  advertisesRl: boolean;
  /** GetServerInfo.is_paused is the live pause state (rust: always false). */
  reportsPaused: boolean;
  /** GetModelInfo.weight_version and server_args.weight_version follow refits (rust: launch value). */
  liveModelFacts: boolean;
  /** FlushCache, StartProfile, StopProfile answer (rust: UNIMPLEMENTED). */
  adminRpcs: boolean;
  /** top_logprobs_num > 1 and prompt logprobs are served (rust: INVALID_ARGUMENT). */
  rankedAndPromptLogprobs: boolean;
  /** kv_bootstrap_info / encode_bootstrap_info accepted (rust: INVALID_ARGUMENT). */
  bootstrapFields: boolean;
  /** SubscribeKvEvents on without --kv-events-config (rust default, unless the env turns it off). */
  kvEventsByDefault: boolean;
  /** start_sequence_number honoured from the relay's history (the Python servicer ignores it). */
  kvReplay: boolean;
}

const OFF_VALUES = new Set(['0', 'false', 'no', 'off']);

export function profileFor(impl: ServicerImpl, env: NodeJS.ProcessEnv): ServicerProfile {
  const python = impl === 'python';
  const kvEnv = env[KV_EVENTS_ENV];
  return {
    impl,
    stampsWeightVersion: python,
    advertisesRl: python,
    reportsPaused: python,
    liveModelFacts: python,
    adminRpcs: python,
    rankedAndPromptLogprobs: python,
    bootstrapFields: python,
    kvEventsByDefault: !python && !(kvEnv !== undefined && OFF_VALUES.has(kvEnv.trim().toLowerCase())),
    kvReplay: !python,
  };
}

/** The rust servicer's tuning variables with their defaults (null = "a free port"). */
export interface RustTuning {
  handshakePort: number | null;
  drainSecs: number;
  startupTimeoutSecs: number;
  zmqSocketDir: string;
  workerThreads: number;
}

function envNumber(env: NodeJS.ProcessEnv, name: string, fallback: number, integer: boolean): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw.trim());
  if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n))) {
    throw new ServicerImplError(`${name}='${raw}' must be a ${integer ? 'non-negative integer' : 'non-negative number'}`, 1);
  }
  return n;
}

export function rustTuning(env: NodeJS.ProcessEnv): RustTuning {
  const port = envNumber(env, 'SMG_TOKENSPEED_SERVICER_HANDSHAKE_PORT', 0, true);
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  return {
    handshakePort: port === 0 ? null : port,
    drainSecs: envNumber(env, 'SMG_TOKENSPEED_SERVICER_DRAIN_SECS', 5, false),
    startupTimeoutSecs: envNumber(env, 'SMG_TOKENSPEED_SERVICER_STARTUP_TIMEOUT_SECS', 1800, false),
    zmqSocketDir: env.SMG_ZMQ_SOCKET_DIR?.trim() || `/tmp/smg-zmq-${uid}`,
    workerThreads: envNumber(env, 'SMG_SERVICER_WORKER_THREADS', 4, true),
  };
}

/** Python mode's health timeout (`TOKENSPEED_HEALTH_CHECK_TIMEOUT`, seconds, default 20). */
export function healthCheckTimeoutMs(env: NodeJS.ProcessEnv): number {
  return envNumber(env, 'TOKENSPEED_HEALTH_CHECK_TIMEOUT', 20, false) * 1000;
}
