// The composition root of one gateway replica: joins (or embeds) NATS, builds the registry,
// engine host, control plane, refit service and HTTP app, and listens. `close()` takes it all
// down in reverse order; nothing is left running. The CLI, the demo and the tests all start
// gateways through here.

import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { connectBus, type Bus, type BusSubscription } from '../bus/connection.ts';
import { natsConnectOptions } from '../bus/connect-options.ts';
import { startEmbeddedNats, type EmbeddedNats } from '../bus/server.ts';
import { openBuckets } from '../bus/buckets.ts';
import { whilePlacing } from '../bus/placement.ts';
import { subjects } from '../bus/subjects.ts';
import { Dispatcher } from '../control/dispatch.ts';
import { LegRunner } from '../control/leg-runner.ts';
import { Passthrough } from '../control/passthrough.ts';
import { ControlClient } from '../engines/control-client.ts';
import { EngineHost } from '../fleet/engine-host.ts';
import { FleetView } from '../fleet/fleet-view.ts';
import { Registry } from '../fleet/registry.ts';
import { RegistrySync } from '../fleet/registry-sync.ts';
import { FdBudget } from './fd-limit.ts';
import { Ownership } from '../fleet/ownership.ts';
import { LeaseFence } from '../fleet/lease-fence.ts';
import { PauseReconciler } from '../fleet/pause-reconciler.ts';
import { runShare, serveReplicaCommands } from '../control/share.ts';
import { OutcomeLog } from '../control/outcome-log.ts';
import { Router } from '../fleet/router.ts';
import { Cancellations } from '../fleet/cancellations.ts';
import { buildApp } from '../http/app.ts';
import { GatewayError } from '../api/errors.ts';
import type { Services } from '../http/services.ts';
import { createLogger, type Logger } from '../obs/logger.ts';
import { redactUrl } from '../obs/redact-url.ts';
import { Metrics } from '../obs/metrics.ts';
import { RefitJournals } from '../refit/journals.ts';
import { RefitPublisher } from '../refit/publisher.ts';
import { RefitService } from '../refit/service.ts';
import { RefitRunner } from '../refit/runner.ts';
import { RefitWorker } from '../refit/worker.ts';
import { RefitQueue } from '../bus/refit-queue.ts';
import { RefitEventLog } from '../bus/refit-events.ts';
import { FleetFeed } from '../fleet/fleet-feed.ts';
import { pausesInDoubt } from '../refit/journal.ts';
import { reportStatus } from '../refit/report.ts';
import { ResumesOwed } from '../refit/resumes-owed.ts';
import type { GatewayConfig } from '../config/gateway-config.ts';
import { onMixedComparison } from '../fleet/versions.ts';
import { runCleanups } from './shutdown.ts';
import { logBusStatus, logNatsServerEvent } from './bus-events.ts';
import { BODY_CAP } from '../engines/control-call.ts';
import type { RefitReply } from '../wire/refit-request.ts';

