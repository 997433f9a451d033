// The refit read model of one replica: the journals of the shared `refits` bucket (every running
// refit, and the newest finished ones), followed through a watch and read afresh where a stale
// answer would mislead; the refits this replica queued whose journal has not appeared yet; and
// the callers waiting here for a report. The front, the runner, the resumes owed, the engine host
// and the pause reconciler all ask it about refits, and it is built before all of them. It never
// writes a journal (the runner holding a refit does) and never queues a refit (the front does).

import { GatewayError } from '../api/errors.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { Clash } from './queue-verdict.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';
import type { RefitReport } from '../wire/refit-report.ts';

const KEEP_REPORTS = 256;

/** What GET /v1/rl/refits/{id} answers while a refit runs (or, on the replica that queued it, waits to be taken). */
export interface RunningRefit {
  id: string;
  status: 'running' | 'queued';
  weight_version: string;
  source: 'disk' | 'distributed';
  selector: string | null;
  submitted_at: string;
  /** The replica running it; null while it waits in the queue. */
  replica: string | null;
  phase: string | null;
  step_index: number;
  total: number;
  pending: string[];
}

const targetSets = new WeakMap<readonly string[], ReadonlySet<string>>();
/** A refit's targets as a set, made once per list (journals and queued refits replace theirs whole). */
function targetSet(targets: readonly string[]): ReadonlySet<string> {
  let set = targetSets.get(targets);
  if (!set) targetSets.set(targets, (set = new Set(targets)));
  return set;
}

