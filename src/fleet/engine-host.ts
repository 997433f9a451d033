// Hosts the engine actors this gateway replica owns: creates one per registry worker, provides
// the machine's side effects (discovery, probes, control calls), answers the engine's command
// subject on NATS, and publishes every transition on `rl.engine.<id>.state`. The machine itself
// never learns about NATS or HTTP.

import { randomUUID } from 'node:crypto';
import { createActor, fromCallback, fromPromise } from 'xstate';
import {
  breakerOf,
  engineMachine,
  lifecycleOf,
  type CommandResult,
  type EngineActor,
  type EngineCommand,
  type EngineSnapshot,
} from '../../actors/engine.ts';
import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import { decodeBody, type ControlCall, type ControlOutcome } from '../engines/control-call.ts';
import type { ControlClient } from '../engines/control-client.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import { HttpEngineClient } from '../engines/http.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import { ZmqEngineClient } from '../engines/zmq.ts';
import { controlOp, validateEnginePath } from '../control/engine-path.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { controlUrlFor } from './control-url.ts';
import { noControlEndpoint } from '../control/outcome.ts';
import { labelsFromFacts } from './discovery.ts';
import { observeControlCall } from './observe.ts';
import type { Registry } from './registry.ts';
import type { Cancellations } from './cancellations.ts';
import { checkVersion, compareVersions } from './versions.ts';
import { probeLoop } from './probe-loop.ts';
import { mergedLabels, type Worker } from './worker.ts';

export interface EngineTimings {
  probeIntervalMs: number;
  probeFailureThreshold: number;
  retryIntervalMs: number;
  breakerThreshold: number;
  breakerCooldownMs: number;
}

/** What `rl.engine.<id>.state` carries. Never a secret: no api key, no control-app key. */
export interface EngineStateEvent {
  id: string;
  url: string;
  state: string;
  control: string;
  weight_version: string | null;
  version_source: string | null;
  breaker: string;
  in_flight: number;
  queued: number;
  error: string | null;
  time: string;
}

const REFIT_PATHS = new Set([
  'update_weights_from_disk',
  'update_weights_from_tensor',
  'update_weights_from_distributed',
  'update_weights_from_ipc',
  'init_weights_update_group',
  'destroy_weights_update_group',
]);

/** Commands that stop generation: the engine leaves routing when they are sent (spec §12.6 paths). */
const PAUSE_PATHS = new Set(['pause_generation', 'pause', 'release_memory_occupation', 'sleep']);

interface Hosted {
  actor: EngineActor;
  client: EngineClient;
  /** Tokens of commands sent to this actor and not answered yet. */
  pending: Set<string>;
  /** Control calls in flight, by command token: aborted when the engine is removed. */
  running: Map<string, AbortController>;
  /** Completed discoveries: the first seeds from labels, later ones trust the engine. */
  discoveries: number;
  /** Data-plane requests in flight; a plain counter, never an actor event (hot path). */
  load: number;
  cmdSub: BusSubscription;
  lastPublished: string;
  /** The weight_version label last seen, to re-seed only when it changes (spec §12.3). */
  seededLabel: string | undefined;
}

export class EngineHost {
  private readonly hosted = new Map<string, Hosted>();
  private readonly waiters = new Map<string, (r: CommandResult | { error: string }) => void>();
  /** Last version seen per engine base URL: DP ranks change together, counted once (spec §12.3). */
  private readonly engineVersions = new Map<string, string | undefined>();

  constructor(
    private readonly deps: {
      replicaId: string;
      registry: Registry;
      bus: Bus;
      subjects: Subjects;
      control: ControlClient;
      timings: EngineTimings;
      cancels: Cancellations;
      metrics: Metrics;
      log: Logger;
    },
  ) {
    const { registry } = deps;
    registry.on('added', (w) => this.host(w));
    registry.on('replaced', (prev, next) => this.replaced(prev, next));
    registry.on('removed', (w) => void this.unhost(w.id));
  }

  has(id: string): boolean {
    return this.hosted.has(id);
  }

  snapshot(id: string): EngineSnapshot | undefined {
    return this.hosted.get(id)?.actor.getSnapshot();
  }

  client(id: string): EngineClient | undefined {
    return this.hosted.get(id)?.client;
  }

  load(id: string): number {
    return this.hosted.get(id)?.load ?? 0;
  }

