// Holds a data-plane client for every engine of the fleet, and the engine actors this replica
// owns: one per owned worker, with the machine's side effects (discovery, probes), the engine's
// command subject on NATS, and data-plane load. Engines owned elsewhere are routed from their
// shared record (engine-record.ts); what this replica learns about them (a data-plane failure, an
// API write) goes to their owner as a notice. Commands run in `command-runner.ts`, state goes out
// through `state-publisher.ts`; the machine itself never learns about NATS or HTTP.

import { createActor, fromCallback, fromPromise } from 'xstate';
import { engineMachine, type EngineActor, type EngineSnapshot } from '../../actors/engine.ts';
import type { JsonBucket } from '../bus/buckets.ts';
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
import { CommandRunner, newLane, type CommandLane } from './command-runner.ts';
import { discoverAndSeed, seedFrom } from './discovery-seed.ts';
import { compareVersions } from './versions.ts';
import { probeLoop } from './probe-loop.ts';
import { StatePublisher, type PublishedState } from './state-publisher.ts';
import type { EngineNotice, EngineRecord } from './engine-record.ts';
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

/** One engine of the fleet, as this replica holds it. */
interface Hosted {
  url: string;
  client: EngineClient;
  /** Data-plane requests in flight from this replica; a plain counter, never an actor event (hot path). */
  load: number;
  /** Present while this replica owns the engine. */
  owned: Owned | undefined;
}

/** The actor side of an engine this replica owns. */
interface Owned {
  actor: EngineActor;
  readonly client: EngineClient;
  readonly load: number;
  /** Its control calls, one at a time in arrival order. */
  lane: CommandLane;
  /** Completed discoveries: the first seeds from labels, later ones trust the engine. */
  discoveries: number;
  cmdSub: BusSubscription;
  /** The state last published; a snapshot that changes none of it changes nothing outside. */
  published: PublishedState | undefined;
  /** The weight_version label last seen, to re-seed only when it changes (spec §12.3). */
  seededLabel: string | undefined;
}

/** The engine's actor runs on another replica (or none yet): the call was not made here. */
export class NotOwner extends Error {
  override readonly name = 'NotOwner';
  constructor(id: string) {
    super(`engine ${id} is not owned by this replica`);
  }
}

