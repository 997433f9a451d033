// The settings of one gateway replica, as every layer reads them: the type only, below the
// folders that read it (http/ among them). Where each comes from (flags, environment, config
// file, defaults) and how it is checked is src/gateway/config.ts, which builds this.

import type { NatsAuthSettings } from '../bus/connect-options.ts';

export interface GatewayConfig {
  host: string;
  port: number;
  /** One NATS server or a comma-separated cluster list; userinfo in it is a credential. */
  natsUrl: string | undefined;
  /** Credential and TLS files for --nats-url (never for the embedded server). */
  nats: NatsAuthSettings;
  adminKey: string | undefined;
  /** A file holding the admin key (read by loadConfig): keeps it off the command line. */
  adminKeyFile: string | undefined;
  /** Browser origins that may write (`*`: any); same-origin and Origin-less requests always may. */
  allowedOrigins: string[];
  /** Bearer required on POST /workers and /add_worker (the admin key works too); undefined: open. */
  registrationKey: string | undefined;
  /** A file holding the registration key (read by loadConfig): keeps it off the command line. */
  registrationKeyFile: string | undefined;
  workerUrls: string[];
  /** Hosts and CIDRs worker URLs may name; empty: any host but link-local and metadata ones. */
  allowedWorkerHosts: string[];
  rl: {
    enabled: boolean;
    controlTimeoutSecs: number;
    /** Calls in flight per fan-out and owning replica; undefined: by call (control/concurrency.ts). */
    fanoutConcurrency: number | undefined;
    versionPolicy: string;
  };
  /** The data plane's routing policy and its settings, by SMG's flag names (fleet/policies/). */
  routing: RoutingSettings;
  /** Subscribe to the gRPC engines' KV events for the policies that read them (fleet/kv-feed.ts). */
  kvEvents: boolean;
  maxBodyBytes: number;
  /** Data-plane deadline of one relayed request, in seconds (SMG's request_timeout_secs). */
  requestTimeoutSecs: number;
  /** Longest time to receive one whole request, headers and body (0: no limit); past it 408. */
  requestBodyTimeoutSecs: number;
  /** Longest time to receive one request's headers; past it 408. */
  requestHeaderTimeoutSecs: number;
  /** Most open client connections; more are closed at accept (0: no cap). */
  maxConnections: number;
  /** Most generation requests handled at once; more get 503 + Retry-After (0: no cap). */
  maxInFlight: number;
  /** Data-plane GET /workers lists a gRPC/ZMQ worker's control-app URL as its `url`. */
  workersListControlUrls: boolean;
  probeIntervalSecs: number;
  /** Most probes a second one replica sends; its engines are probed less often past it (0: no cap). */
  probeMaxRate: number;
  probeFailureThreshold: number;
  retryIntervalSecs: number;
  /** A replica whose heartbeat is this old is dead: its engines are taken over. */
  leaseSecs: number;
  /** NATS ping period: a connection that answers no ping twice in a row is dropped and redialled. */
  natsPingIntervalSecs: number;
  /** Deadline of one discovery (server and model info) of an engine. */
  discoveryTimeoutSecs: number;
  breakerThreshold: number;
  breakerCooldownSecs: number;
  replicaId: string | undefined;
  /** `rlgate gateway`'s processes: `auto` (one per core) or a count (gateway/processes.ts). */
  processes: string;
  subjectRoot: string;
  logLevel: string;
  /** Tokenizer directory for `text` on token engines without their own (ZMQ), and the gRPC fallback. */
  tokenizerPath: string | undefined;
  /** `return_logprob` on a token engine without logprobs answers 0.0 per token instead of failing. */
  synthesizeLogprobs: boolean;
  /** How long a shutdown may take in all; past it the process exits anyway. */
  shutdownTimeoutSecs: number;
  /** First word of every Prometheus series name; `smg` gives SMG's names (obs/metrics.ts). */
  metricsPrefix: string;
}

/** `--policy` and the settings SMG's policies read; defaults are SMG's CLI's (docs/routing.md). */
export interface RoutingSettings {
  /** bounded_affinity (rlgate's default), least_inflight or one of SMG's policy names. */
  policy: string;
  /** PD routing's policies: checked and kept, not used (rlgate has no PD routing yet). */
  prefillPolicy: string | undefined;
  decodePolicy: string | undefined;
  /** cache_aware: a prefix match above this share of the prompt routes to its engine. */
  cacheThreshold: number;
  /** cache_aware: imbalanced when max − min in flight is above this… */
  balanceAbsThreshold: number;
  /** …and max is above this times min. */
  balanceRelThreshold: number;
  /** cache_aware's tree eviction and manual's idle sweep, every this many seconds. */
  evictionIntervalSecs: number;
  /** cache_aware: characters (or tokens) each engine's share of the tree is cut to. */
  maxTreeSize: number;
  /** prefix_hash: tokens (characters, for text) of the prompt hashed. */
  prefixTokenCount: number;
  /** prefix_hash: an engine above this times the average in flight passes the request on. */
  prefixHashLoadFactor: number;
  /** manual: a routing key idle this long is forgotten. */
  maxIdleSecs: number;
  /** manual: how a new routing key gets its engine (random, min_load, min_group). */
  assignmentMode: string;
  /** Every policy honours X-SMG-Routing-Key by manual's sticky map. */
  routingKeyOverride: boolean;
}
