// The refit front every replica serves (POST /v1/rl/refits and `rl.refit.request`): validates a
// request, resolves its targets, refuses what cannot run (400, 409) before anything is touched,
// queues it on the durable refit queue under its id, and waits for its report, whichever replica
// runs it (refit/runner.ts). It also answers what the journals say: a refit's report or progress
// by id, and the recent and running refits, from the shared `refits` bucket.

import { randomUUID } from 'node:crypto';
import type { JsonBucket } from '../bus/buckets.ts';
import type { RefitQueue } from '../bus/refit-queue.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { selectorFromQuery } from '../fleet/selector.ts';
import { GatewayError } from '../api/errors.ts';
import type { Logger } from '../obs/logger.ts';
import type { RefitJournal } from './journal.ts';
import { planRefit } from './plan.ts';
import type { RefitReport } from './report.ts';
import type { Clash } from './queue-verdict.ts';
import { parseRefitRequest } from './request.ts';
import type { RefitRunner } from './runner.ts';
import { prepareCalls } from './calls.ts';
import type { QueuedRefit } from './queue-message.ts';
import { quorumOf } from './verdicts.ts';
import { splitTargets, type SkippedEngine } from './targets.ts';
import type { Worker } from '../fleet/worker.ts';
import type { RefitRequest } from './request.ts';

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

