// Gateway settings: one table drives the flags, the environment variables, the config file keys,
// `--help` and validation, so the four can never drift. Precedence: defaults < config file
// < environment < flags. SMG's flag names are kept so launch scripts port unchanged.

import { readFileSync } from 'node:fs';
import { NATS_CLIENT_FLAGS } from '../bus/client-flags.ts';
import { checkNatsSettings, noNatsAuth, NatsSettingsError } from '../bus/connect-options.ts';
import type { GatewayConfig } from '../config/gateway-config.ts';
import { DECODE_POLICY_NAMES, DEFAULT_POLICY, POLICY_NAMES, PREFILL_POLICY_NAMES } from '../fleet/policies/catalogue.ts';
import { ASSIGNMENT_MODES } from '../fleet/policies/manual.ts';
import { parseVersionPolicy } from '../fleet/version-policy.ts';
import { allowedHostsOf, checkWorkerUrl } from '../fleet/worker-url.ts';
import { parseAllowedOrigins } from '../http/origin-policy.ts';
import { DEFAULT_METRICS_PREFIX, METRICS_PREFIX_PATTERN } from '../obs/metrics-prefix.ts';
import { redactUrl } from '../obs/redact-url.ts';

type Kind = 'string' | 'int' | 'number' | 'bool' | 'list';

interface Setting {
  flag: string;
  /** Dotted path in GatewayConfig and in the config file. */
  key: string;
  kind: Kind;
  help: string;
  /** Other spellings of the flag (SMG's Rust CLI's, where they differ from its Python CLI's). */
  aliases?: string[];
  /** A second environment variable read when RLGATE_<FLAG> is unset (NATS_URL, as the NATS tools). */
  envFallback?: string;
  /** A bool that is on by default: `--no-<flag>` turns it off. */
  negatable?: boolean;
}

/** The routing policy (`--policy`) and its settings, by SMG's names, with SMG's CLI defaults (docs/routing.md). */
const ROUTING_SETTINGS: Setting[] = [
  {
    flag: 'policy',
    key: 'routing.policy',
    kind: 'string',
    help: `data-plane routing policy: ${POLICY_NAMES.join(' | ')} (default ${DEFAULT_POLICY}: least in flight, a routing key by rendezvous hashing)`,
  },
  {
    flag: 'prefill-policy',
    key: 'routing.prefillPolicy',
    kind: 'string',
    help: 'PD prefill policy (also bucket): checked and kept; rlgate has no PD routing yet',
  },
  { flag: 'decode-policy', key: 'routing.decodePolicy', kind: 'string', help: 'PD decode policy: checked and kept; rlgate has no PD routing yet' },
  {
    flag: 'cache-threshold',
    key: 'routing.cacheThreshold',
    kind: 'number',
    help: 'cache_aware: a prefix match above this share of the prompt (0.0-1.0) routes to its engine (default 0.3)',
  },
  {
    flag: 'balance-abs-threshold',
    key: 'routing.balanceAbsThreshold',
    kind: 'int',
    help: 'cache_aware: the loads are imbalanced when max - min in flight is above this and the relative threshold is met too (default 64)',
  },
  {
    flag: 'balance-rel-threshold',
    key: 'routing.balanceRelThreshold',
    kind: 'number',
    help: 'cache_aware: … and max in flight is above this times min (at least 1.0; default 1.5)',
  },
  {
    flag: 'eviction-interval-secs',
    key: 'routing.evictionIntervalSecs',
    kind: 'int',
    help: "cache_aware's tree eviction and manual's idle-key sweep, every this many seconds (default 60)",
    aliases: ['eviction-interval'],
  },
  {
    flag: 'max-tree-size',
    key: 'routing.maxTreeSize',
    kind: 'int',
    help: "cache_aware: characters (tokens, for token ids) each engine's share of the tree is cut to at each eviction (default 67108864)",
  },
  {
    flag: 'prefix-token-count',
    key: 'routing.prefixTokenCount',
    kind: 'int',
    help: 'prefix_hash: tokens (characters, for text) of the prompt hashed (default 256)',
  },
  {
    flag: 'prefix-hash-load-factor',
    key: 'routing.prefixHashLoadFactor',
    kind: 'number',
    help: 'prefix_hash: an engine above this times the average in flight passes the request on (at least 1.0; default 1.25)',
  },
  { flag: 'max-idle-secs', key: 'routing.maxIdleSecs', kind: 'int', help: 'manual: a routing key idle this long is forgotten (default 14400)' },
  {
    flag: 'assignment-mode',
    key: 'routing.assignmentMode',
    kind: 'string',
    help: `manual: how a new routing key gets its engine: ${ASSIGNMENT_MODES.join(' | ')} (default random)`,
  },
  {
    flag: 'routing-key-override',
    key: 'routing.routingKeyOverride',
    kind: 'bool',
    help: "every policy honours X-SMG-Routing-Key, by manual's sticky map (default off)",
  },
];