  /** Data-plane accounting: the relay brackets every routed request with these. */
  acquire(id: string): void {
    const h = this.hosted.get(id);
    if (h) h.load++;
  }

  release(id: string, outcome: 'success' | 'failure' | 'neutral'): void {
    const h = this.hosted.get(id);
    if (!h) return;
    h.load = Math.max(0, h.load - 1);
    if (outcome === 'failure') h.actor.send({ type: 'dp.failure' });
    else if (outcome === 'success') {
      // A success only matters to a breaker that has failures to forget or is half-open: skip
      // the actor step on the hot path otherwise.
      const snap = h.actor.getSnapshot();
      if (snap.context.breakerFailures > 0 || (snap.value as { breaker: string }).breaker !== 'closed') h.actor.send({ type: 'dp.success' });
    }
  }

  /**
   * Runs one control call through the engine's actor, in its order, and returns the outcome.
   * Aborting `signal` drops the call if it is still queued, or aborts it if it is running.
   */
  run(id: string, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    const h = this.hosted.get(id);
    if (!h) return Promise.reject(new Error(`engine ${id} is not hosted by this replica`));
    if (signal?.aborted) return Promise.reject(new Error('cancelled'));
    const token = randomUUID();
    const op = REFIT_PATHS.has(call.path) ? 'refit' : PAUSE_PATHS.has(call.path) ? 'pause' : 'other';
    const command: EngineCommand = { token, op, payload: call };
    return new Promise((resolve, reject) => {
      const onAbort = () => h.actor.send({ type: 'cmd.cancel', token });
      signal?.addEventListener('abort', onAbort, { once: true });
      h.pending.add(token);
      this.waiters.set(token, (r) => {
        h.pending.delete(token);
        signal?.removeEventListener('abort', onAbort);
        if ('error' in r) reject(new Error(r.error));
        else resolve(r.outcome as ControlOutcome);
      });
      h.actor.send({ type: 'cmd.enqueue', command });
    });
  }

  /** Gateway-local writes (spec §11): applied to every DP rank of the engine. */
  setVersion(baseUrl: string, version: string, source: 'api' | 'passthrough' | 'registration'): void {
    for (const w of this.deps.registry.siblings(baseUrl)) {
      this.hosted.get(w.id)?.actor.send({ type: 'version.set', version, source });
    }
  }

