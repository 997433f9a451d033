// The pass-through control plane: one engine-native route to one worker, or the
// same call fanned out to every worker a selector matches. Checks run in SMG's order; legs go
// through the Dispatcher (NATS, owning replica, engine actor); nothing here retries.

import { encodeBody } from '../engines/control-call.ts';
import { GatewayError } from '../api/errors.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Registry } from '../fleet/registry.ts';
import { selectorFromQuery } from '../fleet/selector.ts';
import { controlUrlFor } from '../fleet/control-url.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { fanoutConcurrency } from './concurrency.ts';
import type { Dispatcher } from './dispatch.ts';
import type { LegRunner } from './leg-runner.ts';
import { validateEnginePath, queryWithoutSelector } from '../engines/engine-path.ts';
import { callOutcome, failedCall, isSuccess, noControlEndpoint, proxyAnswer, type RlCallOutcome, type RlFailedCall } from './outcome.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { IncomingControl } from './incoming-control.ts';

export interface RlFanoutResponse {
  results: Record<string, RlCallOutcome>;
  failed: RlFailedCall[];
  total: number;
  succeeded: number;
}

export class Passthrough {
  constructor(
    private readonly deps: {
      registry: Registry;
      view: FleetView;
      dispatcher: Dispatcher;
      legs: LegRunner;
      metrics: Metrics;
      log: Logger;
    },
  ) {}

  async proxy(workerId: string, req: IncomingControl): Promise<{ status: number; body: RlCallOutcome }> {
    const path = validateEnginePath(req.path);
    const worker = this.deps.registry.require(workerId);
    const controlUrl = this.controlUrlOrThrow(worker);
    const call = this.deps.legs.callFor(path, req);
    const outcome = await this.deps.dispatcher.one(worker.id, call, req.signal);
    this.deps.log.info(
      {
        worker_id: worker.id,
        url: worker.url,
        control_url: controlUrl,
        method: req.method,
        path,
        status: outcome.kind === 'answer' ? outcome.status : null,
        latency_ms: outcome.latencyMs,
      },
      'rl.proxy',
    );
    return proxyAnswer(worker, outcome);
  }

  async fanout(req: IncomingControl & { selector: string | undefined; concurrency?: number }): Promise<{ status: number; body: RlFanoutResponse }> {
    const started = performance.now();
    const selector = selectorFromQuery(req.selector);
    const path = validateEnginePath(req.path);
    const targets = this.deps.view.targets(selector);
    if (targets.length === 0) {
      this.deps.metrics.fanout('no_match');
      throw new GatewayError('no_workers_match', `no workers match selector \`${selector.text}\``, { selector: selector.text });
    }
    const call = this.deps.legs.callFor(path, req);
    const concurrency = this.deps.legs.concurrencyFor(path, targets.length, req.concurrency);
    const outcomes = await this.deps.legs.runLegs(
      targets.map((w) => ({ worker: w, call })),
      req.signal,
      undefined,
      concurrency,
    );
    const body = fanoutResponse(targets, outcomes);
    const seconds = (performance.now() - started) / 1000;
    this.deps.metrics.fanout(body.failed.length === 0 ? 'ok' : 'partial', seconds);
    // One line per fan-out: at info when a leg failed, at debug otherwise (a trainer may fan out
    // several times a second; the metrics count every one).
    const line = {
      path,
      selector: selector.text,
      total: body.total,
      succeeded: body.succeeded,
      failed: body.failed.length,
      latency_ms: Math.round(seconds * 1000),
    };
    if (body.failed.length > 0) this.deps.log.info(line, 'rl.fanout');
    else this.deps.log.debug(line, 'rl.fanout');
    return { status: body.failed.length === 0 ? 200 : 207, body };
  }

  private controlUrlOrThrow(w: Worker): string {
    const url = controlUrlFor(w.connectionMode, w.baseUrl, mergedLabels(w));
    if (url === null) throw new GatewayError('no_control_endpoint', noControlEndpoint(w), { worker_id: w.id, url: w.url, connection_mode: w.connectionMode });
    return url;
  }
}

export function fanoutResponse(targets: Worker[], outcomes: Map<string, ControlOutcome>): RlFanoutResponse {
  const results: Record<string, RlCallOutcome> = {};
  const failed: RlFailedCall[] = [];
  let succeeded = 0;
  for (const w of [...targets].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    const o = outcomes.get(w.id) ?? { kind: 'unreachable' as const, latencyMs: 0, message: `upstream \`${w.url}\` unreachable: no outcome` };
    if (o.kind === 'answer') results[w.id] = callOutcome(w, o);
    if (isSuccess(o)) succeeded++;
    const f = failedCall(w, o);
    if (f) failed.push(f);
  }
  return { results, failed, total: targets.length, succeeded };
}
