// Runs the control calls sent to the engines this replica owns, one at a time per engine, in the
// order they came (no pause/update reordering). A call that changes no lifecycle (a resume, a
// version read, a flush) runs straight from the engine's lane: no actor event, no snapshot, no
// routing rebuild; what its answer teaches (control, version) reaches the actor only when it
// changes something. A pause or refit call goes through the engine actor, which decides the
// lifecycle around it (`pausing`, `refitting`): `command.run` executes it, `cmd.result` answers.
// It never retries a call, and never creates or removes actors.

import type { CommandOp, CommandResult, EngineActor, EngineCommand } from '../../actors/engine.ts';
import { DEADLINE, decodeBody, unwatchAbort, watchAbort } from '../engines/control-call.ts';
import { ControlFlight, type ControlClient, type ControlTarget } from '../engines/control-client.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import { controlOp, lifecycleOp } from '../engines/engine-path.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { noControlEndpoint, workerControlUrl } from './control-url.ts';
import { observeControlCall } from './observe.ts';
import type { Registry } from './registry.ts';
import type { LeaseFence } from './lease-fence.ts';
import type { Worker } from './worker.ts';
import type { Dispatcher } from 'undici';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';

/** The reason a call in flight was aborted when this replica's lease lapsed. */
class LeaseLapsed extends Error {
  override readonly name = 'LeaseLapsed';
}

/**
 * One call waiting for, or holding, its engine's lane. It watches the caller's signal itself
 * (`watchAbort`: no closure, and an O(1) entry on a share's signal).
 */
class Job {
  /** Set while the actor runs it (pause and refit calls). */
  token: string | undefined = undefined;
  private resolve!: (o: ControlOutcome) => void;
  private reject!: (err: Error) => void;
  readonly promise: Promise<ControlOutcome>;

  constructor(
    private readonly runner: CommandRunner,
    readonly id: string,
    readonly lane: CommandLane,
    readonly op: CommandOp,
    readonly call: ControlCall,
    readonly signal: AbortSignal | undefined,
  ) {
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** The caller's signal aborted: a share's deadline expires the call, anything else cancels it. */
  handleEvent(): void {
    this.runner.aborted(this);
  }

  settle(r: CommandResult | { error: string }): void {
    if (this.signal) unwatchAbort(this.signal, this);
    if ('error' in r) this.reject(new Error(r.error));
    else this.resolve(r.outcome as ControlOutcome);
  }
}

/** One owned engine's commands: its actor, and the calls queued for it, oldest first. */
export interface CommandLane {
  actor: EngineActor;
  queue: Job[];
  current: Job | undefined;
  /** Calls the actor runs (pause, refit), by token: aborted when the engine leaves this replica. */
  running: Map<string, AbortController>;
  closed: boolean;
}

export function newLane(actor: EngineActor): CommandLane {
  return { actor, queue: [], current: undefined, running: new Map(), closed: false };
}

export class CommandRunner {
  private tokens = 0;
  /**
   * Who paused each paused engine, by worker id: `refit:<id>` or `operator`. A refit keeps only an
   * operator's pause; a pause a refit made (even one whose resume was lost) is resumed.
   */
  readonly pausedBy = new Map<string, string>();

  constructor(
    private readonly deps: {
      registry: Registry;
      control: ControlClient;
      metrics: Metrics;
      log: Logger;
      /** The hosted actor of a worker, to tell sibling DP ranks what a call implied. */
      actorOf: (id: string) => EngineActor | undefined;
      /** The engine's own client, whose connection a control call may share. */
      clientOf: (id: string) => EngineClient | undefined;
      /** No call goes out while it is closed; calls in flight when it closes are abandoned. */
      fence: LeaseFence;
    },
  ) {
    deps.fence.onLapse((reason) => {
      for (const flight of [...this.inFlight]) flight.abort(new LeaseLapsed(reason));
    });
  }

