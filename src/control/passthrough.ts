// The pass-through control plane: one engine-native route to one worker, or the
// same call fanned out to every worker a selector matches. Checks run in SMG's order; legs go
// through the Dispatcher (NATS, owning replica, engine actor); nothing here retries.

import { GatewayError } from '../api/errors.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Registry } from '../fleet/registry.ts';
import { selectorFromQuery, type Selector } from '../fleet/selector.ts';
import { workerControlUrl } from '../fleet/control-url.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Dispatcher } from './dispatch.ts';
import type { LegRunner } from './leg-runner.ts';
import { validateEnginePath } from '../engines/engine-path.ts';
import { noControlEndpoint, proxyAnswer, type RlCallOutcome } from './outcome.ts';
import { fanoutJson } from './fanout-answer.ts';
import type { IncomingControl } from './incoming-control.ts';

/** A fan-out's answer as the HTTP door sends it: the JSON text, with its status. */
export interface FanoutReply {
  status: 200 | 207;
  json: string;
}

/** Selectors parsed lately, by their text: a trainer fans out with the same few again and again. */
const SELECTOR_CACHE = 64;

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

  async fanout(req: IncomingControl & { selector: string | undefined; concurrency?: number }): Promise<FanoutReply> {
    const started = performance.now();
    const selector = this.selector(req.selector);
    const path = validateEnginePath(req.path);
    const targets = this.deps.view.targets(selector);
    if (targets.length === 0) {
      this.deps.metrics.fanout('no_match');
      throw new GatewayError('no_workers_match', `no workers match selector \`${selector.text}\``, { selector: selector.text });
    }
    const call = this.deps.legs.callFor(path, req);
    const concurrency = this.deps.legs.concurrencyFor(path, targets.length, req.concurrency);
    const outcomes = await this.deps.legs.runCall(targets, call, req.signal, concurrency);
    const answer = fanoutJson(targets, outcomes);
    const seconds = (performance.now() - started) / 1000;
    this.deps.metrics.fanout(answer.failed === 0 ? 'ok' : 'partial', seconds);
    // One line per fan-out: at info when a leg failed, at debug otherwise (a trainer may fan out
    // several times a second; the metrics count every one).
    if (answer.failed > 0 || this.deps.log.isLevelEnabled('debug')) {
      const line = {
        path,
        selector: selector.text,
        total: answer.total,
        succeeded: answer.succeeded,
        failed: answer.failed,
        latency_ms: Math.round(seconds * 1000),
      };
      if (answer.failed > 0) this.deps.log.info(line, 'rl.fanout');
      else this.deps.log.debug(line, 'rl.fanout');
    }
    return { status: answer.status, json: answer.json };
  }

  /** The request's selector, parsed once per distinct text while it is in use (errors are never kept). */
  private selector(raw: string | undefined): Selector {
    const cached = raw === undefined ? undefined : this.selectors.get(raw);
    if (cached) return cached;
    const selector = selectorFromQuery(raw);
    if (this.selectors.size >= SELECTOR_CACHE) this.selectors.clear();
    this.selectors.set(raw!, selector);
    return selector;
  }

  private readonly selectors = new Map<string, Selector>();

  private controlUrlOrThrow(w: Worker): string {
    const url = workerControlUrl(w);
    if (url === null) throw new GatewayError('no_control_endpoint', noControlEndpoint(w), { worker_id: w.id, url: w.url, connection_mode: w.connectionMode });
    return url;
  }
}
