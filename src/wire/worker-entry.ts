// One registered worker as the shared `workers` bucket holds it, keyed by worker id: the
// registry's facts without the owner (ownership is a lease of its own, owner-lease.ts), api key
// included, and the replica that wrote it. Shapes only: src/fleet/registry-sync.ts keeps the
// bucket and the local registry in step; fleet/worker.ts adds the owner to make a Worker.

/** Which wire reaches the engine, from its URL's scheme. */
export type ConnectionMode = 'http' | 'grpc' | 'zmq';

/** Per-worker HTTP client settings given at registration (`http_pool`). */
export interface HttpPoolConfig {
  /** PEM bundle of CAs to trust for an https control endpoint. */
  ca_cert_path?: string;
  /** Connections per control origin (default 64). */
  max_connections?: number;
}

export interface StoredWorker {
  /** Registry id: a UUID string (>= 32 chars). */
  id: string;
  /** Registry URL, with `@<rank>` for DP-aware workers. */
  url: string;
  /** `url` without a purely numeric `@<rank>` suffix. */
  baseUrl: string;
  /** True when `url` carries a numeric `@<rank>` suffix. */
  dpAware: boolean;
  dpRank: number | null;
  connectionMode: ConnectionMode;
  /** Runtime wire string: sglang, vllm, tokenspeed, ... or `unknown`. */
  engine: string;
  workerType: string;
  modelId: string;
  /** Never serialised into any response, log line or event; only this bucket holds it. */
  apiKey: string | null;
  /** Control-client settings given at registration; null for the shared defaults. */
  httpPool: HttpPoolConfig | null;
  /** Caller labels as given at registration (they win over discovered ones). */
  callerLabels: Record<string, string>;
  /** Labels discovered from the engine (server info, model info). */
  discoveredLabels: Record<string, string>;
  registeredAt: number;
  /** The replica that wrote the entry: its own writes coming back are skipped. */
  writer?: string;
}