export class RefitJournals {
  /** Every refit the bucket holds that is running, and the newest finished ones. */
  private readonly journals = new Map<string, RefitJournal>();
  private readonly waiters = new Map<string, Array<{ resolve: (r: RefitReport) => void; reject: (err: Error) => void }>>();
  /** Since when this replica's lease fence has been closed (cut off from NATS), if it is. */
  private cutSince: number | undefined;
  private cutTimer: NodeJS.Timeout | undefined;
  private readonly stopFence: Array<() => void> = [];
  /** The bucket revision of each journal held, so that only a newer one replaces it. */
  private readonly revisions = new Map<string, number>();
  /** Refits this replica queued whose journal has not appeared yet: their targets count as busy. */
  private readonly accepted = new Map<string, QueuedRefit>();
  private readonly journalListeners = new Set<(j: RefitJournal) => void>();
  /** Engines the running rolling refits drain, by refit id, and all of them at once. */
  private readonly drainingBy = new Map<string, readonly string[]>();
  private drainingIds: ReadonlySet<string> = new Set();
  /** Running rolling refits, by id. */
  private readonly rollingIds = new Set<string>();
  private polling: NodeJS.Timeout | undefined;
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly deps: {
      /** The `refits` bucket, read only. */
      bucket: Pick<JsonBucket<RefitJournal>, 'get' | 'watch'>;
      /** A worker's model id (the registry's). */
      modelOf: (workerId: string) => string | undefined;
      /**
       * This replica's lease fence: cut off from NATS for `cutAnswerMs`, it stops waiting on the
       * reports of the refits callers wait for here (another replica finishes them) and says so.
       */
      fence?: { onLapse(l: () => void): () => void; onResync(l: () => void): () => void };
      cutAnswerMs?: number;
    },
  ) {}

  private get cutAnswerMs(): number {
    return this.deps.cutAnswerMs ?? 30_000;
  }

  /** Loads the journals and follows them (and the fence): reports reach waiting callers on every replica. */
  async start(): Promise<void> {
    const { fence } = this.deps;
    if (fence) {
      this.stopFence.push(
        fence.onLapse(() => {
          this.cutSince ??= Date.now();
          clearTimeout(this.cutTimer);
          this.cutTimer = setTimeout(() => this.answerCutWaiters(), this.cutAnswerMs);
          this.cutTimer.unref();
        }),
        fence.onResync(() => {
          this.cutSince = undefined;
          clearTimeout(this.cutTimer);
        }),
      );
    }
    this.stopWatch = await this.deps.bucket.watch((id, j, revision) => this.journalChanged(id, j, revision));
  }

  close(): void {
    this.stopWatch?.();
    clearInterval(this.polling);
    clearTimeout(this.cutTimer);
    for (const stop of this.stopFence.splice(0)) stop();
  }

  /** A refit's report, or its progress while it runs; older ones than kept in memory come from the bucket. */
  async get(id: string): Promise<RefitReport | RunningRefit> {
    const cached = this.journals.get(id);
    const j = cached?.status === 'done' ? cached : ((await this.fresh(id)) ?? cached);
    // Queued here and not yet taken by a runner (no journal yet): a 202's Location must answer.
    const queued = this.accepted.get(id);
    if (!j && queued) return unfinishedView(queued);
    if (!j) throw new GatewayError('refit_not_found', `refit \`${id}\` not found`, { id });
    return j.report ?? unfinishedView(j, j);
  }

  /** The running refits first (each read afresh), then the kept reports, newest first. */
  async list(): Promise<Array<RefitReport | RunningRefit>> {
    const running = [...this.journals.values()].filter((j) => j.status === 'running');
    await Promise.all(running.map((j) => this.fresh(j.id)));
    const all = [...this.journals.values()].reverse();
    return [...all.filter((j) => j.status === 'running').map((j) => unfinishedView(j, j)), ...all.filter((j) => j.report).map((j) => j.report!)];
  }

  /** The journal as this replica's copy holds it (it may lag behind the bucket). */
  journal(id: string): RefitJournal | undefined {
    return this.journals.get(id);
  }

  /** The journal as the bucket holds it now, or undefined (none, an id no journal can have, or the bucket failed). */
  async stored(id: string): Promise<RefitJournal | undefined> {
    return (await this.storedEntry(id))?.value;
  }

  /** The refit's journal says it runs (it may be between runners after a replica died). */
  running(refitId: string): boolean {
    return this.journals.get(refitId)?.status === 'running';
  }

  /** The refit's journal holds its report. */
  done(refitId: string): boolean {
    return this.journals.get(refitId)?.status === 'done';
  }

  /** A refit accepted here, or running anywhere (its journal says so), has this engine among its targets. */
  holds(workerId: string): boolean {
    // Asked per engine per look of the pause reconciler: a set per targets list, not a scan of it.
    for (const q of this.accepted.values()) if (targetSet(q.targets).has(workerId)) return true;
    for (const j of this.journals.values()) if (j.status === 'running' && targetSet(j.targets).has(workerId)) return true;
    return false;
  }

  /**
   * A rolling refit drains this engine now (its wave is next, or being refit): routing sends it
   * no new request. Asked per candidate per pick: a set kept as journals change.
   */
  draining(workerId: string): boolean {
    return this.drainingIds.has(workerId);
  }

  /** Some rolling refit drains engines now (routing asks first, before asking per engine). */
  drainingAny(): boolean {
    return this.drainingIds.size > 0;
  }

  /** A rolling refit runs somewhere (its waves drain from its own journal): engines of two versions serve until it ends. */
  rolling(): boolean {
    return this.rollingIds.size > 0;
  }

  /** Called with every journal as it changes (any replica's refits). */
  onJournal(listener: (j: RefitJournal) => void): () => void {
    this.journalListeners.add(listener);
    return () => this.journalListeners.delete(listener);
  }

  /**
   * The fleet's version of a model: the version of the newest finished refit that brought at
   * least one engine of that model to it. An engine that joins or comes back below it is
   * quarantined until a refit brings it up. Unknown (undefined) when no such refit is kept.
   */
  fleetVersion(modelId: string): string | undefined {
    const done = [...this.journals.values()].filter((j) => j.report).reverse();
    for (const j of done) {
      if (j.report!.engines.some((e) => e.outcome === 'ok' && this.deps.modelOf(e.worker_id) === modelId)) return j.report!.weight_version;
    }
    return undefined;
  }

  /**
   * A refit other than `refitId` that holds one of these engines: one this replica queued that
   * has no journal yet, or a running one. A journal the local copy shows running is read afresh
   * before it refuses anything: it may have ended meanwhile. A rolling refit (`parent`, for one of
   * its waves) and its own waves never clash.
   */
  async clashes(refitId: string, targets: string[], parent?: string): Promise<Clash | undefined> {
    for (const [id, { targets: held }] of this.accepted) {
      if (id === refitId || id === parent) continue;
      const hit = targets.find((t) => held.includes(t));
      if (hit) return { worker: hit, refit: id, running: false };
    }
    for (const j of [...this.journals.values()]) {
      // A rolling refit's waves and the parent hold the same engines: neither clashes with the other.
      if (j.status !== 'running' || j.id === refitId || j.id === parent || j.parent === refitId) continue;
      const hit = targets.find((t) => j.targets.includes(t));
      if (!hit) continue;
      const now = (await this.fresh(j.id)) ?? j;
      if (now.status === 'running') return { worker: hit, refit: j.id, running: true };
    }
    return undefined;
  }

  /**
   * A journal this replica's runner has just written, at `revision`: the callers waiting here hear
   * its report at once, not when the watch brings the write back (the echo is then older news).
   */
  written(j: RefitJournal, revision: number): void {
    this.journalChanged(j.id, { ...j }, revision);
  }

  /** A refit this replica is queueing: its targets are busy until its journal appears. */
  accept(q: QueuedRefit): void {
    this.accepted.set(q.id, q);
  }

  /** A refit that could not be queued after all: nobody waits for it, it holds nothing. */
  forget(id: string): void {
    this.waiters.delete(id);
    this.accepted.delete(id);
  }

  /** The refit's report, when its journal holds it (whichever replica runs it). */
  waitFor(id: string): Promise<RefitReport> {
    const p = new Promise<RefitReport>((resolve, reject) => {
      if (this.cutSince !== undefined && Date.now() - this.cutSince >= this.cutAnswerMs) return reject(this.cutError(id));
      const list = this.waiters.get(id);
      if (list) list.push({ resolve, reject });
      else this.waiters.set(id, [{ resolve, reject }]);
    });
    // A 202 caller never reads the report promise: its rejection must not go unhandled.
    p.catch(() => undefined);
    this.pollWaiters();
    return p;
  }

  /** Cut off long enough: each caller waiting here learns so, and where to read the report. */
  private answerCutWaiters(): void {
    if (this.cutSince === undefined) return;
    for (const [id, list] of this.waiters) {
      this.waiters.delete(id);
      for (const w of list) w.reject(this.cutError(id));
    }
  }

  private cutError(id: string): GatewayError {
    const secs = Math.round((Date.now() - (this.cutSince ?? Date.now())) / 1000);
    return new GatewayError(
      'bus_unavailable',
      `this replica has been cut off from NATS for ${secs} s and cannot see refit \`${id}\` end; another replica runs or finished it: read GET /v1/rl/refits/${id} on another replica, or send the same request (same refit_id) to one`,
      { refit_id: id },
    );
  }

  /**
   * The journal as the bucket holds it now, and the local copy repaired with it. The local copies
   * follow the bucket through a watch, which can lag behind it for a while after the NATS node
   * serving it dies: what a caller is told about a running refit (its progress, whether it still
   * holds an engine) is read afresh.
   */
  private async fresh(id: string): Promise<RefitJournal | undefined> {
    const r = await this.storedEntry(id);
    if (r) this.journalChanged(id, r.value, r.revision);
    return r?.value ?? this.journals.get(id);
  }

  private async storedEntry(id: string): Promise<{ value: RefitJournal; revision: number } | undefined> {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) return undefined;
    try {
      return (await this.deps.bucket.get(id)) ?? undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The watch brings reports, but a watch can stall for a while when its server dies: while
   * someone waits, the journals they wait for are also read directly, once a second.
   */
  private pollWaiters(): void {
    if (this.polling) return;
    this.polling = setInterval(() => {
      if (this.waiters.size === 0) {
        clearInterval(this.polling);
        this.polling = undefined;
        return;
      }
      for (const id of this.waiters.keys()) {
        void this.storedEntry(id).then((r) => {
          if (r?.value.status === 'done' && this.waiters.has(id)) this.journalChanged(id, r.value, r.revision);
        });
      }
    }, 1_000);
    this.polling.unref();
  }

  private journalChanged(id: string, j: RefitJournal | null, revision: number): void {
    // A lagging watch may bring a revision older than one read afresh: the newest stands.
    if (revision <= (this.revisions.get(id) ?? 0)) return;
    this.revisions.set(id, revision);
    if (!j) {
      this.journals.delete(id);
      this.drainedBy(id, []);
      this.rollingIds.delete(id);
      return;
    }
    this.journals.delete(id); // re-inserted last: the map stays in order of change
    this.journals.set(id, j);
    this.drainedBy(id, j.status === 'running' ? (j.rollout?.draining ?? []) : []);
    if (j.status === 'running' && j.request.strategy?.kind === 'rolling') this.rollingIds.add(id);
    else this.rollingIds.delete(id);
    this.accepted.delete(id);
    for (const l of this.journalListeners) l(j);
    if (j.status === 'done' && j.report) {
      const waiting = this.waiters.get(id);
      this.waiters.delete(id);
      for (const w of waiting ?? []) w.resolve(j.report);
      this.prune();
    }
  }

  private drainedBy(id: string, ids: readonly string[]): void {
    const before = this.drainingBy.get(id);
    if ((before?.length ?? 0) === 0 && ids.length === 0) return;
    if (ids.length === 0) this.drainingBy.delete(id);
    else this.drainingBy.set(id, ids);
    this.drainingIds = new Set([...this.drainingBy.values()].flat());
  }

  private prune(): void {
    let done = 0;
    for (const j of this.journals.values()) if (j.status === 'done') done++;
    for (const [id, j] of this.journals) {
      if (done <= KEEP_REPORTS) break;
      if (j.status === 'done') {
        this.journals.delete(id);
        this.revisions.delete(id);
        done--;
      }
    }
  }
}

/** A refit not finished yet: queued (no journal yet), or running as its journal `j` says. */
function unfinishedView(q: Pick<QueuedRefit, 'id' | 'request' | 'selector' | 'submitted_at' | 'targets'>, j?: RefitJournal): RunningRefit {
  return {
    id: q.id,
    status: j ? 'running' : 'queued',
    weight_version: q.request.weight_version,
    source: q.request.source.kind,
    selector: q.selector,
    submitted_at: q.submitted_at,
    replica: j?.holder ?? null,
    phase: j?.phase ?? null,
    step_index: j?.step_index ?? 0,
    total: q.targets.length,
    pending: j?.pending ?? [],
  };
}
