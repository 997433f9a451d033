// The registry: which engine endpoints exist, their labels and their owner replica. It holds
// facts about workers, never their runtime state (that belongs to each engine's actor). Every
// replica holds the whole fleet: registry-sync.ts mirrors local changes into the shared KV bucket
// and applies the other replicas' (`applyRemote`), and ownership.ts sets owners (`setOwner`).

import { EventEmitter } from 'node:events';
import { createHash } from 'node:crypto';
import { GatewayError } from '../api/errors.ts';
import { laneAddresses } from '../engines/zmq/handshake.ts';
import { checkLabels } from './label-limits.ts';
import { registeredWorkerType } from './worker-type.ts';
import { parseWorkerUrl } from './worker-url.ts';
import { baseUrlOf, mergedLabels, UNKNOWN_MODEL_ID, type Worker, type WorkerRegistration } from './worker.ts';

export interface RegistryEvents {
  added: [Worker];
  /** Re-registration of a known URL: labels, key or type may have changed. */
  replaced: [Worker, Worker];
  /** Discovery results landed. */
  discovered: [Worker];
  removed: [Worker];
  /** The replica that owns the worker's actor changed (a claim, a takeover). */
  owner: [Worker, string];
}

export class Registry extends EventEmitter<RegistryEvents> {
  private readonly byId = new Map<string, Worker>();
  private readonly byUrl = new Map<string, string>();
  /** base_url → ids of its DP ranks: every control call's observation fans out to siblings. */
  private readonly byBase = new Map<string, Set<string>>();

  /**
   * Bumped on every change a listener hears of (added, replaced, discovered, removed): readers
   * that cache what they derived from the registry (the router's table) compare it.
   */
  generation = 0;

  constructor(private readonly replicaId: string) {
    super();
  }

  get(id: string): Worker | undefined {
    return this.byId.get(id);
  }

  require(id: string): Worker {
    const w = this.byId.get(id);
    if (!w) throw new GatewayError('worker_not_found', `worker \`${id}\` not found`, { id });
    return w;
  }

  findByUrl(url: string): Worker | undefined {
    const id = this.byUrl.get(normaliseUrl(url));
    return id ? this.byId.get(id) : undefined;
  }

  /** Registered workers (DP ranks counted each). */
  get size(): number {
    return this.byId.size;
  }

  all(): Worker[] {
    return [...this.byId.values()];
  }

  /**
   * Registers a worker, or re-registers a known URL (idempotent: same id, discovery runs again).
   * Throws GatewayError('invalid_request') for a URL the gateway cannot reach.
   */
  register(reg: WorkerRegistration): { worker: Worker; created: boolean } {
    // URL syntax, and its one spelling (worker-url.ts); the host policy is the caller's, which
    // knows the allow-list.
    const { mode, canonical: url } = parseWorkerUrl(reg.url);
    checkLabels(reg.labels);
    // No PD worker ever enters the registry: routing would take it for a regular one.
    const workerType = registeredWorkerType(url, reg.worker_type, reg.bootstrap_port);
    if (mode === 'zmq') {
      try {
        laneAddresses(baseUrlOf(url).baseUrl);
      } catch (err) {
        throw new GatewayError('invalid_request', `url \`${reg.url}\` cannot be used: ${(err as Error).message}`, { field: 'url' });
      }
    }
    const { baseUrl, dpRank } = baseUrlOf(url);
    const existing = this.findByUrl(url);
    const worker: Worker = {
      id: existing?.id ?? idForUrl(url),
      url,
      baseUrl,
      dpAware: dpRank !== null,
      dpRank,
      connectionMode: mode,
      engine: reg.runtime_type?.trim() || defaultEngine(mode),
      workerType,
      modelId: existing?.modelId ?? UNKNOWN_MODEL_ID,
      apiKey: reg.api_key ?? null,
      httpPool: reg.http_pool ?? null,
      callerLabels: { ...(reg.labels ?? {}) },
      discoveredLabels: existing?.discoveredLabels ?? {},
      owner: existing?.owner ?? this.replicaId,
      registeredAt: existing?.registeredAt ?? Date.now(),
    };
    worker.modelId = modelIdOf(worker);
    this.store(existing, worker);
    this.byUrl.set(url, worker.id);
    let ranks = this.byBase.get(baseUrl);
    if (!ranks) this.byBase.set(baseUrl, (ranks = new Set()));
    ranks.add(worker.id);
    this.generation++;
    if (existing) this.emit('replaced', existing, worker);
    else this.emit('added', worker);
    return { worker, created: !existing };
  }

  /** Changes a registered worker's caller labels, key or type (its URL is its identity). */
  update(id: string, patch: { labels?: Record<string, string>; api_key?: string | null; worker_type?: string; runtime_type?: string }): Worker {
    const prev = this.require(id);
    checkLabels(patch.labels);
    const workerType = patch.worker_type === undefined ? prev.workerType : registeredWorkerType(prev.url, patch.worker_type);
    const next: Worker = {
      ...prev,
      callerLabels: patch.labels !== undefined ? { ...patch.labels } : prev.callerLabels,
      apiKey: patch.api_key !== undefined ? patch.api_key : prev.apiKey,
      workerType,
      engine: patch.runtime_type?.trim() || prev.engine,
    };
    next.modelId = modelIdOf(next);
    this.store(prev, next);
    this.generation++;
    this.emit('replaced', prev, next);
    return next;
  }

