// The engine actors this replica owns: one per owned worker, with the machine's side effects
// (discovery, probes), the engine's command subject on NATS and its command lane, and the
// gateway-local writes (version, control, quarantine) applied to them. Every engine's client and
// load live in `engine-clients.ts`; what is known of engines owned elsewhere, and the notices sent
// to their owners, in `remote-engines.ts`. Commands run in `command-runner.ts`, state goes out
// through `state-publisher.ts`; the machine itself never learns about NATS or HTTP.

import { createActor, fromCallback, fromPromise } from 'xstate';
import { engineMachine, type EngineActor, type EngineEvent, type EngineSnapshot } from '../../actors/engine.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import { engineCommandOf } from '../engines/control-call.ts';
import type { ControlClient } from '../engines/control-client.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Registry } from './registry.ts';
import type { Cancellations } from './cancellations.ts';
import { CommandRunner, newLane, type CommandLane } from './command-runner.ts';
import { discoverAndSeed, seedFrom } from './discovery-seed.ts';
import { compareVersions } from './versions.ts';
import { probeLoop } from './probe-loop.ts';
import { StatePublisher, type PublishedState } from './state-publisher.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { EngineNotice } from '../wire/engine-notice.ts';
import type { EngineRecord } from '../wire/engine-state.ts';
import { baseUrlOf, mergedLabels, type Worker } from './worker.ts';
import { EngineClients, type EngineLink } from './engine-clients.ts';
import { RemoteEngines } from './remote-engines.ts';
import type { LeaseFence } from './lease-fence.ts';

export interface EngineTimings {
  probeIntervalMs: number;
  /** Most probes a second this replica sends; a larger share of the fleet is probed less often (0: no cap). */
  probeRate: number;
  probeFailureThreshold: number;
  retryIntervalMs: number;
  /** Deadline of one discovery: an engine that accepts TCP and never answers must not stay `registering`. */
  discoveryTimeoutMs: number;
  breakerThreshold: number;
  breakerCooldownMs: number;
}

/** The settings (seconds, as the flags give them) the timings are read from. */
export interface EngineTimingSettings {
  probeIntervalSecs: number;
  probeMaxRate: number;
  probeFailureThreshold: number;
  retryIntervalSecs: number;
  discoveryTimeoutSecs: number;
  breakerThreshold: number;
  breakerCooldownSecs: number;
}

/** The flags as timings, each held to a floor that keeps a typo from spinning a loop. */
export function engineTimings(s: EngineTimingSettings): EngineTimings {
  return {
    probeIntervalMs: s.probeIntervalSecs * 1000,
    probeRate: Math.max(0, s.probeMaxRate),
    probeFailureThreshold: Math.max(1, s.probeFailureThreshold),
    retryIntervalMs: Math.max(100, s.retryIntervalSecs * 1000),
    discoveryTimeoutMs: Math.max(100, s.discoveryTimeoutSecs * 1000),
    breakerThreshold: Math.max(1, s.breakerThreshold),
    breakerCooldownMs: Math.max(100, s.breakerCooldownSecs * 1000),
  };
}

