// The JetStream KV buckets that hold the fleet's shared state, one set per subject root, so that
// every gateway replica on a root sees the same fleet and a restarted one finds it again. This
// file owns their names, their options and a small JSON face over them, typed by what each bucket
// holds (the shapes in src/wire/); how each is used belongs to src/fleet/ and src/refit/
// (docs/nats.md lists them all).

import { jetstream } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { EngineRecord } from '../wire/engine-state.ts';
import type { Heartbeat } from '../wire/heartbeat.ts';
import type { OwnerLease } from '../wire/owner-lease.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';
import type { OwedResume } from '../wire/resume-owed.ts';
import type { StoredWorker } from '../wire/worker-entry.ts';
import { decode, encode } from './codec.ts';
import { AckedPuts } from './acked-puts.ts';

/** The bucket's own helpers that nats.js's KV has and its interface does not name. */
interface KvSubjects {
  encodeKey(key: string): string;
  validateKey(key: string): void;
  subjectForKey(key: string, edit?: boolean): string;
}

/** What each bucket holds (its writer in brackets). */
export const BUCKETS = {
  /** Registry facts per worker id, api keys included [the replica that registered or changed it]. */
  workers: 'workers',
  /** Each engine's last observed state, no secrets [its owner]. */
  engines: 'engines',
  /** Which replica owns each engine's actor: the lease, changed by compare-and-set [claimants]. */
  owners: 'owners',
  /** Each replica's heartbeat [that replica]. */
  replicas: 'replicas',
  /** Resumes owed to engines that a refit paused [the refit's runner; paid by the owner]. */
  owed: 'owed',
  /** Each refit's journal and, at the end, its report [the replica running it]. */
  refits: 'refits',
} as const;

export type BucketName = keyof typeof BUCKETS;

/** The value each bucket holds, by key. */
export interface BucketValues {
  workers: StoredWorker;
  engines: EngineRecord;
  owners: OwnerLease;
  replicas: Heartbeat;
  owed: OwedResume;
  refits: RefitJournal;
}

/** How often a watch checks that it has not fallen silent behind its bucket. */
const WATCH_CHECK_MS = 3_000;

/** One KV bucket holding JSON values. */
export class JsonBucket<T> {
  /** `puts`: plain puts go out pipelined, their acks on one subscription (acked-puts.ts); nats.js's put without it. */
  constructor(
    readonly kv: KV,
    private readonly puts?: AckedPuts,
  ) {}

  async get(key: string): Promise<{ value: T; revision: number } | null> {
    const e = await this.kv.get(key);
    if (!e || e.operation !== 'PUT' || e.length === 0) return null;
    return { value: decode(e.value) as T, revision: e.revision };
  }

