// The refit front every replica serves (POST /v1/rl/refits and `rl.refit.request`): validates a
// request, resolves its targets, refuses what cannot run (400, 409) before anything is touched,
// plans it, queues it on the durable refit queue under its id, and waits for its report,
// whichever replica runs it. What it answers about refits (a report or progress by id, the
// recent and running refits) comes from the read model (journals.ts); it never runs a refit.

import { randomUUID } from 'node:crypto';
import type { RefitQueue } from '../bus/refit-queue.ts';
import type { LegRunner } from '../control/leg-runner.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { selectorFromQuery } from '../fleet/selector.ts';
import { GatewayError } from '../api/errors.ts';
import { planRefit } from './plan.ts';
import { parseRefitRequest } from './request.ts';
import { prepareCalls } from './calls.ts';
import type { RefitJournals, RunningRefit } from './journals.ts';
import type { RefitPublisher } from './publisher.ts';
import { quorumOf } from './verdicts.ts';
import { splitTargets } from './targets.ts';
import { planWaves } from './waves.ts';
import type { Worker } from '../fleet/worker.ts';
import type { QueuedRefit } from '../wire/queued-refit.ts';
import type { RefitReport, SkippedEngine } from '../wire/refit-report.ts';
import type { RefitPlanView, RefitRequest } from '../wire/refit-request.ts';

export class RefitService {
  private closing = false;

  constructor(
    private readonly deps: {
      view: FleetView;
      legs: LegRunner;
      queue: RefitQueue;
      journals: RefitJournals;
      events: RefitPublisher;
      replicaId: string;
    },
  ) {}

  /** A refit's report, or its progress while it runs (journals.ts). */
  get(id: string): Promise<RefitReport | RunningRefit> {
    return this.deps.journals.get(id);
  }

  /** The running refits, then the kept reports, newest first (journals.ts). */
  list(): Promise<Array<RefitReport | RunningRefit>> {
    return this.deps.journals.list();
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
      ...(req.strategy?.kind === 'rolling' ? { strategy: 'rolling' as const, waves: planWaves(ids, req.strategy.max_unavailable) } : {}),
      ...(req.strategy?.kind === 'in_flight' ? { strategy: 'in_flight' as const } : {}),
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
    const { journals } = this.deps;
    const known = journals.journal(id) ?? (req.refit_id ? await journals.stored(id) : undefined);
    if (known && known.request.weight_version !== req.weight_version) {
      throw new GatewayError(
        'refit_id_conflict',
        `refit \`${id}\` exists for weight_version ${JSON.stringify(known.request.weight_version)}; a retry must send the same request`,
        { refit_id: id },
      );
    }
    // The same refit id again is the same refit: its report when it is over, its end when it runs.
    if (known?.report) return { id, report: Promise.resolve(known.report) };
    if (known) return { id, report: journals.waitFor(id) };
    const { selectorText, targets, skipped } = this.resolve(req);
    if (!known) {
      const clash = (
        await journals.clashes(
          id,
          targets.map((w) => w.id),
        )
      )?.worker;
      if (clash) throw new GatewayError('refit_in_progress', `worker \`${clash}\` is already part of a running refit`, { worker_id: clash });
    }
    // Every call of every phase is built (and size-checked) before anything is queued, so a bad
    // request is refused whole instead of failing halfway with engines paused.
    prepareCalls(this.deps.legs, planRefit(req, targets), targets, id);

    const report = journals.waitFor(id);
    const queued: QueuedRefit = {
      id,
      request: req,
      selector: selectorText ?? null,
      targets: targets.map((w) => w.id),
      skipped,
      origin,
      submitted_at: new Date().toISOString(),
    };
    journals.accept(queued);
    let duplicate: boolean;
    try {
      ({ duplicate } = await this.deps.queue.submit(id, queued));
    } catch (err) {
      journals.forget(id);
      throw new GatewayError('bus_unavailable', `the refit could not be queued, so nothing was paused: ${(err as Error).message}`);
    }
    if (!duplicate) {
      this.deps.events.publish(id, {
        type: 'accepted',
        weight_version: req.weight_version,
        source: req.source.kind,
        selector: selectorText ?? null,
        targets: queued.targets,
        skipped,
        replica: this.deps.replicaId,
      });
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

  /** Takes no new refit from callers (the queue worker drains the ones running here). */
  drain(): void {
    this.closing = true;
  }
}
