// Runs refits: resolves the targets, plans the calls, starts one coordinator actor per refit with
// its `runPhase` side effect wired to the control plane (legs through NATS to the engines'
// actors), keeps the reports, and publishes the refit's lifecycle on `rl.refit.<id>.events`.

import { randomUUID } from 'node:crypto';
import { createActor, fromCallback, toPromise } from 'xstate';
import { coordinatorMachine, type CoordinatorEvent, type LegResult, type Phase, type PhaseInput } from '../../actors/coordinator.ts';
import type { Bus } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { ControlCall, ControlOutcome } from '../engines/control-call.ts';
import type { Passthrough } from '../control/passthrough.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { selectorFromQuery } from '../fleet/selector.ts';
import { compareVersions } from '../fleet/versions.ts';
import type { Worker } from '../fleet/worker.ts';
import { GatewayError } from '../http/errors.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { planRefit, type CallSpec, type RefitPlan } from './plan.ts';
import { buildReport, type RefitReport } from './report.ts';
import { parseRefitRequest, type RefitRequest } from './request.ts';
import type { ResumesOwed } from './resumes-owed.ts';

const KEEP_REPORTS = 256;

export interface RefitDefaults {
  pauseMs: number;
  refitMs: number;
  verifyMs: number;
  resumeMs: number;
}

export class RefitService {
  private readonly reports = new Map<string, RefitReport>();
  private readonly busy = new Set<string>();
  private readonly running = new Set<Promise<RefitReport>>();
  private closing = false;

  constructor(
    private readonly deps: {
      view: FleetView;
      passthrough: Passthrough;
      bus: Bus;
      subjects: Subjects;
      metrics: Metrics;
      log: Logger;
      deadlines: RefitDefaults;
      /** Where the refit's pauses are recorded as resumes owed. */
      owed: ResumesOwed;
    },
  ) {}

  get(id: string): RefitReport {
    const r = this.reports.get(id);
    if (!r) throw new GatewayError('refit_not_found', `refit \`${id}\` not found`, { id });
    return r;
  }

  list(): RefitReport[] {
    return [...this.reports.values()].reverse();
  }

  /** Validates, runs the whole transaction, and resolves with its report (never rejects on engine failures). */
  async run(body: unknown, origin: 'http' | 'nats'): Promise<RefitReport> {
    const req = parseRefitRequest(body);
    const selectorText = req.selector?.trim() ? req.selector : undefined;
    // Unlike a raw fan-out, a refit without a selector means the whole fleet.
    const selector = selectorText !== undefined ? selectorFromQuery(selectorText) : undefined;
    const targets = this.deps.view.targets(selector);
    if (targets.length === 0) {
      const text = selector?.text ?? '';
      throw new GatewayError('no_workers_match', selector ? `no workers match selector \`${text}\`` : 'no workers are registered', { selector: text });
    }
    const clash = targets.find((w) => this.busy.has(w.id));
    if (clash) throw new GatewayError('refit_in_progress', `worker \`${clash.id}\` is already part of a running refit`, { worker_id: clash.id });
    if (this.closing) throw new GatewayError('bus_unavailable', 'the gateway is shutting down; send the refit to another replica');

    // An asleep engine holds no weights in memory: it is reported, not paused or refitted.
    const asleep = targets.filter((w) => this.deps.view.engine(w).control === 'asleep');
    const active = targets.filter((w) => !asleep.includes(w));
    // Engines an operator paused before the refit stay paused after it: the refit resumes only
    // what it paused. A pause that an earlier refit made and could not undo is no operator's: it
    // is a resume owed, and this refit resumes it.
    const keepPaused = active.filter((w) => this.deps.view.engine(w).control === 'paused' && !this.deps.owed.has(w.id)).map((w) => w.id);
    const id = randomUUID();
    const plan = planRefit(req, active);
    // Every call of every phase is built (and size-checked) before anything is paused, so a bad
    // request is refused whole instead of failing halfway with engines paused.
    const calls = this.prepareCalls(plan, active, id);

    for (const w of targets) this.busy.add(w.id);
    const owing = active.filter((w) => !keepPaused.includes(w.id)).map((w) => w.id);
    try {
      await this.deps.owed.owe(owing, id);
    } catch (err) {
      for (const w of targets) this.busy.delete(w.id);
      throw new GatewayError('bus_unavailable', `the refit's pauses could not be recorded, so nothing was paused: ${(err as Error).message}`);
    }
    const running = this.execute({ id, req, selector: selectorText ?? null, targets: active, asleep, keepPaused, plan, calls, origin }).then(async ({ report, resumed }) => {
      await Promise.all(owing.map((wid) => this.deps.owed.settle(wid, resumed.has(wid), id)));
      return report;
    });
    this.running.add(running);
    try {
      return await running;
    } finally {
      this.running.delete(running);
      for (const w of targets) this.busy.delete(w.id);
    }
  }