  /** Every call in flight: the lease's lapse aborts them all (abandoned, and said so). */
  private readonly inFlight = new Set<ControlFlight>();

  /**
   * Queues one control call on the engine's lane and returns its outcome. Aborting `signal` drops
   * the call if it is still queued, or aborts it if it is running.
   */
  submit(id: string, lane: CommandLane, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    if (signal?.aborted) return Promise.reject(new Error('cancelled'));
    if (lane.closed) return Promise.reject(new Error(`worker \`${id}\` was removed`));
    // A HEAD asks for headers only: it pauses or refits nothing, whatever the path.
    const job = new Job(this, id, lane, call.method === 'HEAD' ? 'other' : lifecycleOp(call.path), call, signal);
    if (signal) watchAbort(signal, job);
    lane.queue.push(job);
    this.next(id, lane);
    return job.promise;
  }

  /** A job's caller aborted (Job.handleEvent). */
  aborted(job: Job): void {
    if (job.signal?.reason === DEADLINE) this.expire(job.id, job.lane, job);
    else this.cancel(job.id, job.lane, job);
  }

  /** Takes the calls the actor emits: the machine says when a pause or refit runs, the I/O happens here. */
  listen(id: string, lane: CommandLane): void {
    const { actor, running } = lane;
    actor.on('command.run', ({ command }) => {
      const ctrl = new AbortController();
      running.set(command.token, ctrl);
      this.execute(id, command.payload as ControlCall, ctrl.signal).then(
        (result) => {
          running.delete(command.token);
          actor.send({ type: 'cmd.result', token: command.token, result });
        },
        (err: unknown) => {
          running.delete(command.token);
          actor.send({ type: 'cmd.result', token: command.token, result: { error: String((err as Error)?.message ?? err) } });
        },
      );
    });
    actor.on('command.abort', ({ token }) => running.get(token)?.abort());
    actor.on('command.done', ({ token, result }) => {
      const job = lane.current;
      if (!job || job.token !== token) return;
      lane.current = undefined;
      job.settle(result);
      this.next(id, lane);
    });
  }

  /** The engine left this replica: its actor's calls abort, and every caller gets an answer now. */
  abandon(id: string, lane: CommandLane): void {
    lane.closed = true;
    for (const ctrl of lane.running.values()) ctrl.abort();
    const jobs = [...(lane.current ? [lane.current] : []), ...lane.queue];
    lane.current = undefined;
    lane.queue = [];
    for (const job of jobs) job.settle({ error: `worker \`${id}\` was removed` });
  }

  /** Starts the oldest queued call when the lane is free. */
  private next(id: string, lane: CommandLane): void {
    if (lane.current || lane.closed) return;
    const job = lane.queue.shift();
    if (!job) return;
    lane.current = job;
    if (job.op !== 'other') {
      job.token = `${id}#${++this.tokens}`;
      const command: EngineCommand = { token: job.token, op: job.op, payload: job.call };
      lane.actor.send({ type: 'cmd.enqueue', command });
      return;
    }
    // The caller's signal aborts the HTTP call itself; nothing else per call is needed.
    this.execute(id, job.call, job.signal).then(
      (result) => this.finished(id, lane, job, result),
      (err: unknown) => this.finished(id, lane, job, { error: String((err as Error)?.message ?? err) }),
    );
  }

  private finished(id: string, lane: CommandLane, job: Job, result: CommandResult | { error: string }): void {
    if (lane.current !== job) return; // cancelled or abandoned meanwhile: its answer is nobody's
    lane.current = undefined;
    if (!('error' in result)) this.teach(lane.actor, result);
    job.settle(result);
    this.next(id, lane);
  }

  /** What a call's answer showed, as the events an API write would send: only when it changes something. */
  private teach(actor: EngineActor, result: CommandResult): void {
    if (result.version === undefined && result.control === undefined) return;
    const c = actor.getSnapshot().context;
    if (result.version !== undefined && (c.version !== result.version || c.versionSource !== 'passthrough')) {
      actor.send({ type: 'version.set', version: result.version, source: 'passthrough' });
    }
    if (result.control !== undefined && (c.control !== result.control || c.controlSource !== 'engine')) {
      actor.send({ type: 'control.set', control: result.control });
    }
  }