  setControl(baseUrl: string, control: 'active' | 'paused' | 'asleep'): void {
    for (const w of this.deps.registry.siblings(baseUrl)) {
      this.hosted.get(w.id)?.actor.send({ type: 'control.set', control });
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.hosted.keys()].map((id) => this.unhost(id)));
  }

  private host(worker: Worker): void {
    if (worker.owner !== this.deps.replicaId || this.hosted.has(worker.id)) return;
    const client = this.makeClient(worker);
    const seededLabel = mergedLabels(worker).weight_version;
    const machine = engineMachine.provide({
      actors: {
        discover: fromPromise(async ({ signal }) => this.discover(worker.id, signal)),
        // Looked up per tick: a new api key or URL replaces the client after this actor started.
        probeTicker: fromCallback(({ sendBack, input }) => probeLoop(() => this.hosted.get(worker.id)?.client, input.intervalMs, sendBack)),
      },
    });
    const actor = createActor(machine, {
      systemId: `engine:${worker.id}`,
      input: { workerId: worker.id, url: worker.url, seedVersion: seedFrom(seededLabel), ...this.deps.timings },
    });
    const cmdSub = this.deps.bus.respond(this.deps.subjects.engineCmd(worker.id), async (data) => {
      const { call, requestId } = data as { call: ControlCall; requestId?: string };
      return this.deps.cancels.track(requestId, (signal) => this.run(worker.id, call, signal));
    });
    const hosted: Hosted = { actor, client, pending: new Set(), running: new Map(), discoveries: 0, load: 0, cmdSub, lastPublished: '', seededLabel };
    this.hosted.set(worker.id, hosted);
    // The machine says what runs when; the I/O happens here, and its result goes back as an event.
    const running = hosted.running;
    actor.on('command.run', ({ command }) => {
      const ctrl = new AbortController();
      running.set(command.token, ctrl);
      this.execute(worker.id, command.payload as ControlCall, ctrl.signal).then(
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
      const waiter = this.waiters.get(token);
      this.waiters.delete(token);
      waiter?.(result);
    });
    actor.subscribe({
      next: (snap) => this.publish(worker.id, hosted, snap),
      error: (err) => this.deps.log.error({ err, worker_id: worker.id }, 'engine actor failed'),
    });
    actor.start();
  }

  private replaced(prev: Worker, next: Worker): void {
    const h = this.hosted.get(next.id);
    if (!h) return this.host(next);
    // A ZMQ client binds its lane from labels (handshake address) and names its model: rebuilt
    // when those change, like any client when the key or URL does.
    const zmqChanged = next.connectionMode === 'zmq' && JSON.stringify(mergedLabels(prev)) !== JSON.stringify(mergedLabels(next));
    if (prev.apiKey !== next.apiKey || prev.url !== next.url || zmqChanged) {
      void h.client.close();
      h.client = this.makeClient(next);
    }
    const label = mergedLabels(next).weight_version;
    const versionChanged = label !== h.seededLabel;
    h.seededLabel = label;
    // The discovery this triggers is a registration: label seeding rules, caller labels win.
    h.discoveries = 0;
    h.actor.send({ type: 'registration.changed', seedVersion: seedFrom(label), versionChanged });
  }

  private async unhost(id: string): Promise<void> {
    const h = this.hosted.get(id);
    if (!h) return;
    this.hosted.delete(id);
    h.cmdSub.unsubscribe();
    h.actor.stop();
    for (const ctrl of h.running.values()) ctrl.abort();
    // Whoever waits on this engine's commands gets an answer now, not at their deadline.
    for (const token of [...h.pending]) {
      const waiter = this.waiters.get(token);
      this.waiters.delete(token);
      waiter?.({ error: `worker \`${id}\` was removed` });
    }
    const url = h.actor.getSnapshot().context.url;
    // The engine's gauges go only when no DP rank of it is left.
    const engineGone = this.deps.registry.siblings(url.replace(/@\d+$/, '')).length === 0;
    if (engineGone) this.engineVersions.delete(url.replace(/@\d+$/, ''));
    this.deps.metrics.forget(url, engineGone);
    await h.client.close();
  }

  private makeClient(worker: Worker): EngineClient {
    switch (worker.connectionMode) {
      case 'http':
        return new HttpEngineClient(worker.url.replace(/@\d+$/, ''), worker.apiKey);
      case 'grpc':
        return new GrpcEngineClient(worker.url);
      case 'zmq': {
        // The gateway binds the ZMQ lane and engines dial in; the handshake address can be pinned
        // with a registration label when the derived one does not suit the deployment.
        const labels = mergedLabels(worker);
        return new ZmqEngineClient(worker.url, {
          modelId: worker.modelId !== 'unknown' ? worker.modelId : undefined,
          handshakeAddress: labels.zmq_handshake_address,
        });
      }
    }
  }

  private async discover(id: string, signal: AbortSignal): Promise<void> {
    const h = this.hosted.get(id);
    if (!h) throw new Error('engine no longer hosted');
    const facts = await h.client.discover(signal);
    const labels = labelsFromFacts(h.client.mode, facts);
    const worker = this.deps.registry.setDiscovered(id, labels);
    if (!worker) return;
    h.discoveries++;
    if (h.discoveries === 1) {
      // First discovery: registration seeding, where caller labels win (spec §6.4, §12.3).
      const label = mergedLabels(worker).weight_version;
      if (label !== h.seededLabel) {
        h.seededLabel = label;
        h.actor.send({ type: 'version.set', version: seedFrom(label), source: 'registration' });
      }
      return;
    }
    // Rediscovery after the engine was unreachable: it may have restarted with other weights.
    // An engine that reports its version is believed over what the gateway last recorded.
    const reported = labels.weight_version;
    if (reported === undefined) return;
    const current = h.actor.getSnapshot().context.version;
    const next = seedFrom(reported);
    if (next !== current && (next === undefined || current === undefined || compareVersions(next, current) !== 0)) {
      this.deps.log.warn({ worker_id: id, recorded: current ?? null, reported }, 'engine reports another weight version after being unreachable');
      h.actor.send({ type: 'version.set', version: next, source: 'registration' });
    }
  }

  private async execute(id: string, call: ControlCall, signal: AbortSignal): Promise<CommandResult> {
    const worker = this.deps.registry.get(id);
    if (!worker) return { outcome: { kind: 'unreachable', latencyMs: 0, message: `worker \`${id}\` was removed` } };
    // Commands reach this replica over NATS from anyone on the bus: the path rules hold here too.
    try {
      validateEnginePath(call.path);
    } catch (err) {
      return { outcome: { kind: 'unreachable', latencyMs: 0, message: (err as Error).message } };
    }
    const controlUrl = controlUrlFor(worker.connectionMode, worker.baseUrl, mergedLabels(worker));
    if (!controlUrl) {
      const outcome: ControlOutcome = { kind: 'no_control_endpoint', latencyMs: 0, message: noControlEndpoint(worker), connectionMode: worker.connectionMode };
      return { outcome };
    }
    const clientError = this.deps.control.clientError(worker.httpPool);
    if (clientError) {
      const message = `worker \`${worker.id}\` has no control endpoint: no HTTP client for the control endpoint: ${clientError}`;
      return { outcome: { kind: 'no_control_endpoint', latencyMs: 0, message, connectionMode: worker.connectionMode } };
    }
    const outcome = await this.deps.control.call({ workerUrl: worker.url, controlUrl, apiKey: worker.apiKey, pool: worker.httpPool }, call, signal);
    this.deps.metrics.controlCall(controlOp(call.path), outcome);
    if (outcome.kind !== 'answer' || outcome.status < 200 || outcome.status >= 300) return { outcome };
    const seen = observeControlCall(call.path, decodeBody(call.body));
    // Rejections are logged with their reason, never with the value (spec §12.6).
    if (seen.rejected) this.deps.log.info({ worker_id: id, path: call.path, reason: seen.rejected }, 'rl.observe rejected');
    if (seen.version !== undefined) this.deps.log.info({ worker: worker.baseUrl, version: seen.version, source: 'passthrough' }, 'rl.observe version');
    if (seen.control !== undefined) this.deps.log.info({ worker: worker.baseUrl, control: seen.control, source: 'passthrough' }, 'rl.observe control');
    // DP ranks share one engine: their actors learn the same facts.
    for (const sib of this.deps.registry.siblings(worker.baseUrl)) {
      if (sib.id === id) continue;
      if (seen.version !== undefined) this.setVersionOne(sib.id, seen.version);
      if (seen.control !== undefined) this.hosted.get(sib.id)?.actor.send({ type: 'control.set', control: seen.control });
    }
    return { outcome, control: seen.control, version: seen.version };
  }

  private setVersionOne(id: string, version: string): void {
    this.hosted.get(id)?.actor.send({ type: 'version.set', version, source: 'passthrough' });
  }

  /** The first sighting of an engine records its version; a later change with load counts. */
  private noteVersion(url: string, version: string | undefined): void {
    const base = url.replace(/@\d+$/, '');
    const known = this.engineVersions.has(base);
    if (known && this.engineVersions.get(base) === version) return;
    this.engineVersions.set(base, version);
    if (!known) return;
    const inflight = this.deps.registry.siblings(base).reduce((sum, w) => sum + this.load(w.id), 0);
    if (inflight > 0) this.deps.metrics.versionChangeWithInflight();
  }

  private publish(id: string, h: Hosted, snap: EngineSnapshot): void {
    const c = snap.context;
    const state = lifecycleOf(snap);
    const breaker = breakerOf(snap);
    const key = `${state}|${breaker}|${c.control}|${c.version}|${c.versionSource}`;
    if (key === h.lastPublished) return;
    const prevState = h.lastPublished.split('|')[0];
    h.lastPublished = key;
    const event: EngineStateEvent = {
      id,
      url: c.url,
      state,
      control: c.control,
      weight_version: c.version ?? null,
      version_source: c.versionSource ?? null,
      breaker,
      in_flight: h.load,
      queued: c.queue.length,
      error: state === 'unreachable' ? (c.lastError ?? null) : null,
      time: new Date().toISOString(),
    };
    this.deps.metrics.engineState(c.url, event);
    this.noteVersion(c.url, c.version);
    if (prevState !== state) this.deps.log.info({ worker_id: id, url: c.url, from: prevState || null, to: state }, 'engine transition');
    try {
      this.deps.bus.publish(this.deps.subjects.engineState(id), event);
    } catch (err) {
      this.deps.log.warn({ err, worker_id: id }, 'could not publish engine state');
    }
  }
}

/** Registration labels seed a version unless absent, empty or the `default` placeholder. */
function seedFrom(label: string | undefined): string | undefined {
  if (label === undefined || label.trim() === '' || label.trim() === 'default') return undefined;
  const checked = checkVersion(label);
  return checked.ok ? checked.value : undefined;
}
