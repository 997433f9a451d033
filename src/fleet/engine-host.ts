// Hosts the engine actors this gateway replica owns: creates one per registry worker with its
// engine client, provides the machine's side effects (discovery, probes), answers the engine's
// command subject on NATS, and counts data-plane load. Commands run in `command-runner.ts`, state
// goes out through `state-publisher.ts`; the machine itself never learns about NATS or HTTP.

import { createActor, fromCallback, fromPromise } from 'xstate';
import { engineMachine, type EngineActor, type EngineSnapshot } from '../../actors/engine.ts';
import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { ControlCall, ControlOutcome } from '../engines/control-call.ts';
import type { ControlClient } from '../engines/control-client.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import { HttpEngineClient } from '../engines/http.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import { ZmqEngineClient } from '../engines/zmq.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Registry } from './registry.ts';
import type { Cancellations } from './cancellations.ts';
import { CommandRunner } from './command-runner.ts';
import { discoverAndSeed, seedFrom } from './discovery-seed.ts';
import { probeLoop } from './probe-loop.ts';
import { StatePublisher } from './state-publisher.ts';
import { baseUrlOf, mergedLabels, UNKNOWN_MODEL_ID, type Worker } from './worker.ts';

export type { EngineStateEvent } from './state-publisher.ts';

export interface EngineTimings {
  probeIntervalMs: number;
  probeFailureThreshold: number;
  retryIntervalMs: number;
  /** Deadline of one discovery: an engine that accepts TCP and never answers must not stay `registering`. */
  discoveryTimeoutMs: number;
  breakerThreshold: number;
  breakerCooldownMs: number;
}

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
  /**
   * Bumped whenever any hosted actor's snapshot changes, and when an actor is hosted or removed:
   * the router rebuilds its routing table when this (or the registry's generation) moved.
   */
  generation = 0;
  private readonly hosted = new Map<string, Hosted>();
  private readonly commands: CommandRunner;
  private readonly states: StatePublisher;

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
    const { registry, bus, subjects, control, metrics, log } = deps;
    this.commands = new CommandRunner({ registry, control, metrics, log, actorOf: (id) => this.hosted.get(id)?.actor });
    this.states = new StatePublisher({ registry, bus, subjects, metrics, log, loadOf: (id) => this.load(id) });
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
    return this.commands.submit(h, call, signal);
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
        discover: fromPromise(async ({ signal }) => {
          const ms = this.deps.timings.discoveryTimeoutMs;
          const timeout = AbortSignal.timeout(ms);
          try {
            return await discoverAndSeed(worker.id, this.hosted.get(worker.id), AbortSignal.any([signal, timeout]), this.deps);
          } catch (err) {
            if (timeout.aborted && !signal.aborted) throw new Error(`discovery got no answer within ${ms / 1000} s`);
            throw err;
          }
        }),
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
    // The machine says what runs when; the I/O happens in the runner, its result goes back as an event.
    this.commands.listen(worker.id, hosted);
    let seen: unknown;
    actor.subscribe({
      next: (snap) => {
        // XState notifies on every event; an event that changed nothing keeps the same snapshot.
        if (snap !== seen) {
          seen = snap;
          this.generation++;
        }
        this.states.publish(worker.id, hosted, snap);
      },
      error: (err) => this.deps.log.error({ err, worker_id: worker.id }, 'engine actor failed'),
    });
    actor.start();
    this.generation++;
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
    this.generation++;
    h.cmdSub.unsubscribe();
    h.actor.stop();
    this.commands.abandon(id, h);
    const url = h.actor.getSnapshot().context.url;
    // The engine's gauges go only when no DP rank of it is left.
    const base = baseUrlOf(url).baseUrl;
    const engineGone = this.deps.registry.siblings(base).length === 0;
    if (engineGone) this.states.forgetEngine(base);
    this.deps.metrics.forget(url, engineGone);
    await h.client.close();
  }

  private makeClient(worker: Worker): EngineClient {
    switch (worker.connectionMode) {
      case 'http':
        return new HttpEngineClient(baseUrlOf(worker.url).baseUrl, worker.apiKey);
      case 'grpc':
        return new GrpcEngineClient(worker.url);
      case 'zmq': {
        // The gateway binds the ZMQ lane and engines dial in; the handshake address can be pinned
        // with a registration label when the derived one does not suit the deployment.
        const labels = mergedLabels(worker);
        return new ZmqEngineClient(worker.url, {
          modelId: worker.modelId !== UNKNOWN_MODEL_ID ? worker.modelId : undefined,
          handshakeAddress: labels.zmq_handshake_address,
        });
      }
    }
  }
}
