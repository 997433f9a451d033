// The composition root of one gateway replica: joins (or embeds) NATS, builds the registry,
// engine host, control plane, refit service and HTTP app, and listens. `close()` takes it all
// down in reverse order; nothing is left running. The CLI, the demo and the tests all start
// gateways through here.

import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { bucketTimeoutFor, openBuckets } from '../bus/buckets.ts';
import { whilePlacing } from '../bus/placement.ts';
import { RefitEventLog } from '../bus/refit-events.ts';
import { RefitQueue } from '../bus/refit-queue.ts';
import { subjects } from '../bus/subjects.ts';
import { GatewayError } from '../api/errors.ts';
import type { GatewayConfig } from '../config/gateway-config.ts';
import { Dispatcher } from '../control/dispatch.ts';
import { LegRunner } from '../control/leg-runner.ts';
import { OutcomeLog } from '../control/outcome-log.ts';
import { Passthrough } from '../control/passthrough.ts';
import { runShare, serveReplicaCommands } from '../control/share.ts';
import { ControlClient } from '../engines/control-client.ts';
import { Cancellations } from '../fleet/cancellations.ts';
import { EngineHost, engineTimings } from '../fleet/engine-host.ts';
import { FleetFeed } from '../fleet/fleet-feed.ts';
import { FleetView } from '../fleet/fleet-view.ts';
import { RoutingUsage, routingSource } from '../fleet/routing-usage.ts';
import { KvFeed } from '../fleet/kv-feed.ts';
import { KvIndex } from '../fleet/kv-index.ts';
import { LeaseFence } from '../fleet/lease-fence.ts';
import { Ownership } from '../fleet/ownership.ts';
import { PauseReconciler } from '../fleet/pause-reconciler.ts';
import { Registry } from '../fleet/registry.ts';
import { RegistrySync } from '../fleet/registry-sync.ts';
import { createPolicy, readsKvEvents } from '../fleet/policies/catalogue.ts';
import { Router } from '../fleet/router.ts';
import { onMixedComparison } from '../fleet/versions.ts';
import { buildApp } from '../http/app.ts';
import type { Services } from '../http/services.ts';
import { createLogger, type Logger } from '../obs/logger.ts';
import { Metrics } from '../obs/metrics.ts';
import { redactUrl } from '../obs/redact-url.ts';
import { defaultDeadlines } from '../refit/deadlines.ts';
import { RefitJournals } from '../refit/journals.ts';
import { StaleGuard } from '../relay/stale-guard.ts';
import { VersionPins } from '../fleet/version-pins.ts';
import { serveRefitRequests } from '../refit/nats-front.ts';
import { pauseHolds, watchLatePauses } from '../refit/pause-holds.ts';
import { RefitPublisher } from '../refit/publisher.ts';
import { ResumesOwed } from '../refit/resumes-owed.ts';
import { RefitRunner } from '../refit/runner.ts';
import { RefitService } from '../refit/service.ts';
import { RefitWorker } from '../refit/worker.ts';
import { joinBus } from './bus-join.ts';
import { FdBudget } from './fd-limit.ts';
import { runCleanups } from './shutdown.ts';

/** How long a starting replica waits for a forming NATS cluster to place its streams. */
const PLACEMENT_WAIT_MS = 60_000;

/** Pending connections the kernel may queue for accept (capped by net.core.somaxconn). */
const LISTEN_BACKLOG = 65_535;

export interface Gateway {
  /** http://host:port the gateway listens on. */
  url: string;
  port: number;
  /** The NATS server(s) joined, with any credentials masked. */
  natsUrl: string;
  replicaId: string;
  services: Services;
  app: FastifyInstance;
  close(): Promise<void>;
}