  /**
   * A re-registration that may change nothing (no admin bearer): the worker stays as it is, and
   * its discovery runs again, as for a restarted engine that slime registers anew.
   */
  touch(id: string): Worker {
    const w = this.require(id);
    this.generation++;
    this.emit('replaced', w, w);
    return w;
  }

  /** Discovery results: labels from the engine; caller labels still win in the merged view. */
  setDiscovered(id: string, labels: Record<string, string>): Worker | undefined {
    const w = this.byId.get(id);
    if (!w) return undefined;
    const next: Worker = { ...w, discoveredLabels: labels };
    next.modelId = modelIdOf(next);
    this.store(w, next);
    this.generation++;
    this.emit('discovered', next);
    return next;
  }

  /**
   * A worker as another replica wrote it (the shared bucket). The owner is not part of it: it
   * comes from the ownership lease. Changes nothing, and says nothing, when nothing changed.
   */
  applyRemote(remote: Omit<Worker, 'owner'>): Worker {
    const existing = this.byId.get(remote.id);
    const next: Worker = { ...remote, owner: existing?.owner ?? '' };
    if (existing && sameWorker(existing, next)) return existing;
    if (existing && existing.url !== next.url) this.byUrl.delete(existing.url);
    this.store(existing, next);
    this.byUrl.set(next.url, next.id);
    let ranks = this.byBase.get(next.baseUrl);
    if (!ranks) this.byBase.set(next.baseUrl, (ranks = new Set()));
    ranks.add(next.id);
    this.generation++;
    if (existing) this.emit('replaced', existing, next);
    else this.emit('added', next);
    return next;
  }

  /** Records which replica owns the worker's actor now. */
  setOwner(id: string, owner: string): void {
    const w = this.byId.get(id);
    if (!w || w.owner === owner) return;
    const next: Worker = { ...w, owner };
    this.byId.set(id, next);
    this.generation++;
    this.emit('owner', next, w.owner);
  }

  remove(id: string): Worker {
    const w = this.require(id);
    this.byId.delete(id);
    this.countModel(w.modelId, -1);
    this.byUrl.delete(w.url);
    const ranks = this.byBase.get(w.baseUrl);
    ranks?.delete(id);
    if (ranks?.size === 0) this.byBase.delete(w.baseUrl);
    this.generation++;
    this.emit('removed', w);
    return w;
  }

  /**
   * Real model ids served by at least one worker (`unknown` excluded): what a model-less request
   * resolves against. Kept on every write, so the /generate hot path reads it without a scan.
   */
  models(): ReadonlySet<string> {
    return this.modelSet;
  }

  private readonly modelCounts = new Map<string, number>();
  private readonly modelSet = new Set<string>();

  private store(prev: Worker | undefined, next: Worker): void {
    this.byId.set(next.id, next);
    if (prev?.modelId === next.modelId) return;
    if (prev) this.countModel(prev.modelId, -1);
    this.countModel(next.modelId, +1);
  }

  private countModel(model: string, delta: number): void {
    if (model === UNKNOWN_MODEL_ID) return;
    const n = (this.modelCounts.get(model) ?? 0) + delta;
    if (n > 0) {
      this.modelCounts.set(model, n);
      this.modelSet.add(model);
    } else {
      this.modelCounts.delete(model);
      this.modelSet.delete(model);
    }
  }

  /** Every registry worker of one engine (all DP ranks sharing a base_url). */
  siblings(baseUrl: string): Worker[] {
    const out: Worker[] = [];
    for (const id of this.byBase.get(baseUrl) ?? []) {
      const w = this.byId.get(id);
      if (w) out.push(w);
    }
    return out;
  }
}

/**
 * A worker's id follows from its URL, so every replica (and a restarted one) names the same
 * engine alike, and two replicas registering one URL at once register one worker. UUID-shaped.
 */
export function idForUrl(url: string): string {
  const h = createHash('sha256').update(normaliseUrl(url)).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** Registry facts equal (the owner aside): a re-delivered write changes nothing. */
export function sameWorker(a: Worker, b: Worker): boolean {
  const { owner: _a, ...ra } = a;
  const { owner: _b, ...rb } = b;
  return JSON.stringify(ra) === JSON.stringify(rb);
}

/** The URL's one spelling (worker-url.ts), so another spelling of a known engine finds it; as given, trimmed, when it does not parse. */
function normaliseUrl(url: string): string {
  try {
    return parseWorkerUrl(url).canonical;
  } catch {
    return url.trim().replace(/\/+$/, '');
  }
}

/** slime registers bare SGLang URLs without a runtime: HTTP defaults to sglang. */
function defaultEngine(mode: string): string {
  if (mode === 'http') return 'sglang';
  if (mode === 'grpc' || mode === 'zmq') return 'tokenspeed';
  return UNKNOWN_MODEL_ID;
}

function modelIdOf(w: Worker): string {
  const labels = mergedLabels(w);
  return nonEmpty(labels.model_id) ?? nonEmpty(labels.served_model_name) ?? nonEmpty(labels.model) ?? nonEmpty(labels.model_path) ?? UNKNOWN_MODEL_ID;
}

function nonEmpty(v: string | undefined): string | undefined {
  const t = v?.trim();
  return t ? t : undefined;
}