export class EngineHost {
  /**
   * Bumped whenever any hosted actor's snapshot changes, and when an actor is hosted or removed:
   * the router rebuilds its routing table when this (or the registry's generation) moved.
   */
  generation = 0;
  /**
   * The fleet's version of a worker's model (the last refit's), once the refit service exists:
   * an engine discovered below it is quarantined until a refit brings it up.
   */
  fleetVersionOf: ((w: Worker) => string | undefined) | undefined;
  private readonly hosted = new Map<string, Hosted>();
  /** Every engine's last shared record (the `engines` bucket), read while another replica owns it. */
  private readonly records = new Map<string, EngineRecord>();
  private readonly commands: CommandRunner;
  private readonly states: StatePublisher;
  private readonly noticeSub: BusSubscription;

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
      /** The shared `engines` bucket: owned engines' records are written there. */
      records?: JsonBucket<EngineRecord>;
    },
  ) {
    const { registry, bus, subjects, control, metrics, log, records, replicaId } = deps;
    this.commands = new CommandRunner({ registry, control, metrics, log, actorOf: (id) => this.hosted.get(id)?.owned?.actor, clientOf: (id) => this.hosted.get(id)?.client });
    this.states = new StatePublisher({ registry, bus, subjects, metrics, log, loadOf: (id) => this.load(id), records, replicaId });
    registry.on('added', (w) => this.host(w));
    registry.on('replaced', (prev, next) => this.replaced(prev, next));
    registry.on('removed', (w) => void this.unhost(w.id));
    registry.on('owner', (w, prev) => this.ownerChanged(w, prev));
    this.noticeSub = bus.subscribe(subjects.allEngineNotices(), (data, msg) => {
      const id = msg.subject.split('.').at(-2) ?? '';
      this.applyNotice(id, data as EngineNotice);
    });
  }

  has(id: string): boolean {
    return this.hosted.has(id);
  }

  /** True when this replica runs the engine's actor. */
  owns(id: string): boolean {
    return this.hosted.get(id)?.owned !== undefined;
  }

  snapshot(id: string): EngineSnapshot | undefined {
    return this.hosted.get(id)?.owned?.actor.getSnapshot();
  }

  /** The owner's shared record of an engine this replica does not own. */
  remote(id: string): EngineRecord | undefined {
    return this.hosted.get(id)?.owned ? undefined : this.records.get(id);
  }

  /** A record from the shared `engines` bucket (null: deleted). */
  setRemote(id: string, record: EngineRecord | null): void {
    if (record) this.records.set(id, record);
    else this.records.delete(id);
    if (!this.hosted.get(id)?.owned) this.generation++;
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
    const actor = h.owned?.actor;
    if (!actor) {
      // The breaker lives with the owner: failures go there, and successes only while it has
      // something to forget (they would cost a bus message per request otherwise).
      if (outcome === 'failure' || (outcome === 'success' && (this.records.get(id)?.breaker ?? 'closed') !== 'closed')) {
        this.notify(id, { kind: 'dp', ok: outcome === 'success' });
      }
      return;
    }
    if (outcome === 'failure') actor.send({ type: 'dp.failure' });
    else if (outcome === 'success') {
      // A success only matters to a breaker that has failures to forget or is half-open: skip
      // the actor step on the hot path otherwise.
      const snap = actor.getSnapshot();
      if (snap.context.breakerFailures > 0 || (snap.value as { breaker: string }).breaker !== 'closed') actor.send({ type: 'dp.success' });
    }
  }

  /**
   * Runs one control call through the engine's actor, in its order, and returns the outcome.
   * Aborting `signal` drops the call if it is still queued, or aborts it if it is running.
   */
  run(id: string, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    const owned = this.hosted.get(id)?.owned;
    if (!owned) return Promise.reject(new NotOwner(id));
    return this.commands.submit(id, owned.lane, call, signal);
  }

  /** Gateway-local writes (spec §11): applied to every DP rank of the engine, by its owner. */
  setVersion(baseUrl: string, version: string, source: 'api' | 'passthrough' | 'registration'): void {
    for (const w of this.deps.registry.siblings(baseUrl)) this.applyNotice(w.id, { kind: 'version', version, source }, true);
  }

  setControl(baseUrl: string, control: 'active' | 'paused' | 'asleep'): void {
    for (const w of this.deps.registry.siblings(baseUrl)) this.applyNotice(w.id, { kind: 'control', control }, true);
  }

  /** Holds the engine (every DP rank of it) out of routing, or lets it back (null). */
  setQuarantine(id: string, reason: string | null): void {
    const w = this.deps.registry.get(id);
    if (!w) return;
    for (const sib of this.deps.registry.siblings(w.baseUrl)) this.applyNotice(sib.id, { kind: 'quarantine', reason }, true);
  }

  async close(): Promise<void> {
    this.noticeSub.unsubscribe();
    // A replica that stops leaves the engines to the others: their shared records stay.
    this.closing = true;
    await Promise.all([...this.hosted.keys()].map((id) => this.unhost(id)));
  }

  private closing = false;

  /** Applies a notice to an owned engine's actor; forwards it to the owner otherwise (when local). */
  private applyNotice(id: string, notice: EngineNotice, local = false): void {
    const h = this.hosted.get(id);
    const actor = h?.owned?.actor;
    if (!actor) {
      if (local && h) this.notify(id, notice);
      return;
    }
    if (notice.kind === 'dp') actor.send({ type: notice.ok ? 'dp.success' : 'dp.failure' });
    else if (notice.kind === 'version') actor.send({ type: 'version.set', version: notice.version, source: notice.source });
    else if (notice.kind === 'control') actor.send({ type: 'control.set', control: notice.control, source: 'api' });
    else if (notice.kind === 'quarantine') actor.send(notice.reason === null ? { type: 'quarantine.clear' } : { type: 'quarantine.set', reason: notice.reason });
  }

  private notify(id: string, notice: EngineNotice): void {
    try {
      this.deps.bus.publish(this.deps.subjects.engineNotice(id), notice);
    } catch (err) {
      this.deps.log.debug({ err, worker_id: id }, 'could not notify the engine owner');
    }
  }

  /** Every registered engine gets a data-plane client; the owner also gets its actor. */
  private host(worker: Worker): void {
    if (this.hosted.has(worker.id)) return;
    this.hosted.set(worker.id, { url: worker.url, client: this.makeClient(worker), load: 0, owned: undefined });
    this.generation++;
    // Another listener may have set the owner since this event was emitted: read it afresh.
    const current = this.deps.registry.get(worker.id) ?? worker;
    if (current.owner === this.deps.replicaId) this.own(current);
  }

  private ownerChanged(worker: Worker, prev: string): void {
    const h = this.hosted.get(worker.id);
    if (!h) return;
    if (worker.owner === this.deps.replicaId) {
      this.deps.log.info({ worker_id: worker.id, url: worker.url, from: prev || null }, 'engine owned by this replica');
      this.own(worker);
    } else if (prev === this.deps.replicaId) {
      this.deps.log.warn({ worker_id: worker.id, url: worker.url, to: worker.owner }, 'engine owned by another replica now');
      this.disown(worker.id, h);
    }
  }

  /** Starts the engine's actor here: it discovers the engine first, so its state is read, not assumed. */
  private own(worker: Worker): void {
    const h = this.hosted.get(worker.id);
    if (!h || h.owned) return;
    const seededLabel = mergedLabels(worker).weight_version;
    const machine = engineMachine.provide({
      actors: {
        discover: fromPromise(async ({ signal }) => {
          const ms = this.deps.timings.discoveryTimeoutMs;
          const timeout = AbortSignal.timeout(ms);
          try {
            await discoverAndSeed(worker.id, this.hosted.get(worker.id)?.owned, AbortSignal.any([signal, timeout]), this.deps);
            this.checkBehind(worker.id);
          } catch (err) {
            if (timeout.aborted && !signal.aborted) throw new Error(`discovery got no answer within ${ms / 1000} s`);
            throw err;
          }
        }),
        // Looked up per tick: a new api key or URL replaces the client after this actor started.
        probeTicker: fromCallback(({ sendBack, input }) => probeLoop(() => this.hosted.get(worker.id)?.client, input.intervalMs, sendBack, input.quiet)),
      },
    });
    const last = this.records.get(worker.id);
    const seed = last?.weight_version ?? seedFrom(seededLabel);
    const actor = createActor(machine, {
      systemId: `engine:${worker.id}`,
      input: { workerId: worker.id, url: worker.url, seedVersion: seed ?? undefined, ...this.deps.timings },
    });
    const cmdSub = this.deps.bus.respond(this.deps.subjects.engineCmd(worker.id), async (data) => {
      const { call, requestId } = data as { call: ControlCall; requestId?: string };
      return this.deps.cancels.track(requestId, (signal) => this.run(worker.id, call, signal));
    });
    const owned: Owned = {
      actor,
      get client() {
        return h.client;
      },
      get load() {
        return h.load;
      },
      lane: newLane(actor),
      // A takeover is a rediscovery: the engine is believed over what the last owner recorded.
      discoveries: last ? 1 : 0,
      cmdSub,
      published: undefined,
      seededLabel,
    };
    h.owned = owned;
    // The machine says when a pause or refit runs; the I/O happens in the runner, its result goes back as an event.
    this.commands.listen(worker.id, owned.lane);
    actor.subscribe({
      next: (snap) => {
        // Routing and the shared state move only when lifecycle, control, version, breaker or
        // quarantine did: a probe or a breaker count that changed none of them is invisible.
        if (h.owned !== owned || !this.states.changed(owned.published, snap)) return;
        this.generation++;
        owned.published = this.states.publish(worker.id, owned.published, snap, h.load, owned.lane.queue.length);
      },
      error: (err) => this.deps.log.error({ err, worker_id: worker.id }, 'engine actor failed'),
    });
    actor.start();
    // A quarantine outlives a change of owner: the last owner's record carries it.
    if (last?.quarantine) actor.send({ type: 'quarantine.set', reason: last.quarantine });
    this.generation++;
  }

  /** A late joiner, or an engine back from a restart, below the fleet's version is quarantined. */
  private checkBehind(id: string): void {
    const actor = this.hosted.get(id)?.owned?.actor;
    const w = this.deps.registry.get(id);
    const fleet = w && this.fleetVersionOf?.(w);
    if (!actor || fleet === undefined) return;
    const { version, quarantine } = actor.getSnapshot().context;
    const behind = version === undefined || compareVersions(version, fleet) < 0;
    if (behind && quarantine === null) {
      this.deps.log.warn({ worker_id: id, version: version ?? null, fleet_version: fleet }, 'engine below the fleet version: quarantined until a refit brings it up');
      actor.send({ type: 'quarantine.set', reason: 'behind_fleet' });
    } else if (!behind && quarantine === 'behind_fleet') actor.send({ type: 'quarantine.clear' });
  }

  /** Another replica owns the engine now: its actor stops here, its client stays for routing. */
  private disown(id: string, h: Hosted): void {
    const owned = h.owned;
    if (!owned) return;
    h.owned = undefined;
    this.generation++;
    owned.cmdSub.unsubscribe();
    owned.actor.stop();
    this.commands.abandon(id, owned.lane);
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
    const owned = h.owned;
    if (!owned) return;
    const label = mergedLabels(next).weight_version;
    const versionChanged = label !== owned.seededLabel;
    owned.seededLabel = label;
    // The discovery this triggers is a registration: label seeding rules, caller labels win.
    owned.discoveries = 0;
    owned.actor.send({ type: 'registration.changed', seedVersion: seedFrom(label), versionChanged });
  }

  private async unhost(id: string): Promise<void> {
    const h = this.hosted.get(id);
    if (!h) return;
    const url = h.url;
    // A removed engine's record goes with it (its owner removes it).
    if (h.owned && !this.closing) this.deps.records?.delete(id).catch(() => {});
    this.records.delete(id);
    this.disown(id, h);
    this.hosted.delete(id);
    this.generation++;
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