export const SETTINGS: Setting[] = [
  { flag: 'host', key: 'host', kind: 'string', help: 'address to listen on (default 127.0.0.1)' },
  { flag: 'port', key: 'port', kind: 'int', help: 'port to listen on (default 30000; 0 picks a free one)' },
  {
    flag: 'nats-url',
    key: 'natsUrl',
    kind: 'string',
    help: 'join this NATS server or cluster (comma-separated list; nats://user:pass@host carries credentials); absent: start an embedded nats-server',
    envFallback: 'NATS_URL',
  },
  ...NATS_CLIENT_FLAGS.map((f): Setting => ({ flag: f.flag, key: `nats.${f.key}`, kind: 'string', help: f.help })),
  { flag: 'enable-rl', key: 'rl.enabled', kind: 'bool', help: 'serve the /v1/rl control plane (default off)' },
  {
    flag: 'admin-key',
    key: 'adminKey',
    kind: 'string',
    help: 'bearer token required on /v1/rl (default: no check); other users of the machine can read it on a command line: prefer --admin-key-file or RLGATE_ADMIN_KEY',
  },
  {
    flag: 'admin-key-file',
    key: 'adminKeyFile',
    kind: 'string',
    help: 'file holding the admin bearer token (its final newline is not part of it); instead of --admin-key',
  },
  {
    flag: 'allowed-origins',
    key: 'allowedOrigins',
    kind: 'list',
    help: "browser origins allowed to write, e.g. https://dash.example.com, or * (default: none but the gateway's own page; requests without Origin are never refused)",
  },
  {
    flag: 'registration-key',
    key: 'registrationKey',
    kind: 'string',
    help: 'bearer token required on POST /workers and /add_worker (the admin key works too; default: no check); visible to other users on a command line: prefer --registration-key-file or RLGATE_REGISTRATION_KEY',
  },
  {
    flag: 'registration-key-file',
    key: 'registrationKeyFile',
    kind: 'string',
    help: 'file holding the registration bearer token (its final newline is not part of it); instead of --registration-key',
  },
  { flag: 'worker-urls', key: 'workerUrls', kind: 'list', help: 'engine URLs to register at start (space- or comma-separated)' },
  {
    flag: 'allowed-worker-hosts',
    key: 'allowedWorkerHosts',
    kind: 'list',
    help: 'the only hosts, *.suffixes, addresses and CIDRs worker URLs may name (default: any but link-local and cloud metadata addresses)',
  },
  { flag: 'rl-control-timeout-secs', key: 'rl.controlTimeoutSecs', kind: 'int', help: 'deadline of one engine control call (default 600)' },
  {
    flag: 'rl-fanout-concurrency',
    key: 'rl.fanoutConcurrency',
    kind: 'int',
    help: 'engine calls in flight per fan-out and owning replica, for every call (default: 32 for calls that move weights, the fleet size and at least 256 for the others)',
  },
  { flag: 'rl-version-policy', key: 'rl.versionPolicy', kind: 'string', help: 'any | latest-only | min-version:<v> | max-staleness:<k> (default any)' },
  ...ROUTING_SETTINGS,
  {
    flag: 'kv-events',
    key: 'kvEvents',
    kind: 'bool',
    negatable: true,
    help: "subscribe to every gRPC engine's KV-cache events (SubscribeKvEvents) when the policy reads them (bounded_affinity, cache_aware); --no-kv-events routes on the approximate tree alone (default on)",
  },
  { flag: 'request-timeout-secs', key: 'requestTimeoutSecs', kind: 'int', help: 'deadline of one data-plane request (default 14400)' },
  {
    flag: 'request-body-timeout-secs',
    key: 'requestBodyTimeoutSecs',
    kind: 'int',
    help: 'longest time to receive a whole request, headers and body: a slower or stalled one gets 408 and its connection is closed; answers are not bounded by it (default 30; 0: no limit)',
  },
  {
    flag: 'request-header-timeout-secs',
    key: 'requestHeaderTimeoutSecs',
    kind: 'int',
    help: "longest time to receive a request's headers, then 408 (default 30; at most the body timeout)",
  },
  {
    flag: 'max-connections',
    key: 'maxConnections',
    kind: 'int',
    help: 'most open client connections; one past it is closed at once without an answer (default 0: no cap)',
  },
  {
    flag: 'max-in-flight',
    key: 'maxInFlight',
    kind: 'int',
    help: 'most /generate and OpenAI generation requests handled at once; past it 503 with Retry-After (default 0: no cap)',
  },
  {
    flag: 'workers-list-control-urls',
    key: 'workersListControlUrls',
    kind: 'bool',
    help: "GET /workers lists gRPC/ZMQ workers by their control-app URL, for slime's abort flow (default off)",
  },
  { flag: 'max-body-bytes', key: 'maxBodyBytes', kind: 'int', help: 'largest request body accepted (default 67108864)' },
  { flag: 'health-check-interval-secs', key: 'probeIntervalSecs', kind: 'int', help: 'engine liveness probe period; 0 turns probes off (default 5)' },
  {
    flag: 'health-check-max-rate',
    key: 'probeMaxRate',
    kind: 'int',
    help: 'most probes a second per replica: past it each engine is probed less often than the period (default 100; 0: no cap)',
  },
  { flag: 'health-failure-threshold', key: 'probeFailureThreshold', kind: 'int', help: 'failed probes in a row before an engine is unreachable (default 3)' },
  { flag: 'lease-secs', key: 'leaseSecs', kind: 'int', help: 'ownership lease: a replica silent this long is dead and another takes its engines (default 5)' },
  {
    flag: 'nats-ping-interval-secs',
    key: 'natsPingIntervalSecs',
    kind: 'int',
    help: 'NATS ping period; a connection that misses two pings is dropped and redialled, so a silent cut is noticed (default 2)',
  },
  {
    flag: 'discovery-timeout-secs',
    key: 'discoveryTimeoutSecs',
    kind: 'int',
    help: 'deadline of one engine discovery; an engine that accepts connections and never answers is unreachable after it (default 10)',
  },
  { flag: 'retry-interval-secs', key: 'retryIntervalSecs', kind: 'int', help: 'how often an unreachable engine is rediscovered (default 2)' },
  { flag: 'cb-failure-threshold', key: 'breakerThreshold', kind: 'int', help: 'consecutive data-plane failures that open a breaker (default 5)' },
  { flag: 'cb-timeout-duration-secs', key: 'breakerCooldownSecs', kind: 'int', help: 'open breaker cool-down before half-open (default 30)' },
  {
    flag: 'processes',
    key: 'processes',
    kind: 'string',
    help: '`rlgate gateway` serves from this many processes sharing its port, one replica each (auto: one per core; default 1)',
  },
  {
    flag: 'replica-id',
    key: 'replicaId',
    kind: 'string',
    help: "this gateway replica's id on the bus (default: random; with several processes, each adds -<n>)",
  },
  { flag: 'subject-root', key: 'subjectRoot', kind: 'string', help: 'root token of every NATS subject (default rl)' },
  {
    flag: 'tokenizer-path',
    key: 'tokenizerPath',
    kind: 'string',
    help: 'tokenizer directory (tokenizer.json) for `text` prompts on ZMQ workers, and on gRPC workers without GetTokenizer (default unset)',
  },
  {
    flag: 'synthesize-logprobs',
    key: 'synthesizeLogprobs',
    kind: 'bool',
    help: 'answer `return_logprob` with 0.0 per token when a token engine returns no logprobs (only safe when the trainer recomputes them); default off: such requests fail with 502 logprobs_unavailable',
  },
  {
    flag: 'shutdown-timeout-secs',
    key: 'shutdownTimeoutSecs',
    kind: 'int',
    help: 'longest a shutdown on SIGINT/SIGTERM may take (running refits drain meanwhile); then the process exits anyway (default 30)',
  },
  { flag: 'log-level', key: 'logLevel', kind: 'string', help: 'pino level: trace|debug|info|warn|error|silent (default info)' },
  {
    flag: 'metrics-prefix',
    key: 'metricsPrefix',
    kind: 'string',
    help: "first word of every /metrics series name; `smg` exports SMG's names (default rlgate)",
  },
];

