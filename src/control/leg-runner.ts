// Runs the legs of one control call, or of one refit phase, on the engines they name: builds
// each call (size-checked against what the bus carries, its deadline from the control timeout),
// fails at once the engines that have no control endpoint, and hands the rest to the Dispatcher
// with the fan-out concurrency of the call. The pass-through routes and the refit runner both
// run their legs here.

import { GatewayError } from '../api/errors.ts';
import { encodeBody } from '../engines/control-call.ts';
import { queryWithoutSelector } from '../engines/engine-path.ts';
import { noControlEndpoint, workerControlUrl } from '../fleet/control-url.ts';
import type { Worker } from '../fleet/worker.ts';
import { fanoutConcurrency } from './concurrency.ts';
import type { Dispatcher, Leg } from './dispatch.ts';
import type { IncomingControl } from './incoming-control.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';

export class LegRunner {
  constructor(
    private readonly deps: {
      dispatcher: Dispatcher;
      timeoutSecs: number;
      /** The operator's fan-out concurrency; undefined: by call (concurrency.ts). */
      concurrency: number | undefined;
      /** Largest request body that still fits one bus message (derived from max_payload). */
      maxCallBodyBytes: number;
    },
  ) {}

  /**
   * Runs one call per worker (each may differ, e.g. its own rank_offset) and returns every
   * outcome by worker id. Workers without a control endpoint fail at once and are not called.
   */
  runLegs(
    legs: Array<{ worker: Worker; call: ControlCall }>,
    signal?: AbortSignal,
    onLeg?: (workerId: string, outcome: ControlOutcome) => void,
    concurrency?: number,
  ): Promise<Map<string, ControlOutcome>> {
    return this.run(
      legs.map((l) => l.worker),
      (i) => legs[i]!.call,
      signal,
      onLeg,
      concurrency,
    );
  }

  /** The same call to every worker (a fan-out): runLegs without a leg object per worker. */
  runCall(workers: Worker[], call: ControlCall, signal?: AbortSignal, concurrency?: number): Promise<Map<string, ControlOutcome>> {
    return this.run(workers, () => call, signal, undefined, concurrency);
  }

  private async run(
    workers: Worker[],
    callOf: (i: number) => ControlCall,
    signal: AbortSignal | undefined,
    onLeg: ((workerId: string, outcome: ControlOutcome) => void) | undefined,
    concurrency: number | undefined,
  ): Promise<Map<string, ControlOutcome>> {
    const outcomes = new Map<string, ControlOutcome>();
    const callable: Leg[] = [];
    for (let i = 0; i < workers.length; i++) {
      const worker = workers[i]!;
      if (workerControlUrl(worker) === null) {
        const o: ControlOutcome = { kind: 'no_control_endpoint', latencyMs: 0, message: noControlEndpoint(worker), connectionMode: worker.connectionMode };
        outcomes.set(worker.id, o);
        onLeg?.(worker.id, o);
      } else {
        callable.push({ workerId: worker.id, call: callOf(i) });
      }
    }
    if (callable.length > 0) {
      const limit = concurrency ?? this.concurrencyFor(callable[0]!.call.path, callable.length);
      await this.deps.dispatcher.many(callable, {
        concurrency: limit,
        signal,
        onLeg: onLeg
          ? (r) => {
              outcomes.set(r.workerId, r.outcome);
              onLeg(r.workerId, r.outcome);
            }
          : (r) => outcomes.set(r.workerId, r.outcome),
      });
    }
    return outcomes;
  }

  /** Legs of one call that run at once per owning replica (concurrency.ts). */
  concurrencyFor(path: string, targets: number, requested?: number): number {
    return fanoutConcurrency(path, targets, this.deps.concurrency, requested);
  }

  /** The largest call body a bus of `maxPayload` bytes carries: base64 grows it by 4/3, and the call's other fields need room. */
  static bodyBytesFor(maxPayload: number): number {
    return Math.floor(((maxPayload || 1024 * 1024) - 16 * 1024) * 0.75);
  }

  callFor(path: string, req: Pick<IncomingControl, 'method' | 'rawQuery' | 'body' | 'contentType' | 'trace'>): ControlCall {
    // Control calls cross NATS to the replica owning the engine: a body the bus cannot carry is
    // refused up front instead of failing every leg.
    if (req.body && req.body.length > this.deps.maxCallBodyBytes) {
      throw new GatewayError('payload_too_large', `control request bodies are limited to ${this.deps.maxCallBodyBytes} bytes by the bus (NATS max_payload)`, {
        limit: this.deps.maxCallBodyBytes,
      });
    }
    const call: ControlCall = {
      method: req.method,
      path,
      query: queryWithoutSelector(req.rawQuery),
      deadline: Date.now() + this.deps.timeoutSecs * 1000,
      timeoutSecs: this.deps.timeoutSecs,
    };
    const body = encodeBody(req.body);
    if (body) call.body = body;
    if (req.contentType) call.contentType = req.contentType;
    if (Object.keys(req.trace).length > 0) call.trace = req.trace;
    return call;
  }
}