  /** Stop taking refits and wait for the running ones (each still resumes what it paused). */
  async drain(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.running]);
  }

  private prepareCalls(plan: RefitPlan, targets: Worker[], refitId: string): Map<string, ControlCall> {
    const shared = new Map<CallSpec, ControlCall>();
    const calls = new Map<string, ControlCall>();
    const put = (phase: Phase, step: number, w: Worker, spec: CallSpec) => {
      let call = shared.get(spec);
      if (!call) shared.set(spec, (call = this.callOf(spec, refitId)));
      calls.set(callKey(phase, step, w.id), call);
    };
    for (const w of targets) {
      put('pause', 0, w, plan.pause);
      plan.steps.forEach((_, i) => put('refit', i, w, plan.step(i, w)));
      if (plan.verify) put('verify', 0, w, plan.verify);
      put('resume', 0, w, plan.resume);
    }
    return calls;
  }

  private async execute(args: {
    id: string;
    req: RefitRequest;
    selector: string | null;
    targets: Worker[];
    asleep: Worker[];
    keepPaused: string[];
    plan: RefitPlan;
    calls: Map<string, ControlCall>;
    origin: string;
  }): Promise<{ report: RefitReport; resumed: Set<string> }> {
    const { id, req, selector, targets, plan, origin } = args;
    const startedAt = new Date();
    const byId = new Map(targets.map((w) => [w.id, w]));
    const phaseStarted = new Map<Phase, number>();
    const phaseMs: Partial<Record<Phase, number>> = {};
    const d = { ...this.deps.deadlines, ...renameDeadlines(req.deadlines_ms) };
    const quorum = quorumOf(req, targets.length);
    this.deps.log.info({ refit_id: id, origin, weight_version: req.weight_version, source: req.source.kind, targets: targets.length, quorum }, 'refit started');

    const runPhase = fromCallback<CoordinatorEvent, PhaseInput>(({ input, sendBack }) => {
      const abort = new AbortController();
      phaseStarted.set(input.phase, phaseStarted.get(input.phase) ?? performance.now());
      this.publish(id, { type: 'phase', phase: input.phase, step: input.phase === 'refit' ? plan.steps[input.stepIndex]?.name : undefined, targets: input.targets });
      // Engines given the same spec share one call object, so it crosses the bus once per replica.
      // Each call's deadline starts now, when its phase sends it: stamped when the refit was
      // planned, a slow pause and load would eat the resume's budget.
      const sentAt = Date.now();
      const stamped = new Map<ControlCall, ControlCall>();
      const stamp = (call: ControlCall): ControlCall => {
        let fresh = stamped.get(call);
        if (!fresh) stamped.set(call, (fresh = { ...call, deadline: sentAt + call.timeoutSecs * 1000 }));
        return fresh;
      };
      const legs = input.targets.map((wid) => ({ worker: byId.get(wid)!, call: stamp(args.calls.get(callKey(input.phase, input.stepIndex, wid))!) }));
      void this.deps.passthrough
        .runLegs(legs, abort.signal, (wid, outcome) => {
          sendBack({ type: 'leg.done', phase: input.phase, workerId: wid, result: legResult(input.phase, outcome, req.weight_version) });
        })
        .catch((err: unknown) => {
          // Never leave the coordinator waiting: an unexpected failure fails the phase's legs.
          this.deps.log.error({ err, refit_id: id, phase: input.phase }, 'refit phase failed unexpectedly');
          for (const wid of input.targets) {
            sendBack({ type: 'leg.done', phase: input.phase, workerId: wid, result: { ok: false, error: 'internal_error', message: 'the gateway failed to run this phase', latencyMs: 0 } });
          }
        })
        .then(() => {
          if (!abort.signal.aborted) sendBack({ type: 'phase.done' });
        });
      return () => {
        abort.abort();
        phaseMs[input.phase] = Math.round(performance.now() - (phaseStarted.get(input.phase) ?? performance.now()));
      };
    });

    const actor = createActor(coordinatorMachine.provide({ actors: { runPhase } }), {
      systemId: `refit:${id}`,
      input: {
        refitId: id,
        targets: targets.map((w) => w.id),
        steps: plan.steps,
        verify: plan.verify !== null,
        quorum,
        keepPaused: args.keepPaused,
        deadlines: { pauseMs: d.pauseMs, refitMs: d.refitMs, verifyMs: d.verifyMs, resumeMs: d.resumeMs },
      },
    });
    actor.start();
    const result = await toPromise(actor);

    const report = buildReport({
      id,
      request: req,
      selector,
      targets,
      asleep: args.asleep,
      result,
      phaseMs,
      startedAt,
      finishedAt: new Date(),
      view: this.deps.view,
      group: plan.group,
    });
    this.remember(report);
    this.deps.metrics.refit(report.status, phaseMs);
    this.publish(id, { type: 'report', report });
    this.deps.log.info({ refit_id: id, status: report.status, succeeded: report.succeeded, total: report.total, duration_ms: report.duration_ms }, 'refit finished');
    return { report, resumed: new Set(result.resumed) };
  }

  private callOf(spec: CallSpec, refitId: string) {
    return this.deps.passthrough.callFor(spec.path, {
      method: spec.method,
      rawQuery: '',
      body: spec.body ? Buffer.from(JSON.stringify(spec.body)) : null,
      contentType: spec.body ? 'application/json' : undefined,
      trace: { 'x-request-id': `refit-${refitId}` },
    });
  }

  private remember(report: RefitReport): void {
    this.reports.set(report.id, report);
    while (this.reports.size > KEEP_REPORTS) this.reports.delete(this.reports.keys().next().value!);
  }

  private publish(id: string, event: Record<string, unknown>): void {
    try {
      this.deps.bus.publish(this.deps.subjects.refitEvents(id), { refit_id: id, time: new Date().toISOString(), ...event });
    } catch (err) {
      this.deps.log.warn({ err, refit_id: id }, 'could not publish refit event');
    }
  }
}