/** The actor side of an engine this replica owns. */
interface Owned {
  actor: EngineActor;
  link: EngineLink;
  readonly client: EngineClient;
  /** Its control calls, one at a time in arrival order. */
  lane: CommandLane;
  /** Completed discoveries: the first seeds from labels, later ones trust the engine. */
  discoveries: number;
  cmdSub: BusSubscription;
  /** The state last published; a snapshot that changes none of it changes nothing outside. */
  published: PublishedState | undefined;
  /** The weight_version label last seen, to re-seed only when it changes. */
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
  /** Every engine's client and load. */
  private readonly links = new EngineClients();
  /** The engines this replica runs the actors of. */
  private readonly owned = new Map<string, Owned>();
  private readonly remotes: RemoteEngines;
  private readonly commands: CommandRunner;
  private readonly states: StatePublisher;
  /** The engine machine with this host's side effects, built once (provide() copies the machine). */
  private readonly machine;

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
      /** This replica's lease fence: no control call goes out while it is closed. */
      fence: LeaseFence;
      /**
       * The fleet's version of a worker's model (the last refit's), undefined while none is
       * known: an engine discovered below it is quarantined until a refit brings it up.
       */
      fleetVersionOf?: (w: Worker) => string | undefined;
    },
  ) {
    const { registry, bus, subjects, control, metrics, log, records, replicaId, fence } = deps;
    this.commands = new CommandRunner({
      registry,
      control,
      metrics,
      log,
      fence,
      actorOf: (id) => this.owned.get(id)?.actor,
      clientOf: (id) => this.links.get(id)?.client,
    });
    this.states = new StatePublisher({
      registry,
      bus,
      subjects,
      metrics,
      log,
      loadOf: (id) => this.load(id),
      pausedBy: (id) => this.commands.pausedBy.get(id),
      records,
      replicaId,
    });
    registry.on('added', (w) => this.host(w));
    registry.on('replaced', (prev, next) => this.replaced(prev, next));
    registry.on('removed', (w) => void this.unhost(w.id));
    registry.on('owner', (w, prev) => this.ownerChanged(w, prev));
    this.remotes = new RemoteEngines({ bus, subjects, log }, (id, notice) => this.applyNotice(id, notice));
    this.machine = engineMachine.provide({
      actors: {
        discover: fromPromise<void, { workerId: string }>(async ({ input, signal }) => {
          const id = input.workerId;
          const ms = this.deps.timings.discoveryTimeoutMs;
          const timeout = AbortSignal.timeout(ms);
          try {
            await discoverAndSeed(id, this.owned.get(id), AbortSignal.any([signal, timeout]), this.deps);
            this.checkBehind(id);
          } catch (err) {
            if (timeout.aborted && !signal.aborted) throw new Error(`discovery got no answer within ${ms / 1000} s`);
            throw err;
          }
        }),
        // The client is looked up per tick (a new api key or URL replaces it), the interval too
        // (the probe budget stretches it as the fleet grows). A probe that finds nothing new is
        // not sent to the actor at all.
        probeTicker: fromCallback<EngineEvent, { workerId: string; intervalMs: number; quiet: boolean }>(({ sendBack, input }) =>
          probeLoop(
            () => this.links.get(input.workerId)?.client,
            () => this.probeIntervalMs(input.intervalMs),
            input.intervalMs,
            (event) => {
              if (event.type === 'probe.ok' && !this.probeNews(input.workerId, event.paused)) return;
              sendBack(event);
            },
            input.quiet,
          ),
        ),
      },
    });
  }

  has(id: string): boolean {
    return this.links.has(id);
  }

  /** True when this replica runs the engine's actor. */
  owns(id: string): boolean {
    return this.owned.has(id);
  }

  /** No control call runs or waits on the engine's lane (only for engines this replica owns). */
  idle(id: string): boolean {
    const lane = this.owned.get(id)?.lane;
    return lane !== undefined && lane.current === undefined && lane.queue.length === 0;
  }

  snapshot(id: string): EngineSnapshot | undefined {
    return this.owned.get(id)?.actor.getSnapshot();
  }

  /** Who paused a paused engine (`refit:<id>` or `operator`), as its owner knows it; undefined if unknown. */
  pausedBy(id: string): string | undefined {
    return this.owned.has(id) ? this.commands.pausedBy.get(id) : (this.remotes.record(id)?.paused_by ?? undefined);
  }

  /**
   * An engine's control state and pauser as its owner last wrote them to the shared bucket, read
   * fresh: a replica taking over a refit must not trust a watch that may lag.
   */
  async recordedControl(id: string): Promise<{ control: string; pausedBy: string | undefined } | undefined> {
    const r = (await this.deps.records?.get(id))?.value;
    return r ? { control: r.control, pausedBy: r.paused_by ?? undefined } : undefined;
  }

  /** The owner's shared record of an engine this replica does not own. */
  remote(id: string): EngineRecord | undefined {
    return this.owned.has(id) ? undefined : this.remotes.record(id);
  }

  /** A record from the shared `engines` bucket (null: deleted). */
  setRemote(id: string, record: EngineRecord | null): void {
    this.remotes.set(id, record);
    if (!this.owned.has(id)) this.generation++;
  }

  client(id: string): EngineClient | undefined {
    return this.links.get(id)?.client;
  }

  load(id: string): number {
    return this.links.get(id)?.load ?? 0;
  }

  /** Data-plane accounting: the relay brackets every routed request with these. */
  acquire(id: string): void {
    const link = this.links.get(id);
    if (link) link.load++;
  }

  release(id: string, outcome: 'success' | 'failure' | 'neutral'): void {
    const link = this.links.get(id);
    if (!link) return;
    link.load = Math.max(0, link.load - 1);
    const actor = this.owned.get(id)?.actor;
    if (!actor) {
      // The breaker lives with the owner: failures go there, and successes only while it has
      // something to forget (they would cost a bus message per request otherwise).
      if (outcome === 'failure' || (outcome === 'success' && (this.remotes.record(id)?.breaker ?? 'closed') !== 'closed')) {
        this.remotes.notify(id, { kind: 'dp', ok: outcome === 'success' });
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
    const owned = this.owned.get(id);
    if (!owned) return Promise.reject(new NotOwner(id));
    return this.commands.submit(id, owned.lane, call, signal);
  }

  /** Gateway-local writes: applied to every DP rank of the engine, by its owner. */
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
    this.remotes.close();
    // A replica that stops leaves the engines to the others: their shared records stay.
    this.closing = true;
    this.states.records?.close();
    await Promise.all([...this.links.ids()].map((id) => this.unhost(id)));
  }

  private closing = false;

  /** Applies a notice to an owned engine's actor; forwards it to the owner otherwise (when local). */
  private applyNotice(id: string, notice: EngineNotice, local = false): void {
    const actor = this.owned.get(id)?.actor;
    if (!actor) {
      if (local && this.links.has(id)) this.remotes.notify(id, notice);
      return;
    }
    if (notice.kind === 'dp') actor.send({ type: notice.ok ? 'dp.success' : 'dp.failure' });
    else if (notice.kind === 'version') actor.send({ type: 'version.set', version: notice.version, source: notice.source });
    else if (notice.kind === 'control') actor.send({ type: 'control.set', control: notice.control, source: 'api' });
    else if (notice.kind === 'quarantine')
      actor.send(notice.reason === null ? { type: 'quarantine.clear' } : { type: 'quarantine.set', reason: notice.reason });
  }

  /** Every registered engine gets a data-plane client; the owner also gets its actor. */
  private host(worker: Worker): void {
    if (this.links.has(worker.id)) return;
    this.links.add(worker);
    this.generation++;
    // Another listener may have set the owner since this event was emitted: read it afresh.
    const current = this.deps.registry.get(worker.id) ?? worker;
    if (current.owner === this.deps.replicaId) this.own(current);
  }

  private ownerChanged(worker: Worker, prev: string): void {
    if (!this.links.has(worker.id)) return;
    if (worker.owner === this.deps.replicaId) {
      this.deps.log.info({ worker_id: worker.id, url: worker.url, from: prev || null }, 'engine owned by this replica');
      this.own(worker);
    } else if (prev === this.deps.replicaId) {
      this.deps.log.warn({ worker_id: worker.id, url: worker.url, to: worker.owner }, 'engine owned by another replica now');
      this.disown(worker.id);
    }
  }

  /** Starts the engine's actor here: it discovers the engine first, so its state is read, not assumed. */
  private own(worker: Worker): void {
    const link = this.links.get(worker.id);
    if (!link || this.owned.has(worker.id)) return;
    const seededLabel = mergedLabels(worker).weight_version;
    const last = this.remotes.record(worker.id);
    const seed = last?.weight_version ?? seedFrom(seededLabel);
    // Who paused it travels with the engine: a refit's pause stays a refit's under a new owner.
    if (last?.control === 'paused' && last.paused_by) this.commands.pausedBy.set(worker.id, last.paused_by);
    const actor = createActor(this.machine, {
      systemId: `engine:${worker.id}`,
      input: { workerId: worker.id, url: worker.url, seedVersion: seed ?? undefined, ...this.deps.timings },
    });
    const cmdSub = this.deps.bus.respond(this.deps.subjects.engineCmd(worker.id), async (data) => {
      const { call, requestId } = engineCommandOf(data); // another shape: a request error, nothing run
      return this.deps.cancels.track(requestId, (signal) => this.run(worker.id, call, signal));
    });
    const owned: Owned = {
      actor,
      link,
      get client() {
        return link.client;
      },
      lane: newLane(actor),
      // A takeover is a rediscovery: the engine is believed over what the last owner recorded.
      discoveries: last ? 1 : 0,
      cmdSub,
      published: undefined,
      seededLabel,
    };
    this.owned.set(worker.id, owned);
    // The machine says when a pause or refit runs; the I/O happens in the runner, its result goes back as an event.
    this.commands.listen(worker.id, owned.lane);
    actor.subscribe({
      next: (snap) => {
        // Routing and the shared state move only when lifecycle, control, version, breaker or
        // quarantine did: a probe or a breaker count that changed none of them is invisible.
        if (this.owned.get(worker.id) !== owned || !this.states.changed(owned.published, snap)) return;
        this.generation++;
        owned.published = this.states.publish(worker.id, owned.published, snap, link.load, owned.lane.queue.length);
      },
      error: (err) => this.deps.log.error({ err, worker_id: worker.id }, 'engine actor failed'),
    });
    actor.start();
    // A quarantine outlives a change of owner: the last owner's record carries it.
    if (last?.quarantine) actor.send({ type: 'quarantine.set', reason: last.quarantine });
    this.generation++;
  }

  /**
   * One engine's probe interval: the configured one, stretched so that this replica sends at most
   * `probeRate` probes a second whatever the size of its share of the fleet.
   */
  private probeIntervalMs(configured: number): number {
    const rate = this.deps.timings.probeRate;
    return rate > 0 ? Math.max(configured, (this.owned.size * 1000) / rate) : configured;
  }

  /** Whether a successful probe tells the actor anything (a failure count to clear, a resume seen). */
  private probeNews(id: string, paused: boolean | undefined): boolean {
    const snap = this.owned.get(id)?.actor.getSnapshot();
    if (!snap) return false;
    return snap.context.probeFailures > 0 || (paused === false && snap.context.control === 'paused');
  }

  /** A late joiner, or an engine back from a restart, below the fleet's version is quarantined. */
  private checkBehind(id: string): void {
    const actor = this.owned.get(id)?.actor;
    const w = this.deps.registry.get(id);
    const fleet = w && this.deps.fleetVersionOf?.(w);
    if (!actor || fleet === undefined) return;
    const { version, quarantine } = actor.getSnapshot().context;
    const behind = version === undefined || compareVersions(version, fleet) < 0;
    if (behind && quarantine === null) {
      this.deps.log.warn(
        { worker_id: id, version: version ?? null, fleet_version: fleet },
        'engine below the fleet version: quarantined until a refit brings it up',
      );
      actor.send({ type: 'quarantine.set', reason: 'behind_fleet' });
    } else if (!behind && quarantine === 'behind_fleet') actor.send({ type: 'quarantine.clear' });
  }

  /** Another replica owns the engine now: its actor stops here, its client stays for routing. */
  private disown(id: string): void {
    const owned = this.owned.get(id);
    if (!owned) return;
    this.owned.delete(id);
    this.states.records?.forget(id);
    this.commands.pausedBy.delete(id);
    this.generation++;
    owned.cmdSub.unsubscribe();
    owned.actor.stop();
    this.commands.abandon(id, owned.lane);
  }

  private replaced(prev: Worker, next: Worker): void {
    if (!this.links.has(next.id)) return this.host(next);
    this.links.replace(prev, next);
    const owned = this.owned.get(next.id);
    if (!owned) return;
    const label = mergedLabels(next).weight_version;
    const versionChanged = label !== owned.seededLabel;
    owned.seededLabel = label;
    // The discovery this triggers is a registration: label seeding rules, caller labels win.
    owned.discoveries = 0;
    owned.actor.send({ type: 'registration.changed', seedVersion: seedFrom(label), versionChanged });
  }

  private async unhost(id: string): Promise<void> {
    const link = this.links.get(id);
    if (!link) return;
    const url = link.url;
    // A removed engine's record goes with it (its owner removes it).
    if (this.owned.has(id) && !this.closing) this.states.records?.remove(id);
    this.remotes.forget(id);
    this.disown(id);
    this.generation++;
    // The engine's gauges go only when no DP rank of it is left.
    const base = baseUrlOf(url).baseUrl;
    const engineGone = this.deps.registry.siblings(base).length === 0;
    if (engineGone) this.states.forgetEngine(base);
    this.deps.metrics.forget(url, engineGone ? base : undefined);
    await this.links.remove(id);
  }
}