  /**
   * The share's deadline passed: a call still queued times out without being sent; a running
   * one times out by itself (its HTTP call saw the same signal, or has a timer of its own).
   */
  private expire(id: string, lane: CommandLane, job: Job): void {
    const at = lane.queue.indexOf(job);
    if (at < 0) return;
    lane.queue.splice(at, 1);
    const url = this.deps.registry.get(id)?.url ?? id;
    job.settle({ outcome: { kind: 'timeout', latencyMs: 0, message: `upstream \`${url}\` timed out after ${job.call.timeoutSecs}s` } });
  }

  private cancel(id: string, lane: CommandLane, job: Job): void {
    const at = lane.queue.indexOf(job);
    if (at >= 0) {
      lane.queue.splice(at, 1);
      return job.settle({ error: 'cancelled' });
    }
    if (lane.current !== job) return;
    if (job.token !== undefined) {
      // The actor aborts the call (command.abort) and answers cancelled (command.done).
      lane.actor.send({ type: 'cmd.cancel', token: job.token });
      return;
    }
    // Its HTTP call saw the same signal and is aborting: the lane moves on now.
    lane.current = undefined;
    job.settle({ error: 'cancelled' });
    this.next(id, lane);
  }

  private async execute(id: string, call: ControlCall, signal: AbortSignal | undefined): Promise<CommandResult> {
    const worker = this.deps.registry.get(id);
    if (!worker) return { outcome: { kind: 'unreachable', latencyMs: 0, message: `worker \`${id}\` was removed` } };
    const endpoint = this.endpointOf(worker);
    if (endpoint.refusal) return { outcome: endpoint.refusal };
    // Checked last, just before the call goes out: a replica whose lease may have passed to
    // another commands nothing (its ownership is only as sure as its last confirmed heartbeat).
    const fence = this.deps.fence;
    const closed = fence.reason();
    if (closed !== null) {
      return {
        outcome: { kind: 'unreachable', code: 'bus_unavailable', fenced: true, latencyMs: 0, message: `upstream \`${worker.url}\` not called: ${closed}` },
      };
    }
    // An engine without pool settings of its own is called on the connection its probes use.
    const dispatcher = endpoint.ownPool ? undefined : this.deps.clientOf(id)?.poolFor?.(endpoint.target.controlUrl);
    // The caller's signal goes to the call as it is (its reason kept: a share's deadline stays a
    // timeout); the lapse aborts the call through its flight. Nothing per call listens on a lease
    // that may never lapse.
    const flight = new ControlFlight();
    this.inFlight.add(flight);
    let outcome: ControlOutcome;
    try {
      outcome = await this.deps.control.call(endpoint.via(dispatcher), call, signal, { headers: this.deps.fence.headerPairs(id), flight });
    } finally {
      this.inFlight.delete(flight);
    }
    const lapse = flight.reason;
    if (lapse instanceof LeaseLapsed && outcome.kind !== 'answer') {
      // Abandoned, and said so: it was sent under a live lease and may still run on the engine;
      // whoever owns the engine now reads what it holds.
      outcome = {
        kind: 'unreachable',
        code: 'owner_lost',
        latencyMs: outcome.latencyMs,
        message: `upstream \`${worker.url}\` call abandoned after it was sent (it may have run on the engine): ${lapse.message}`,
      };
    }
    this.deps.metrics.controlCall(controlOp(call.path), outcome);
    if (outcome.kind !== 'answer' || outcome.status < 200 || outcome.status >= 300) return { outcome };
    if (call.method === 'HEAD') return { outcome };
    const seen = observeControlCall(call.path, decodeBody(call.body));
    // Rejections are logged with their reason, never with the value.
    if (seen.rejected) this.deps.log.info({ worker_id: id, path: call.path, reason: seen.rejected }, 'rl.observe rejected');
    if (seen.version === undefined && seen.control === undefined) return { outcome };
    // Debug: every pause, load and resume of a refit observes one per engine; the state event tells it.
    if (seen.version !== undefined) this.deps.log.debug({ worker: worker.baseUrl, version: seen.version, source: 'passthrough' }, 'rl.observe version');
    if (seen.control !== undefined) this.deps.log.debug({ worker: worker.baseUrl, control: seen.control, source: 'passthrough' }, 'rl.observe control');
    if (seen.control !== undefined) {
      const by = seen.control === 'paused' ? (call.refitId ? `refit:${call.refitId}` : 'operator') : undefined;
      for (const sib of this.deps.registry.siblings(worker.baseUrl)) {
        // A refit pausing an engine an operator paused keeps it paused after: it stays the operator's.
        if (by && !(by !== 'operator' && this.pausedBy.get(sib.id) === 'operator')) this.pausedBy.set(sib.id, by);
        else if (!by) this.pausedBy.delete(sib.id);
      }
    }
    // DP ranks share one engine: their actors learn the same facts.
    for (const sib of this.deps.registry.siblings(worker.baseUrl)) {
      if (sib.id === id) continue;
      if (seen.version !== undefined) this.setVersionOne(sib.id, seen.version);
      if (seen.control !== undefined) this.deps.actorOf(sib.id)?.send({ type: 'control.set', control: seen.control });
    }
    return { outcome, control: seen.control, version: seen.version };
  }