export async function startGateway(config: GatewayConfig, opts: { log?: Logger } = {}): Promise<Gateway> {
  const log = opts.log ?? createLogger({ level: config.logLevel });
  const replicaId = config.replicaId ?? randomBytes(4).toString('hex');
  const cleanups: Array<() => Promise<void> | void> = [];
  // Every step bounded by one deadline: a step waiting on a dead NATS server cannot hang shutdown.
  const close = () => runCleanups(cleanups, { timeoutMs: (config.shutdownTimeoutSecs ?? 30) * 1000, log });
  const leaseMs = config.leaseSecs * 1000;
  const child = (component: string) => log.child({ component });

  try {
    const { bus, natsUrl, maxPayload } = await joinBus(config, replicaId, log, cleanups);
    const subj = subjects(config.subjectRoot);
    // Comparing a numeric with a text version is legal (lexical order) but usually a trainer bug.
    cleanups.push(onMixedComparison((a, b) => log.warn({ a, b }, 'weight versions of mixed kinds (numeric and text) compared lexically; this is logged once')));
    const metrics = new Metrics({ rlEnabled: config.rl.enabled, processMetrics: true, prefix: config.metricsPrefix });
    // The fleet's shared state: every replica on this subject root reads and writes the same buckets.
    const placing = {
      timeoutMs: PLACEMENT_WAIT_MS,
      onRetry: (err: unknown) => log.warn({ err }, "the NATS cluster cannot place the gateway's streams yet; waiting for it"),
    };
    const buckets = await whilePlacing(() => openBuckets(bus.nc, config.subjectRoot, { timeoutMs: bucketTimeoutFor(leaseMs), inboxPrefix: bus.inboxPrefix }), {
      ...placing,
      what: 'its KV buckets',
    });
    const registry = new Registry(replicaId);
    // What each gRPC engine holds, from its own KV events, for the policies that read them.
    const kvIndex =
      config.kvEvents && readsKvEvents(config.routing.policy)
        ? new KvIndex({ clock: () => performance.now(), modelOf: (id) => registry.get(id)?.modelId })
        : undefined;
    const cancels = new Cancellations();
    cancels.listen(bus, subj, replicaId);
    cleanups.push(() => cancels.close());
    const control = new ControlClient();
    cleanups.push(() => control.close());
    // Closed until the first heartbeat lands, and before this replica's lease could lapse in others' eyes.
    const fence = new LeaseFence({ replicaId, leaseMs });
    cleanups.push(() => fence.close());
    const ackWaitMs = RefitQueue.ackWaitFor(leaseMs);
    // What this replica knows of every refit, and what it tells of the ones it runs: built before
    // everything that asks about refits (the ledger, the engine host, the runner, the front).
    // By two ack waits a live replica has taken over (and likely finished) what a cut-off one ran.
    const journals = new RefitJournals({ bucket: buckets.refits, modelOf: (id) => registry.get(id)?.modelId, fence, cutAnswerMs: 2 * ackWaitMs });
    const publisher = new RefitPublisher({ bus, subjects: subj, log: child('refit') });
    const host = new EngineHost({
      fence,
      replicaId,
      registry,
      bus,
      subjects: subj,
      control,
      cancels,
      metrics,
      log: child('engines'),
      records: buckets.engines,
      fleetVersionOf: (w) => journals.fleetVersion(w.modelId),
      timings: engineTimings(config),
    });
    cleanups.push(() => host.close());
    cleanups.push(await buckets.engines.watch((id, record) => host.setRemote(id, record)));
    const { owners, replicas } = buckets;
    const ownership = new Ownership({ replicaId, registry, owners, replicas, leaseMs, fence, log: child('ownership') });
    const registrySync = new RegistrySync({ replicaId, registry, bucket: buckets.workers, log: child('registry') });
    cleanups.push(() => registrySync.close());
    // Last out (it runs before the host closes): deleting the heartbeat hands the engines over at once.
    cleanups.push(() => ownership.close());
    cleanups.push(bus.onStatus((s) => ownership.busStatus(s.connected)));
    await ownership.start();
    await registrySync.start();
    const retryMs = config.retryIntervalSecs * 1000;
    const owed = new ResumesOwed({
      replicaId,
      bucket: buckets.owed,
      host,
      journals,
      timeoutSecs: config.rl.controlTimeoutSecs,
      log: child('refit'),
      alive: (replica) => ownership.alive(replica),
      intervalMs: Math.min(2_000, Math.max(200, retryMs)),
    });
    await owed.start();
    cleanups.push(() => owed.close());
    const replicaSub = serveReplicaCommands({ bus, subjects: subj, replicaId, host, cancels, log: new OutcomeLog() });
    cleanups.push(() => replicaSub.unsubscribe());
    // The policy's clock only measures intervals (tree eviction, idle keys): a monotonic one.
    const policy = createPolicy(config.routing, { clock: () => performance.now(), random: Math.random, kvIndex });
    // This replica's routing figures (decisions, answered tokens), shown in rows and gauges.
    const usage = new RoutingUsage();
    const view = new FleetView({ registry, host, kvBlocks: kvIndex && ((id) => kvIndex.blocksOf(id)), routing: routingSource(usage, policy) });
    // Read at scrape time, not per request: the hot path pays nothing for these gauges.
    metrics.collectWorkers(() => view.samples());
    // Engines this replica owns are called in-process; only other replicas' shares cross the bus.
    const dispatcher = new Dispatcher({
      bus,
      subjects: subj,
      registry,
      fence,
      alive: (replica) => ownership.aliveNow(replica),
      local: {
        replicaId,
        runOne: (id, call, signal) => host.run(id, call, signal),
        // In-process replies cannot be lost to the bus: no outcome log for them.
        runShare: (cmd, send, signal) => runShare(host, cmd, send, signal),
      },
    });
    const { controlTimeoutSecs, fanoutConcurrency } = config.rl;
    const legs = new LegRunner({
      dispatcher,
      timeoutSecs: controlTimeoutSecs,
      concurrency: fanoutConcurrency,
      maxCallBodyBytes: LegRunner.bodyBytesFor(maxPayload),
    });
    const passthrough = new Passthrough({ registry, view, dispatcher, legs, metrics, log: child('rl') });
    // Refits are durable work: queued in JetStream, run by one replica, journaled in KV, taken
    // over by another replica if that one dies (after the ack wait).
    const queue = await whilePlacing(() => RefitQueue.open(bus.nc, subj, { ackWaitMs }), { ...placing, what: 'the refit queue' });
    const refitEvents = await whilePlacing(() => RefitEventLog.open(bus.nc, subj), { ...placing, what: 'the refit event stream' });
    const runner = new RefitRunner({
      replicaId,
      fence,
      bucket: buckets.refits,
      journals,
      events: publisher,
      registry,
      view,
      legs,
      metrics,
      owed,
      ackWaitMs,
      log: child('refit'),
      deadlines: defaultDeadlines(controlTimeoutSecs),
      recordedControl: (id) => host.recordedControl(id),
      pausedBy: (id) => host.pausedBy(id),
      localLoad: (id) => host.load(id),
      ownersSettled: (ids, dead, timeoutMs) => ownership.settled(ids, dead, timeoutMs),
      quarantine: (id, reason) => host.setQuarantine(id, reason),
      alive: (replica) => ownership.aliveNow(replica),
    });
    const worker = new RefitWorker({ queue, runner, log: child('refit') });
    const refits = new RefitService({ view, legs, queue, journals, events: publisher, replicaId });
    await journals.start();
    cleanups.push(() => journals.close());
    // A pause that lands after everyone moved on is found and undone by the engine's owner.
    const reconciler = new PauseReconciler({
      registry,
      host,
      fence,
      timeoutSecs: controlTimeoutSecs,
      log: child('engines'),
      holds: pauseHolds(journals, host),
      intervalMs: Math.min(500, Math.max(200, retryMs)),
      windowMs: Math.min(60_000, controlTimeoutSecs * 1000) + leaseMs,
    });
    cleanups.push(watchLatePauses(journals, reconciler));
    reconciler.start();
    cleanups.push(() => reconciler.close());
    if (config.rl.enabled) await worker.start();
    // Shutdown lets running refits finish (and resume what they paused) while this replica still
    // answers its engines' commands: it stops taking refits, drains, and only then lets go.
    cleanups.push(() => {
      refits.drain();
      return worker.drain();
    });
    // Every replica routes, so every replica streams every gRPC engine's events (not only its own).
    if (kvIndex) {
      const kvFeed = new KvFeed({ registry, index: kvIndex, log: child('kv-events') });
      cleanups.push(() => kvFeed.close());
    }
    const router = new Router({
      registry,
      view,
      host,
      policy,
      usage,
      decisions: metrics,
      answers: metrics,
      draining: { any: () => journals.drainingAny(), has: (id) => journals.draining(id) },
      ...(config.rl.enabled ? { pins: new VersionPins(Date.now), pinning: () => journals.rolling(), groupSplit: () => metrics.groupVersionSplit() } : {}),
    });
    const feed = new FleetFeed({ bus, subjects: subj, registry, view });
    // Looked at only while a max-staleness request runs; the table's generations say when versions moved.
    const stale = new StaleGuard({ view, generation: () => registry.generation + host.generation, metrics });
    cleanups.push(() => stale.close());
    const services: Services = { config, log, metrics, registry, view, host, passthrough, refits, refitEvents, feed, router, bus, fence, stale };
    // Trainers on the bus: one replica answers each refit request.
    if (config.rl.enabled) {
      const sub = serveRefitRequests(bus, subj, refits);
      cleanups.push(() => sub.unsubscribe());
    }

    const app = await buildApp(services);
    cleanups.push(() => app.close());
    // A training step opens thousands of rollout connections at once: with Node's default backlog
    // (511) the kernel drops the SYNs past it and those clients wait out a retransmit (1 s, 3 s,
    // ...) before the gateway ever sees them. The kernel caps it at net.core.somaxconn.
    await app.listen({ host: config.host, port: config.port, backlog: LISTEN_BACKLOG });
    const port = (app.server.address() as AddressInfo).port;
    const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
    registerWorkerUrls(registry, config.workerUrls);
    new FdBudget(child('limits')).watch(registry);
    ownership.setUrl(url);
    log.info({ url, nats_url: redactUrl(natsUrl), replica_id: replicaId, rl: config.rl.enabled, policy: router.policyName }, 'gateway listening');
    return { url, port, natsUrl: redactUrl(natsUrl), replicaId, services, app, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The engines named on the command line (`--worker-urls`), registered as a POST /workers would. */
function registerWorkerUrls(registry: Registry, urls: readonly string[]): void {
  for (const url of urls) {
    try {
      registry.register({ url });
    } catch (err) {
      if (err instanceof GatewayError) throw new Error(`--worker-urls: ${err.message}`);
      throw err;
    }
  }
}