function callKey(phase: Phase, step: number, workerId: string): string {
  return `${phase}|${step}|${workerId}`;
}

/**
 * A leg succeeds on a 2xx whose body does not say `success: false` (stricter than the raw
 * fan-out, which leaves bodies to the trainer). Verification also needs the target version.
 */
export function legResult(phase: Phase, o: ControlOutcome, target: string): LegResult {
  if (o.kind !== 'answer') {
    const error = o.kind === 'timeout' ? 'upstream_timeout' : o.kind === 'unreachable' ? (o.code ?? 'upstream_unreachable') : 'no_control_endpoint';
    return { ok: false, error, message: o.message, latencyMs: o.latencyMs };
  }
  const body = o.body as { success?: unknown; message?: unknown; weight_version?: unknown } | string | null;
  if (o.status < 200 || o.status >= 300) {
    const detail = typeof body === 'object' && body && typeof body.message === 'string' ? `: ${body.message}` : '';
    return { ok: false, error: 'upstream_error', status: o.status, message: `HTTP ${o.status}${detail}`, latencyMs: o.latencyMs };
  }
  if (typeof body === 'object' && body && body.success === false) {
    return { ok: false, error: 'engine_refused', status: o.status, message: typeof body.message === 'string' ? body.message : 'engine answered success: false', latencyMs: o.latencyMs };
  }
  if (phase === 'verify') {
    const seen = typeof body === 'object' && body ? body.weight_version : undefined;
    const v = typeof seen === 'number' ? String(seen) : seen;
    if (typeof v !== 'string' || compareVersions(v.trim(), target) !== 0) {
      return { ok: false, error: 'verify_failed', status: o.status, message: `engine reports weight_version ${JSON.stringify(seen ?? null)}, expected ${JSON.stringify(target)}`, latencyMs: o.latencyMs };
    }
  }
  return { ok: true, status: o.status, latencyMs: o.latencyMs };
}

/**
 * Engines that must pass the pause. Disk refits default to 1: refit whoever could be paused and
 * report the rest. Distributed refits default to every target: the trainer fixed the group's
 * world size before the pause, so a missing engine would leave the others waiting for its ranks.
 */
function quorumOf(req: RefitRequest, n: number): number {
  const q = req.quorum;
  if (!q) return req.source.kind === 'distributed' ? n : 1;
  const byCount = q.min_engines ?? 0;
  const byFraction = q.min_fraction !== undefined ? Math.ceil(q.min_fraction * n) : 0;
  return Math.min(n, Math.max(1, byCount, byFraction));
}

function renameDeadlines(d: RefitRequest['deadlines_ms']): Partial<RefitDefaults> {
  const out: Partial<RefitDefaults> = {};
  if (d?.pause) out.pauseMs = d.pause;
  if (d?.refit) out.refitMs = d.refit;
  if (d?.verify) out.verifyMs = d.verify;
  if (d?.resume) out.resumeMs = d.resume;
  return out;
}