export function defaultConfig(): GatewayConfig {
  return {
    host: '127.0.0.1',
    port: 30000,
    natsUrl: undefined,
    nats: noNatsAuth(),
    adminKey: undefined,
    adminKeyFile: undefined,
    allowedOrigins: [],
    registrationKey: undefined,
    registrationKeyFile: undefined,
    workerUrls: [],
    allowedWorkerHosts: [],
    rl: { enabled: false, controlTimeoutSecs: 600, fanoutConcurrency: undefined, versionPolicy: 'any' },
    routing: defaultRouting(),
    kvEvents: true,
    maxBodyBytes: 64 * 1024 * 1024,
    requestTimeoutSecs: 14400,
    requestBodyTimeoutSecs: 30,
    requestHeaderTimeoutSecs: 30,
    maxConnections: 0,
    maxInFlight: 0,
    workersListControlUrls: false,
    probeIntervalSecs: 5,
    probeMaxRate: 100,
    probeFailureThreshold: 3,
    retryIntervalSecs: 2,
    discoveryTimeoutSecs: 10,
    leaseSecs: 5,
    natsPingIntervalSecs: 2,
    breakerThreshold: 5,
    breakerCooldownSecs: 30,
    replicaId: undefined,
    processes: '1',
    subjectRoot: 'rl',
    logLevel: 'info',
    tokenizerPath: undefined,
    synthesizeLogprobs: false,
    shutdownTimeoutSecs: 30,
    metricsPrefix: DEFAULT_METRICS_PREFIX,
  };
}