/** How long a starting replica waits for a forming NATS cluster to place its streams. */
const PLACEMENT_WAIT_MS = 60_000;

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

  try {
    let embedded: EmbeddedNats | undefined;
    let natsUrl = config.natsUrl;
    if (!natsUrl) {
      embedded = await startEmbeddedNats({ log: (line) => log.debug({ component: 'nats-server' }, line), onEvent: logNatsServerEvent(log) });
      cleanups.push(() => embedded!.stop());
      natsUrl = embedded.url;
      log.info({ nats_url: natsUrl, nats_pid: embedded.pid }, 'embedded nats-server started');
    }
    const bus: Bus = await connectBus({
      ...natsConnectOptions(natsUrl, config.nats),
      name: `rlgate-gateway-${replicaId}`,
      pingIntervalMs: config.natsPingIntervalSecs * 1000,
      onHandlerError: (err, subject) => log.warn({ err, subject }, 'bus handler failed'),
    });
    cleanups.push(() => bus.close());
    cleanups.push(logBusStatus(bus, log));

    const subj = subjects(config.subjectRoot);
    // Spec §12.2: comparing a numeric with a text version is legal but usually a trainer bug.
    cleanups.push(onMixedComparison((a, b) => log.warn({ a, b }, 'weight versions of mixed kinds (numeric and text) compared lexically; this is logged once')));
    const maxPayload = bus.nc.info?.max_payload ?? 0;
    if (maxPayload > 0 && maxPayload < 2 * BODY_CAP) {
      log.warn(
        { max_payload: maxPayload },
        'the NATS server max_payload is below 2 MiB: engine answers near the 1 MiB body cap cannot cross the bus; set max_payload to 8MB',
      );
    }
    const metrics = new Metrics({ rlEnabled: config.rl.enabled, processMetrics: true, prefix: config.metricsPrefix });
    // The fleet's shared state: every replica on this subject root reads and writes the same buckets.
    const placing = {
      timeoutMs: PLACEMENT_WAIT_MS,
      onRetry: (err: unknown) => log.warn({ err }, "the NATS cluster cannot place the gateway's streams yet; waiting for it"),
    };
    // A bucket request waits at most half a lease (1 to 5 s): see openBuckets.
    const kvTimeoutMs = Math.min(5_000, Math.max(1_000, (config.leaseSecs * 1000) / 2));
    const buckets = await whilePlacing(() => openBuckets(bus.nc, config.subjectRoot, { timeoutMs: kvTimeoutMs }), { ...placing, what: 'its KV buckets' });
    const registry = new Registry(replicaId);
    const cancels = new Cancellations();
    cancels.listen(bus, subj, replicaId);
    cleanups.push(() => cancels.close());
    const control = new ControlClient();
    cleanups.push(() => control.close());
    // Closed until the first heartbeat lands, and before this replica's lease could lapse in others' eyes.
    const fence = new LeaseFence({ replicaId, leaseMs: config.leaseSecs * 1000 });
    cleanups.push(() => fence.close());
    // The refit queue's ack wait, twice the lease (at least 5 s): a runner whose connection moves
    // to another node keeps its refit; one that died is replaced after it.
    const ackWaitMs = Math.max(5_000, 2 * config.leaseSecs * 1000);
    // What this replica knows of every refit, and what it tells of the ones it runs: built before
    // everything that asks about refits (the ledger, the engine host, the runner, the front).
    const journals = new RefitJournals({
      bucket: buckets.refits,
      modelOf: (id) => registry.get(id)?.modelId,
      // By two ack waits a live replica has taken over (and likely finished) what this one ran.
      fence,
      cutAnswerMs: 2 * ackWaitMs,
    });
    const publisher = new RefitPublisher({ bus, subjects: subj, log: log.child({ component: 'refit' }) });
    const host = new EngineHost({
      fence,
      replicaId,
      registry,
      bus,
      subjects: subj,
      control,
      cancels,
      metrics,
      log: log.child({ component: 'engines' }),
      records: buckets.engines,
      fleetVersionOf: (w) => journals.fleetVersion(w.modelId),
      timings: {
        probeIntervalMs: config.probeIntervalSecs * 1000,
        probeRate: Math.max(0, config.probeMaxRate),
        probeFailureThreshold: Math.max(1, config.probeFailureThreshold),
        retryIntervalMs: Math.max(100, config.retryIntervalSecs * 1000),
        discoveryTimeoutMs: Math.max(100, config.discoveryTimeoutSecs * 1000),
        breakerThreshold: Math.max(1, config.breakerThreshold),
        breakerCooldownMs: Math.max(100, config.breakerCooldownSecs * 1000),
      },
    });
    cleanups.push(() => host.close());
    const stopRecords = await buckets.engines.watch((id, record) => host.setRemote(id, record));
    cleanups.push(stopRecords);
    const ownership = new Ownership({
      replicaId,
      registry,
      owners: buckets.owners,
      replicas: buckets.replicas,
      leaseMs: config.leaseSecs * 1000,
      fence,
      log: log.child({ component: 'ownership' }),
    });
    const registrySync = new RegistrySync({ replicaId, registry, bucket: buckets.workers, log: log.child({ component: 'registry' }) });
    cleanups.push(() => registrySync.close());
    // Last out (it runs before the host closes): deleting the heartbeat hands the engines over at once.
    cleanups.push(() => ownership.close());
    cleanups.push(bus.onStatus((s) => ownership.busStatus(s.connected)));
    await ownership.start();
    await registrySync.start();
    const owed = new ResumesOwed({
      replicaId,
      bucket: buckets.owed,
      host,
      alive: (replica) => ownership.alive(replica),
      journals,
      timeoutSecs: config.rl.controlTimeoutSecs,
      intervalMs: Math.min(2_000, Math.max(200, config.retryIntervalSecs * 1000)),
      log: log.child({ component: 'refit' }),
    });
    await owed.start();
    cleanups.push(() => owed.close());
    const outcomeLog = new OutcomeLog();
    const replicaSub = serveReplicaCommands({ bus, subjects: subj, replicaId, host, cancels, log: outcomeLog });
    cleanups.push(() => replicaSub.unsubscribe());
    const view = new FleetView({ registry, host });
    // Read at scrape time, not per request: the hot path pays nothing for these gauges.
    metrics.collectWorkers(() =>
      registry.all().map((w) => {
        const e = view.engine(w);
        return { url: w.url, inflight: e.load, breaker: e.breaker };
      }),
    );
    // Engines this replica owns are called in-process; only other replicas' shares cross the bus.
    const dispatcher = new Dispatcher({
      bus,
      subjects: subj,
      registry,
      alive: (replica) => ownership.aliveNow(replica),
      fence,
      local: {
        replicaId,
        runOne: (id, call, signal) => host.run(id, call, signal),
        // In-process replies cannot be lost to the bus: no outcome log for them.
        runShare: (cmd, send, signal) => runShare(host, cmd, send, signal),
      },
    });
    const legs = new LegRunner({
      dispatcher,
      timeoutSecs: config.rl.controlTimeoutSecs,
      concurrency: config.rl.fanoutConcurrency,
      // base64 grows a body by 4/3; leave room for the call's other fields.
      maxCallBodyBytes: Math.floor(((maxPayload || 1024 * 1024) - 16 * 1024) * 0.75),
    });
    const passthrough = new Passthrough({ registry, view, dispatcher, legs, metrics, log: log.child({ component: 'rl' }) });
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
      log: log.child({ component: 'refit' }),
      deadlines: {
        pauseMs: Math.min(60_000, config.rl.controlTimeoutSecs * 1000),
        refitMs: config.rl.controlTimeoutSecs * 1000,
        verifyMs: Math.min(60_000, config.rl.controlTimeoutSecs * 1000),
        resumeMs: Math.min(60_000, config.rl.controlTimeoutSecs * 1000),
      },
      owed,
      ackWaitMs,
      recordedControl: async (id) => {
        const r = (await buckets.engines.get(id))?.value;
        return r ? { control: r.control, pausedBy: r.paused_by ?? undefined } : undefined;
      },
      pausedBy: (id) => host.pausedBy(id),
      ownersSettled: async (ids, dead, timeoutMs) => {
        const until = Date.now() + timeoutMs;
        const settled = () =>
          ids.every((id) => {
            const o = registry.get(id)?.owner;
            return !o || (o !== dead && ownership.alive(o));
          });
        while (!settled() && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      },
      quarantine: (id, reason) => host.setQuarantine(id, reason),
      alive: (replica) => ownership.aliveNow(replica),
    });
    const worker = new RefitWorker({ queue, runner, log: log.child({ component: 'refit' }) });
    const refits = new RefitService({ view, legs, queue, journals, events: publisher, replicaId });
    await journals.start();
    cleanups.push(() => journals.close());
    // A pause that lands after everyone moved on (its sender was cut off, died or gave up) is
    // found and undone by the engine's owner: engines a late pause may still reach are watched.
    const leaseMs = config.leaseSecs * 1000;
    const reconciler = new PauseReconciler({
      registry,
      host,
      fence,
      holds: {
        // A refit's journal says it runs, or the owner paused the engine for a refit whose report
        // this replica has not seen (its copy of the journals may lag).
        refit: (id) => {
          const by = host.pausedBy(id);
          return journals.holds(id) || (by !== undefined && by.startsWith('refit:') && !journals.done(by.slice('refit:'.length)));
        },
        operator: (id) => host.pausedBy(id) === 'operator',
      },
      intervalMs: Math.min(500, Math.max(200, config.retryIntervalSecs * 1000)),
      windowMs: Math.min(60_000, config.rl.controlTimeoutSecs * 1000) + leaseMs,
      timeoutSecs: config.rl.controlTimeoutSecs,
      log: log.child({ component: 'engines' }),
    });
    cleanups.push(
      journals.onJournal((j) => {
        if (pausesInDoubt(j))
          reconciler.watch(
            j.targets.filter((t) => !j.keep_paused.includes(t)),
            `refit ${j.id} had pauses in doubt`,
          );
      }),
    );
    reconciler.start();
    cleanups.push(() => reconciler.close());
    if (config.rl.enabled) await worker.start();
    // Shutdown lets running refits finish (and resume what they paused) while this replica still
    // answers its engines' commands: it stops taking refits, drains, and only then lets go.
    cleanups.push(() => {
      refits.drain();
      return worker.drain();
    });
    const subs: BusSubscription[] = [];
    const router = new Router({ registry, view, host });
    const feed = new FleetFeed({ bus, subjects: subj, registry, view });
    const services: Services = { config, log, metrics, registry, view, host, passthrough, refits, refitEvents, feed, router, bus, fence };

    if (config.rl.enabled) {
      // Trainers on the bus: one replica answers each refit request (queue group).
      subs.push(
        bus.respond(
          subj.refitRequest(),
          async (data) => {
            if ((data as { dry_run?: unknown } | null)?.dry_run === true) return { status: 200, plan: refits.plan(data) } satisfies RefitReply;
            const report = await refits.run(data, 'nats');
            return { status: reportStatus(report), report } satisfies RefitReply;
          },
          { queue: 'rlgate-refits' },
        ),
      );
    }
    cleanups.push(() => subs.forEach((s) => s.unsubscribe()));

    const app = await buildApp(services);
    cleanups.push(() => app.close());
    await app.listen({ host: config.host, port: config.port });
    const port = (app.server.address() as AddressInfo).port;
    const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;

    for (const workerUrl of config.workerUrls) {
      try {
        registry.register({ url: workerUrl });
      } catch (err) {
        if (err instanceof GatewayError) throw new Error(`--worker-urls: ${err.message}`);
        throw err;
      }
    }
    // The open-file limit against the fleet found at start, and as it grows.
    const fds = new FdBudget(log.child({ component: 'limits' }));
    fds.check(registry.size);
    registry.on('added', () => fds.check(registry.size));
    ownership.setUrl(url);
    natsUrl = redactUrl(natsUrl);
    log.info({ url, nats_url: natsUrl, replica_id: replicaId, rl: config.rl.enabled }, 'gateway listening');
    return { url, port, natsUrl, replicaId, services, app, close };
  } catch (err) {
    await close();
    throw err;
  }
}
