// Keeps this replica's registry and the shared `workers` bucket in step: a registration, change,
// discovery or removal made here is written to the bucket, and what other replicas wrote is
// applied here. The bucket is the fleet's registry; each replica's Registry is its local copy,
// read on the hot path without a round trip. The owner is not written here (ownership.ts).

import type { JsonBucket } from '../bus/buckets.ts';
import type { Logger } from '../obs/logger.ts';
import type { Registry } from './registry.ts';
import type { StoredWorker } from '../wire/worker-entry.ts';
import type { Worker } from './worker.ts';

export class RegistrySync {
  private applying = false;
  private loaded = false;
  /** Our own deletions whose echo has not come back yet: a re-registration made meanwhile stays. */
  private readonly ownDeletes = new Map<string, number>();
  private stopWatch: (() => void) | undefined;
  /** Writes in flight, so close() and tests can wait for the bucket to hold what we did. */
  private writes = new Set<Promise<unknown>>();

  constructor(private readonly deps: { replicaId: string; registry: Registry; bucket: JsonBucket<StoredWorker>; log: Logger }) {
    const { registry } = deps;
    registry.on('added', (w) => this.write(w));
    registry.on('replaced', (_prev, next) => this.write(next));
    registry.on('discovered', (w) => this.write(w));
    registry.on('removed', (w) => this.erase(w.id));
  }

  /** Loads the fleet as the bucket holds it, then follows every change. */
  async start(): Promise<void> {
    this.stopWatch = await this.deps.bucket.watch((id, value) => this.apply(id, value));
    this.loaded = true;
  }

  /** Resolves when every write made so far reached the bucket. */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.writes]);
  }

  async close(): Promise<void> {
    this.stopWatch?.();
    await this.flush();
  }

  private apply(id: string, value: StoredWorker | null): void {
    const { registry } = this.deps;
    // Our own writes coming back are older than (or equal to) what we hold: skipping them keeps
    // a quick register-then-discover from flapping. At start-up they are the fleet we left.
    if (this.loaded && value?.writer === this.deps.replicaId) return;
    if (value === null && this.ownDeletes.has(id)) {
      const n = this.ownDeletes.get(id)! - 1;
      if (n > 0) this.ownDeletes.set(id, n);
      else this.ownDeletes.delete(id);
      return;
    }
    this.applying = true;
    try {
      if (value === null) {
        if (registry.get(id)) registry.remove(id);
      } else {
        const { writer: _writer, ...worker } = value;
        registry.applyRemote(worker);
      }
    } catch (err) {
      this.deps.log.warn({ err, worker_id: id }, 'could not apply a shared registry entry');
    } finally {
      this.applying = false;
    }
  }

  private write(w: Worker): void {
    if (this.applying) return;
    const { owner: _owner, ...stored } = w;
    this.track(this.deps.bucket.put(w.id, { ...stored, writer: this.deps.replicaId }), w.id);
  }

  private erase(id: string): void {
    if (this.applying) return;
    this.ownDeletes.set(id, (this.ownDeletes.get(id) ?? 0) + 1);
    this.track(this.deps.bucket.delete(id), id);
  }

  private track(p: Promise<unknown>, id: string): void {
    const tracked = p.catch((err) => this.deps.log.warn({ err, worker_id: id }, 'could not write the shared registry'));
    this.writes.add(tracked);
    void tracked.finally(() => this.writes.delete(tracked));
  }
}