/** SMG's CLI defaults (router_args.py), but the policy: rlgate keeps its own default (docs/decisions.md). */
export function defaultRouting(): GatewayConfig['routing'] {
  return {
    policy: DEFAULT_POLICY,
    prefillPolicy: undefined,
    decodePolicy: undefined,
    cacheThreshold: 0.3,
    balanceAbsThreshold: 64,
    balanceRelThreshold: 1.5,
    evictionIntervalSecs: 60,
    maxTreeSize: 2 ** 26,
    prefixTokenCount: 256,
    prefixHashLoadFactor: 1.25,
    maxIdleSecs: 4 * 3600,
    assignmentMode: 'random',
    routingKeyOverride: false,
  };
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** Builds the config from argv (flags after the command), env and an optional `--config FILE`. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const cfg = defaultConfig();
  const flags = parseFlags(argv);
  const file = (flags.get('config') as string | undefined) ?? env.RLGATE_CONFIG;
  if (file) applyObject(cfg, readConfigFile(file));
  for (const s of SETTINGS) {
    const name = [envName(s.flag), s.envFallback].find((n) => n !== undefined && env[n] !== undefined && env[n] !== '');
    if (name !== undefined) setPath(cfg, s.key, coerce(s, env[name]!, `environment variable ${name}`));
  }
  for (const s of SETTINGS) {
    if (flags.has(s.flag)) setPath(cfg, s.key, coerce(s, flags.get(s.flag)!, `--${s.flag}`));
  }
  cfg.registrationKey =
    readKeyFile('registration key', 'registration-key', 'RLGATE_REGISTRATION_KEY', cfg.registrationKeyFile, cfg.registrationKey) ?? cfg.registrationKey;
  cfg.adminKey = readKeyFile('admin key', 'admin-key', 'RLGATE_ADMIN_KEY', cfg.adminKeyFile, cfg.adminKey) ?? cfg.adminKey;
  return validateConfig(cfg);
}

/**
 * A key given as a file (--admin-key-file, --registration-key-file), read once at start; the key
 * itself is never in an error. Undefined when no file was given.
 */