  /** Where a worker's calls go, worked out once per registry entry (a changed worker is a new object). */
  private endpointOf(worker: Worker): Endpoint {
    let e = this.endpoints.get(worker);
    if (!e) this.endpoints.set(worker, (e = endpointFor(worker, this.deps.control.clientError(worker.httpPool))));
    return e;
  }

  private readonly endpoints = new WeakMap<Worker, Endpoint>();

  private setVersionOne(id: string, version: string): void {
    this.deps.actorOf(id)?.send({ type: 'version.set', version, source: 'passthrough' });
  }
}

/** A worker's control endpoint as its calls need it, or why none can be called. */
interface Endpoint {
  refusal?: ControlOutcome;
  /** The worker has pool settings of its own (its own client, never the engine's connection). */
  ownPool: boolean;
  target: ControlTarget;
  /** The target on `dispatcher` (the engine's own connection), or on the control client's pool. */
  via(dispatcher: Dispatcher | undefined): ControlTarget;
}

function endpointFor(worker: Worker, clientError: string | null): Endpoint {
  const controlUrl = workerControlUrl(worker);
  const target: ControlTarget = { workerUrl: worker.url, controlUrl: controlUrl ?? '', apiKey: worker.apiKey, pool: worker.httpPool };
  const ownPool = worker.httpPool != null && Object.keys(worker.httpPool).length > 0;
  let refusal: ControlOutcome | undefined;
  if (!controlUrl) refusal = { kind: 'no_control_endpoint', latencyMs: 0, message: noControlEndpoint(worker), connectionMode: worker.connectionMode };
  else if (clientError) {
    const message = `worker \`${worker.id}\` has no control endpoint: no HTTP client for the control endpoint: ${clientError}`;
    refusal = { kind: 'no_control_endpoint', latencyMs: 0, message, connectionMode: worker.connectionMode };
  }
  // The engine's connection is one object for the engine client's life: its target is kept.
  let onEngine: { dispatcher: Dispatcher; target: ControlTarget } | undefined;
  return {
    refusal,
    ownPool,
    target,
    via(dispatcher) {
      if (!dispatcher) return target;
      if (onEngine?.dispatcher !== dispatcher) onEngine = { dispatcher, target: { ...target, dispatcher } };
      return onEngine.target;
    },
  };
}