export class RefitService {
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
  private closing = false;
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly deps: {
      view: FleetView;
      legs: LegRunner;
      queue: RefitQueue;
      journals: JsonBucket<RefitJournal>;
      runner: RefitRunner;
      log: Logger;
      /** A worker's model id (the registry's). */
      modelOf: (workerId: string) => string | undefined;
      replicaId: string;
      /** Publishes one of the refit's progress events (refit-events contract). */
      publish: (refitId: string, event: Record<string, unknown>) => void;
      /**
       * This replica's lease fence: cut off from NATS for `cutAnswerMs`, it stops waiting on the
       * reports of the refits callers wait for here (another replica finishes them) and says so.
       */
      fence?: { onLapse(l: () => void): () => void; onResync(l: () => void): () => void };
      cutAnswerMs?: number;
    },
  ) {
    if (deps.fence) {
      this.stopFence.push(
        deps.fence.onLapse(() => {
          this.cutSince ??= Date.now();
          clearTimeout(this.cutTimer);
          this.cutTimer = setTimeout(() => this.answerCutWaiters(), this.cutAnswerMs);
          this.cutTimer.unref();
        }),
        deps.fence.onResync(() => {
          this.cutSince = undefined;
          clearTimeout(this.cutTimer);
        }),
      );
    }
  }

  private get cutAnswerMs(): number {
    return this.deps.cutAnswerMs ?? 30_000;
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

  /** Loads the journals and follows them: reports reach waiting callers on every replica. */
  async start(): Promise<void> {
    this.stopWatch = await this.deps.journals.watch((id, j, revision) => this.journalChanged(id, j, revision));
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

  private async stored(id: string): Promise<RefitJournal | undefined> {
    return (await this.storedEntry(id))?.value;
  }

  private async storedEntry(id: string): Promise<{ value: RefitJournal; revision: number } | undefined> {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) return undefined;
    try {
      return (await this.deps.journals.get(id)) ?? undefined;
    } catch {
      return undefined;
    }
  }

  /** The running refits first (each read afresh), then the kept reports, newest first. */
  async list(): Promise<Array<RefitReport | RunningRefit>> {
    const running = [...this.journals.values()].filter((j) => j.status === 'running');
    await Promise.all(running.map((j) => this.fresh(j.id)));
    const all = [...this.journals.values()].reverse();
    return [...all.filter((j) => j.status === 'running').map((j) => unfinishedView(j, j)), ...all.filter((j) => j.report).map((j) => j.report!)];
  }

  /** The refit's journal says it runs (it may be between runners after a replica died). */
  running(refitId: string): boolean {
    return this.journals.get(refitId)?.status === 'running';
  }

  /** A refit accepted here, or running anywhere (its journal says so), has this engine among its targets. */
  holds(workerId: string): boolean {
    // Asked per engine per look of the pause reconciler: a set per targets list, not a scan of it.
    for (const q of this.accepted.values()) if (targetSet(q.targets).has(workerId)) return true;
    for (const j of this.journals.values()) if (j.status === 'running' && targetSet(j.targets).has(workerId)) return true;
    return false;
  }

  /** Called with every journal as it changes (any replica's refits). */
  onJournal(listener: (j: RefitJournal) => void): () => void {
    this.journalListeners.add(listener);
    return () => this.journalListeners.delete(listener);
  }

  private readonly journalListeners = new Set<(j: RefitJournal) => void>();

  /** The refit's journal holds its report. */
  done(refitId: string): boolean {
    return this.journals.get(refitId)?.status === 'done';
  }

  /**
   * A refit other than `refitId` that holds one of these engines: one this replica queued that
   * has no journal yet, or a running one. A journal the local copy shows running is read afresh
   * before it refuses anything: it may have ended meanwhile.
   */
  async clashes(refitId: string, targets: string[]): Promise<Clash | undefined> {
    for (const [id, { targets: held }] of this.accepted) {
      if (id === refitId) continue;
      const hit = targets.find((t) => held.includes(t));
      if (hit) return { worker: hit, refit: id, running: false };
    }
    for (const j of [...this.journals.values()]) {
      if (j.status !== 'running' || j.id === refitId) continue;
      const hit = targets.find((t) => j.targets.includes(t));
      if (!hit) continue;
      const now = (await this.fresh(j.id)) ?? j;
      if (now.status === 'running') return { worker: hit, refit: j.id, running: true };
    }
    return undefined;
  }

  /** What a refit would do, touching nothing (`dry_run: true`). */
  plan(body: unknown): RefitPlanView {
    const req = parseRefitRequest(body);
    const { selectorText, targets, skipped } = this.resolve(req);
    // Asleep engines are reported, not refitted: the plan is made over the others, as the run is.
    const asleep = targets.filter((w) => this.deps.view.engine(w).control === 'asleep').map((w) => w.id);
    const active = targets.filter((w) => !asleep.includes(w.id));
    const plan = planRefit(req, active);
    prepareCalls(this.deps.legs, plan, active, req.refit_id ?? 'dry-run');
    const ids = active.map((w) => w.id);
    const phases: RefitPlanView['phases'] = [{ phase: 'pause', step: null, method: plan.pause.method, path: plan.pause.path, engines: ids }];
    plan.steps.forEach((s, i) => {
      const spec = active.length ? plan.step(i, active[0]!) : null;
      phases.push({ phase: 'refit', step: s.name, method: spec?.method ?? 'POST', path: spec?.path ?? s.name.split(' ')[0]!, engines: ids });
    });
    if (plan.verify) phases.push({ phase: 'verify', step: null, method: plan.verify.method, path: plan.verify.path, engines: ids });
    phases.push({ phase: 'resume', step: null, method: plan.resume.method, path: plan.resume.path, engines: ids });
    return {
      dry_run: true,
      refit_id: req.refit_id ?? null,
      weight_version: req.weight_version,
      source: req.source.kind,
      selector: selectorText ?? null,
      quorum: quorumOf(req, active.length),
      targets: active.map((w) => ({ worker_id: w.id, url: w.url, ...(plan.group ? { rank_offset: plan.group.rankOffsets[w.id] } : {}) })),
      skipped,
      asleep,
      ...(plan.group ? { world_size: plan.group.worldSize } : {}),
      phases,
      calls: phases.reduce((n, p) => n + p.engines.length, 0),
    };
  }

  /** Validates, queues the transaction, and resolves with its report (never rejects on engine failures). */
  async run(body: unknown, origin: 'http' | 'nats'): Promise<RefitReport> {
    return (await this.submit(body, origin)).report;
  }

  /**
   * Validates and queues the transaction; resolves once it is queued (or known), with its id and
   * its report to come. Refusals (4xx) throw before anything is queued.
   */
  async submit(body: unknown, origin: 'http' | 'nats'): Promise<{ id: string; report: Promise<RefitReport> }> {
    const req = parseRefitRequest(body);
    if (this.closing) throw new GatewayError('bus_unavailable', 'the gateway is shutting down; send the refit to another replica');
    const id = req.refit_id ?? randomUUID();
    const known = this.journals.get(id) ?? (req.refit_id ? await this.stored(id) : undefined);
    if (known && known.request.weight_version !== req.weight_version) {
      throw new GatewayError('refit_id_conflict', `refit \`${id}\` exists for weight_version ${JSON.stringify(known.request.weight_version)}; a retry must send the same request`, { refit_id: id });
    }
    // The same refit id again is the same refit: its report when it is over, its end when it runs.
    if (known?.report) return { id, report: Promise.resolve(known.report) };
    if (known) return { id, report: this.waitFor(id) };
    const { selectorText, targets, skipped } = this.resolve(req);
    if (!known) {
      const clash = (await this.clashes(id, targets.map((w) => w.id)))?.worker;
      if (clash) throw new GatewayError('refit_in_progress', `worker \`${clash}\` is already part of a running refit`, { worker_id: clash });
    }
    // Every call of every phase is built (and size-checked) before anything is queued, so a bad
    // request is refused whole instead of failing halfway with engines paused.
    prepareCalls(this.deps.legs, planRefit(req, targets), targets, id);

    const report = this.waitFor(id);
    const queued: QueuedRefit = { id, request: req, selector: selectorText ?? null, targets: targets.map((w) => w.id), skipped, origin, submitted_at: new Date().toISOString() };
    this.accepted.set(id, queued);
    let duplicate: boolean;
    try {
      ({ duplicate } = await this.deps.queue.submit(id, queued));
    } catch (err) {
      this.forget(id);
      throw new GatewayError('bus_unavailable', `the refit could not be queued, so nothing was paused: ${(err as Error).message}`);
    }
    if (!duplicate) {
      this.deps.publish(id, { type: 'accepted', weight_version: req.weight_version, source: req.source.kind, selector: selectorText ?? null, targets: queued.targets, skipped, replica: this.deps.replicaId });
    }
    return { id, report };
  }

  /** The selected engines, split into those that take part and those left out (targets.ts). */
  private resolve(req: RefitRequest): { selectorText: string | undefined; targets: Worker[]; skipped: SkippedEngine[] } {
    const selectorText = req.selector?.trim() ? req.selector : undefined;
    // Unlike a raw fan-out, a refit without a selector means the whole fleet.
    const selector = selectorText !== undefined ? selectorFromQuery(selectorText) : undefined;
    const selected = this.deps.view.targets(selector);
    if (selected.length === 0) {
      const text = selector?.text ?? '';
      throw new GatewayError('no_workers_match', selector ? `no workers match selector \`${text}\`` : 'no workers are registered', { selector: text });
    }
    const { targets, skipped } = splitTargets(this.deps.view, selected, req);
    if (targets.length === 0) {
      throw new GatewayError('no_eligible_targets', `none of the ${selected.length} selected engines can take this refit`, { skipped });
    }
    return { selectorText, targets, skipped };
  }

  /** Stops taking refits; the ones this replica runs finish (and resume what they paused). */
  async drain(): Promise<void> {
    this.closing = true;
    await this.deps.runner.drain();
  }

  close(): void {
    this.stopWatch?.();
    clearInterval(this.polling);
    clearTimeout(this.cutTimer);
    for (const stop of this.stopFence.splice(0)) stop();
  }

  private waitFor(id: string): Promise<RefitReport> {
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

  private polling: NodeJS.Timeout | undefined;

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

  private forget(id: string): void {
    this.waiters.delete(id);
    this.accepted.delete(id);
  }

  private journalChanged(id: string, j: RefitJournal | null, revision: number): void {
    // A lagging watch may bring a revision older than one read afresh: the newest stands.
    if (revision <= (this.revisions.get(id) ?? 0)) return;
    this.revisions.set(id, revision);
    if (!j) {
      this.journals.delete(id);
      return;
    }
    this.journals.delete(id); // re-inserted last: the map stays in order of change
    this.journals.set(id, j);
    this.accepted.delete(id);
    for (const l of this.journalListeners) l(j);
    if (j.status === 'done' && j.report) {
      const waiting = this.waiters.get(id);
      this.waiters.delete(id);
      for (const w of waiting ?? []) w.resolve(j.report);
      this.prune();
    }
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

/** The answer to a dry run. */
export interface RefitPlanView {
  dry_run: true;
  refit_id: string | null;
  weight_version: string;
  source: 'disk' | 'distributed';
  selector: string | null;
  quorum: number;
  targets: Array<{ worker_id: string; url: string; rank_offset?: number }>;
  skipped: SkippedEngine[];
  asleep: string[];
  world_size?: number;
  phases: Array<{ phase: string; step: string | null; method: string; path: string; engines: string[] }>;
  /** Engine calls the refit would make when every engine succeeds. */
  calls: number;
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