function readKeyFile(what: string, flag: string, env: string, path: string | undefined, given: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  if (given !== undefined) throw new ConfigError(`give the ${what} once: --${flag}-file, or --${flag} / ${env}, not both`);
  let key: string;
  try {
    key = readFileSync(path, 'utf8').trim();
  } catch (err) {
    throw new ConfigError(`cannot read the ${what} file ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (key === '') throw new ConfigError(`the ${what} file ${path} is empty`);
  return key;
}

/**
 * The longest deadline a Node timer can hold (2^31 - 1 ms): a longer one would fire at once and
 * fail every request, so it is refused at startup instead.
 */
const MAX_TIMER_SECS = Math.floor((2 ** 31 - 1) / 1000);

/** SMG's startup errors, with its exact messages (and rlgate's upper bounds). */
export function validateConfig(cfg: GatewayConfig): GatewayConfig {
  if (!Number.isInteger(cfg.port) || cfg.port < 0 || cfg.port > 65535) throw new ConfigError('port must be 0..65535');
  if (!(cfg.requestTimeoutSecs >= 1)) throw new ConfigError('request_timeout_secs must be >= 1');
  if (cfg.requestTimeoutSecs > MAX_TIMER_SECS) throw new ConfigError(`request_timeout_secs must be <= ${MAX_TIMER_SECS} (about 24.8 days)`);
  checkBounds(cfg);
  if (!(cfg.shutdownTimeoutSecs >= 1 && cfg.shutdownTimeoutSecs <= MAX_TIMER_SECS)) throw new ConfigError(`shutdown_timeout_secs must be 1..${MAX_TIMER_SECS}`);
  // A lease of 0 would make every other replica dead at every sweep.
  if (!(cfg.leaseSecs >= 1 && cfg.leaseSecs <= 3600)) throw new ConfigError('lease_secs must be 1..3600');
  if (!(cfg.natsPingIntervalSecs >= 1 && cfg.natsPingIntervalSecs <= 600)) throw new ConfigError('nats_ping_interval_secs must be 1..600');
  if (!(cfg.discoveryTimeoutSecs >= 1 && cfg.discoveryTimeoutSecs <= MAX_TIMER_SECS))
    throw new ConfigError(`discovery_timeout_secs must be 1..${MAX_TIMER_SECS}`);
  if (!METRICS_PREFIX_PATTERN.test(cfg.metricsPrefix))
    throw new ConfigError(`metrics_prefix must match ${METRICS_PREFIX_PATTERN.source}, got \`${cfg.metricsPrefix}\``);
  checkNats(cfg);
  try {
    parseAllowedOrigins(cfg.allowedOrigins);
  } catch (err) {
    throw new ConfigError(`allowed_origins: ${(err as Error).message}`);
  }
  checkWorkerUrls(cfg);
  checkRouting(cfg.routing);
  const policy = cfg.rl.versionPolicy.trim();
  if (!cfg.rl.enabled) {
    if (policy !== 'any') throw new ConfigError('rl.version_policy requires rl.enabled');
    return cfg;
  }
  if (!(cfg.rl.controlTimeoutSecs >= 1)) throw new ConfigError('rl.control_timeout_secs must be >= 1');
  if (cfg.rl.controlTimeoutSecs > MAX_TIMER_SECS) throw new ConfigError(`rl.control_timeout_secs must be <= ${MAX_TIMER_SECS} (about 24.8 days)`);
  if (cfg.rl.fanoutConcurrency !== undefined && !(cfg.rl.fanoutConcurrency >= 1)) throw new ConfigError('rl.fanout_concurrency must be >= 1');
  try {
    parseVersionPolicy(policy);
  } catch (err) {
    throw new ConfigError(`rl.version_policy: ${(err as Error).message}`);
  }
  return cfg;
}

/**
 * The routing settings, as SMG checks them: the policy names its CLI takes, and each policy's own
 * settings only when a configured policy (main, prefill or decode) uses them; the counts SMG keeps
 * unsigned are never negative.
 */
function checkRouting(r: GatewayConfig['routing']): void {
  const oneOf = (flag: string, value: string, names: readonly string[]) => {
    if (!names.includes(value)) throw new ConfigError(`--${flag} must be one of ${names.join(', ')}; got \`${value}\``);
  };
  if (r.policy === 'bucket') throw new ConfigError('--policy bucket: bucket is a prefill policy; give it as --prefill-policy');
  oneOf('policy', r.policy, POLICY_NAMES);
  if (r.prefillPolicy !== undefined) oneOf('prefill-policy', r.prefillPolicy, PREFILL_POLICY_NAMES);
  if (r.decodePolicy === 'bucket') throw new ConfigError('--decode-policy bucket: Decode policy should not be allowed to be bucket');
  if (r.decodePolicy !== undefined) oneOf('decode-policy', r.decodePolicy, DECODE_POLICY_NAMES);
  oneOf('assignment-mode', r.assignmentMode, ASSIGNMENT_MODES);
  for (const [flag, v] of [
    ['balance-abs-threshold', r.balanceAbsThreshold],
    ['eviction-interval-secs', r.evictionIntervalSecs],
    ['max-idle-secs', r.maxIdleSecs],
  ] as const) {
    if (!(Number.isSafeInteger(v) && v >= 0)) throw new ConfigError(`--${flag} must be >= 0, got \`${v}\``);
  }
  const used = new Set([r.policy, r.prefillPolicy, r.decodePolicy]);
  if (used.has('cache_aware') || used.has('bucket')) {
    if (!(r.balanceRelThreshold >= 1)) throw new ConfigError(`--balance-rel-threshold must be >= 1.0, got \`${r.balanceRelThreshold}\``);
  }
  if (used.has('cache_aware')) {
    if (!(r.cacheThreshold >= 0 && r.cacheThreshold <= 1)) throw new ConfigError(`--cache-threshold must be between 0.0 and 1.0, got \`${r.cacheThreshold}\``);
    if (!(r.evictionIntervalSecs > 0)) throw new ConfigError(`--eviction-interval-secs must be > 0 with cache_aware, got \`${r.evictionIntervalSecs}\``);
    if (!(Number.isSafeInteger(r.maxTreeSize) && r.maxTreeSize > 0)) throw new ConfigError(`--max-tree-size must be > 0, got \`${r.maxTreeSize}\``);
  }
  if (used.has('prefix_hash')) {
    if (!(Number.isSafeInteger(r.prefixTokenCount) && r.prefixTokenCount > 0))
      throw new ConfigError(`--prefix-token-count must be > 0, got \`${r.prefixTokenCount}\``);
    if (!(r.prefixHashLoadFactor >= 1)) throw new ConfigError(`--prefix-hash-load-factor must be >= 1.0, got \`${r.prefixHashLoadFactor}\``);
  }
}

/** Receive timeouts and connection caps (http/bounds.ts); Node refuses a header timeout past the body's. */
function checkBounds(cfg: GatewayConfig): void {
  if (!(cfg.requestBodyTimeoutSecs >= 0 && cfg.requestBodyTimeoutSecs <= MAX_TIMER_SECS))
    throw new ConfigError(`request_body_timeout_secs must be 0..${MAX_TIMER_SECS}`);
  if (!(cfg.requestHeaderTimeoutSecs >= 1 && cfg.requestHeaderTimeoutSecs <= MAX_TIMER_SECS))
    throw new ConfigError(`request_header_timeout_secs must be 1..${MAX_TIMER_SECS}`);
  if (cfg.requestBodyTimeoutSecs > 0 && cfg.requestHeaderTimeoutSecs > cfg.requestBodyTimeoutSecs) {
    throw new ConfigError('request_header_timeout_secs must be <= request_body_timeout_secs (the body timeout counts from the first header byte)');
  }
  if (!(Number.isSafeInteger(cfg.maxConnections) && cfg.maxConnections >= 0)) throw new ConfigError('max_connections must be >= 0');
  if (!(Number.isSafeInteger(cfg.maxInFlight) && cfg.maxInFlight >= 0)) throw new ConfigError('max_in_flight must be >= 0');
  if (!/^(auto|[1-9][0-9]{0,2})$/.test(cfg.processes))
    throw new ConfigError(`processes must be auto or a whole number from 1 to 999, got \`${cfg.processes}\``);
}

/** The allow-list parses, and every --worker-urls entry passes the rules POST /workers applies. */
function checkWorkerUrls(cfg: GatewayConfig): void {
  let allowed;
  try {
    allowed = allowedHostsOf(cfg.allowedWorkerHosts ?? []);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  for (const [i, url] of (cfg.workerUrls ?? []).entries()) {
    try {
      checkWorkerUrl(url, allowed);
    } catch (err) {
      // The message never repeats the URL (it may carry a password): it is named by position.
      throw new ConfigError(`--worker-urls entry ${i + 1}: ${(err as Error).message}`);
    }
  }
}

/** Credentials and TLS only with --nats-url, one kind of credential, a cert with its key. */
function checkNats(cfg: GatewayConfig): void {
  const given = NATS_CLIENT_FLAGS.filter((f) => cfg.nats?.[f.key] !== undefined);
  if (!cfg.natsUrl) {
    if (given.length > 0) throw new ConfigError(`--${given[0]!.flag} needs --nats-url: the embedded nats-server has no users and no TLS`);
    return;
  }
  try {
    checkNatsSettings(cfg.natsUrl, cfg.nats);
  } catch (err) {
    if (err instanceof NatsSettingsError) throw new ConfigError(err.message); // userinfo already masked
    throw err;
  }
}

export function helpText(command = 'rlgate gateway'): string {
  const lines = [`usage: ${command} [flags]`, '', 'Every flag can also be set as RLGATE_<FLAG> in the environment or in a JSON --config file.', ''];
  lines.push(`  --config FILE${' '.repeat(24)}JSON config file (keys as in docs/operations.md)`);
  for (const s of SETTINGS) {
    const left = `  --${s.flag}${s.kind === 'bool' ? (s.negatable ? `, --no-${s.flag}` : '') : s.kind === 'list' ? ' U ...' : ' V'}`;
    const also = s.aliases ? ` (also ${s.aliases.map((a) => `--${a}`).join(', ')})` : '';
    lines.push(`${left.padEnd(39)}${s.help}${also}  [${[envName(s.flag), s.envFallback].filter(Boolean).join(', then ')}]`);
  }
  return lines.join('\n');
}

export function envName(flag: string): string {
  return `RLGATE_${flag.toUpperCase().replace(/-/g, '_')}`;
}

/** sgl-router's and SMG's launch flags of PD disaggregation: refused with the reason, not as unknown. */
const PD_FLAGS = new Set(['pd-disaggregation', 'prefill', 'decode']);

function parseFlags(argv: string[]): Map<string, string> {
  const known = new Map<string, Setting>(SETTINGS.flatMap((s) => [s.flag, ...(s.aliases ?? [])].map((f) => [f, s] as const)));
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) throw new ConfigError(`unexpected argument \`${redactUrl(arg)}\`; see --help`);
    const [name, inline] = splitFlag(arg.slice(2));
    if (name === 'config') {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new ConfigError('--config needs a file');
      out.set('config', v);
      continue;
    }
    const negated = name.startsWith('no-') ? known.get(name.slice(3)) : undefined;
    if (negated?.negatable) {
      if (inline !== undefined) throw new ConfigError(`--${name} takes no value`);
      out.set(negated.flag, 'false');
      continue;
    }
    const s = known.get(name);
    if (!s && PD_FLAGS.has(name)) {
      throw new ConfigError(
        `--${name}: PD disaggregated routing is not supported yet (rlgate routes regular workers only); give engines started without disaggregation to --worker-urls`,
      );
    }
    if (!s) throw new ConfigError(`unknown flag --${name}; see --help`);
    // An alias sets its setting's flag: the value is read under that name.
    if (s.kind === 'bool') {
      out.set(s.flag, inline ?? 'true');
    } else if (s.kind === 'list') {
      const values: string[] = inline !== undefined ? [inline] : [];
      while (i + 1 < argv.length && !argv[i + 1]!.startsWith('--')) values.push(argv[++i]!);
      out.set(s.flag, [out.get(s.flag), ...values].filter(Boolean).join(','));
    } else {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new ConfigError(`--${name} needs a value`);
      out.set(s.flag, v);
    }
  }
  return out;
}