  put(key: string, value: T): Promise<number> {
    if (!this.puts) return this.kv.put(key, encode(value));
    const kv = this.kv as unknown as KvSubjects;
    let subject: string;
    try {
      const ek = kv.encodeKey(key);
      kv.validateKey(ek);
      subject = kv.subjectForKey(ek, true);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.puts.publish(subject, encode(value));
  }

  /** Fails if the key exists (the first claim wins). */
  create(key: string, value: T): Promise<number> {
    return this.kv.create(key, encode(value));
  }

  /** Compare-and-set: fails unless the key is still at `revision`. */
  update(key: string, value: T, revision: number): Promise<number> {
    return this.kv.update(key, encode(value), revision);
  }

  async delete(key: string): Promise<void> {
    await this.kv.delete(key);
  }

  /**
   * Every current value, then every change, in order, until the returned stop is called. Resolves
   * once the current values have all been delivered: the caller starts from the whole bucket.
   */
  async watch(onEntry: (key: string, value: T | null, revision: number) => void): Promise<() => void> {
    // An empty bucket delivers nothing before its updates; otherwise the last current value
    // arrives with nothing left pending (delta 0).
    const empty = (await this.kv.status()).values === 0;
    let iter = await this.kv.watch({ include: '' });
    let stopped = false;
    let last = 0;
    let markReady: () => void = () => {};
    const loaded = new Promise<void>((resolve) => (markReady = resolve));
    if (empty) markReady();
    // A watch whose consumer lived on a server that died can stay silent for a minute before the
    // client notices. Checked every few seconds: if the bucket moved past what this watch delivered
    // and nothing came since the last look, the watch is started again from where it was.
    let lastAtCheck = -1;
    const check = setInterval(() => {
      void this.kv
        .status()
        .then((st) => {
          const head = st.streamInfo.state.last_seq;
          if (head > last && last === lastAtCheck) (iter as { stop?: () => void }).stop?.();
          lastAtCheck = last;
        })
        .catch(() => {});
    }, WATCH_CHECK_MS);
    check.unref();
    void (async () => {
      // A watch can end under us (its stream's leader moved, the server it was on died): it is
      // started again from the revision after the last one delivered, so no change is missed.
      for (;;) {
        try {
          for await (const e of iter) {
            last = Math.max(last, e.revision);
            onEntry(e.key, valueOf<T>(e), e.revision);
            if (e.isUpdate || !e.delta) markReady();
          }
        } catch {
          // restarted below
        }
        if (stopped) return;
        await new Promise((r) => setTimeout(r, 250));
        if (stopped) return;
        try {
          iter = await this.kv.watch(last > 0 ? { resumeFromRevision: last + 1 } : { include: '' });
        } catch {
          // the bus may still be away: the loop tries again
          iter = (async function* () {})() as unknown as typeof iter;
        }
      }
    })();
    await loaded;
    return () => {
      stopped = true;
      clearInterval(check);
      (iter as { stop?: () => void }).stop?.();
    };
  }

  async keys(): Promise<string[]> {
    const out: string[] = [];
    for await (const k of await this.kv.keys()) out.push(k);
    return out;
  }
}

function valueOf<T>(e: KvEntry): T | null {
  if (e.operation !== 'PUT' || e.length === 0) return null;
  try {
    return decode(e.value) as T;
  } catch {
    return null;
  }
}

export type FleetBuckets = { [K in BucketName]: JsonBucket<BucketValues[K]> };

/** Bucket names allow [A-Za-z0-9_-]: a dotted subject root maps its dots to `_`. */
export function bucketName(root: string, name: string): string {
  return `rlgate_${root.replace(/[^A-Za-z0-9_-]/g, '_')}_${name}`;
}

/** How long one bucket request may wait for a replica of `leaseMs`: half the lease, 1 to 5 s (see openBuckets). */
export function bucketTimeoutFor(leaseMs: number): number {
  return Math.min(5_000, Math.max(1_000, leaseMs / 2));
}

/**
 * Creates (or opens) every bucket of a subject root. On a cluster the buckets are replicated to
 * three nodes, so losing one node loses no state.
 */
export async function openBuckets(
  nc: NatsConnection,
  root: string,
  opts: { replicas?: number; timeoutMs?: number; inboxPrefix?: string } = {},
): Promise<FleetBuckets> {
  // `timeoutMs`: how long one bucket request may wait (nats.js's 5 s by default). A replica's
  // heartbeats must land within its lease: a longer wait only delays the retry that gets through
  // once a stalled stream has elected a new leader.
  const kvm = new Kvm(opts.timeoutMs !== undefined ? jetstream(nc, { timeout: opts.timeoutMs }) : nc);
  const replicas = opts.replicas ?? (nc.info?.cluster ? 3 : 1);
  const out: Partial<Record<BucketName, JsonBucket<unknown>>> = {};
  // One ack inbox for every bucket of the root, waiting as long as a bucket request (nats.js's 5 s by default).
  const puts = new AckedPuts(nc, opts.timeoutMs ?? 5_000, opts.inboxPrefix);
  for (const [key, name] of Object.entries(BUCKETS) as Array<[BucketName, string]>) {
    // Journals and reports are kept a day; the fleet's state stays until it is removed.
    const kv = await kvm.create(bucketName(root, name), { history: 1, replicas, ...(key === 'refits' ? { ttl: 24 * 3_600_000 } : {}) });
    out[key] = new JsonBucket(kv, puts);
  }
  // The one place a bucket gets its value's type (BucketValues): what is written there is that type.
  return out as FleetBuckets;
}