function splitFlag(s: string): [string, string | undefined] {
  const eq = s.indexOf('=');
  return eq < 0 ? [s, undefined] : [s.slice(0, eq), s.slice(eq + 1)];
}

function coerce(s: Setting, raw: string, where: string): unknown {
  switch (s.kind) {
    case 'string':
      return raw;
    case 'int': {
      if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(`${where} must be an integer, got \`${raw}\``);
      return Number(raw.trim());
    }
    case 'number': {
      const v = Number(raw.trim());
      if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw.trim()) || !Number.isFinite(v))
        throw new ConfigError(`${where} must be a number, got \`${raw}\``);
      return v;
    }
    case 'bool': {
      const v = raw.trim().toLowerCase();
      if (['true', '1', 'yes', 'on'].includes(v)) return true;
      if (['false', '0', 'no', 'off'].includes(v)) return false;
      throw new ConfigError(`${where} must be true or false, got \`${raw}\``);
    }
    case 'list':
      return raw.split(/[\s,]+/).filter(Boolean);
  }
}

function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${(err as Error).message}`);
  }
  try {
    const v = JSON.parse(text) as unknown;
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('expected a JSON object');
    return v as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(`config file ${path}: ${(err as Error).message}`);
  }
}

/** Config-file keys: our camelCase paths, or SMG's snake_case (`rl.control_timeout_secs`). */
const FILE_ALIASES: Record<string, string> = {
  'rl.control_timeout_secs': 'rl.controlTimeoutSecs',
  'rl.fanout_concurrency': 'rl.fanoutConcurrency',
  'rl.version_policy': 'rl.versionPolicy',
  nats_url: 'natsUrl',
  admin_key: 'adminKey',
  admin_key_file: 'adminKeyFile',
  allowed_origins: 'allowedOrigins',
  registration_key: 'registrationKey',
  registration_key_file: 'registrationKeyFile',
  worker_urls: 'workerUrls',
  allowed_worker_hosts: 'allowedWorkerHosts',
  tokenizer_path: 'tokenizerPath',
  request_timeout_secs: 'requestTimeoutSecs',
  request_body_timeout_secs: 'requestBodyTimeoutSecs',
  request_header_timeout_secs: 'requestHeaderTimeoutSecs',
  max_connections: 'maxConnections',
  max_in_flight: 'maxInFlight',
  processes: 'processes',
  workers_list_control_urls: 'workersListControlUrls',
  synthesize_logprobs: 'synthesizeLogprobs',
  shutdown_timeout_secs: 'shutdownTimeoutSecs',
  lease_secs: 'leaseSecs',
  nats_ping_interval_secs: 'natsPingIntervalSecs',
  discovery_timeout_secs: 'discoveryTimeoutSecs',
  metrics_prefix: 'metricsPrefix',
  kv_events: 'kvEvents',
  ...routingFileKeys(),
  ...Object.fromEntries(NATS_CLIENT_FLAGS.map((f) => [`nats.${f.fileKey}`, `nats.${f.key}`])),
};

/** SMG's snake_case names of the routing settings, flat (`cache_threshold`) and under `routing.` */
function routingFileKeys(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const s of ROUTING_SETTINGS) {
    const snake = s.flag.replace(/-/g, '_');
    out[snake] = s.key;
    out[`routing.${snake}`] = s.key;
  }
  return out;
}

function applyObject(cfg: GatewayConfig, obj: Record<string, unknown>, prefix = ''): void {
  const byKey = new Map(SETTINGS.map((s) => [s.key, s]));
  for (const [k, v] of Object.entries(obj)) {
    const path = FILE_ALIASES[prefix + k] ?? prefix + k;
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      applyObject(cfg, v as Record<string, unknown>, `${path}.`);
      continue;
    }
    const s = byKey.get(path);
    if (!s) throw new ConfigError(`config file: unknown key \`${prefix + k}\``);
    setPath(cfg, path, fileValue(s, v, `config key ${prefix + k}`));
  }
}

/** A config-file value of the setting's kind; strings go through the flag coercion. */
function fileValue(s: Setting, v: unknown, where: string): unknown {
  if (typeof v === 'string') return coerce(s, v, where);
  const ok =
    (s.kind === 'int' && Number.isInteger(v)) ||
    (s.kind === 'number' && typeof v === 'number' && Number.isFinite(v)) ||
    (s.kind === 'bool' && typeof v === 'boolean') ||
    (s.kind === 'list' && Array.isArray(v) && v.every((x) => typeof x === 'string'));
  if (!ok) {
    const want = { int: 'an integer', number: 'a number', bool: 'true or false', string: 'a string', list: 'a list of strings' }[s.kind];
    throw new ConfigError(`${where} must be ${want}, got \`${JSON.stringify(v)}\``);
  }
  return s.kind === 'list' ? [...(v as string[])] : v;
}

function setPath(cfg: GatewayConfig, path: string, value: unknown): void {
  const parts = path.split('.');
  let obj = cfg as unknown as Record<string, unknown>;
  for (const p of parts.slice(0, -1)) obj = obj[p] as Record<string, unknown>;
  obj[parts.at(-1)!] = value;
}
