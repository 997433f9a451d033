// `rlgate gateway` on every core: with `--processes N` (auto: one per core) the command's process
// becomes a supervisor that forks N gateway processes sharing one listening port (node:cluster; the
// supervisor accepts and hands connections round-robin), each a full replica on one NATS (the
// embedded nats-server is the supervisor's, started once). Replicas already share the fleet through
// NATS (registry, engine states, versions, refit journals, ownership), so every process routes to
// every engine and stamps every version. It never serves a request itself: it starts, watches
// (a process that dies is forked again), reports one `listening` line, and stops them all.

import cluster, { type Worker as ClusterWorker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { GatewayConfig } from '../config/gateway-config.ts';
import { startEmbeddedNats, type EmbeddedNats } from '../bus/server.ts';
import type { Logger } from '../obs/logger.ts';
import { redactUrl } from '../obs/redact-url.ts';
import { logNatsServerEvent } from './bus-events.ts';

/** What a gateway process tells the supervisor once it listens (over the cluster's IPC channel). */
export interface ProcessListening {
  type: 'rlgate:listening';
  url: string;
  replicaId: string;
}

/** Set in each gateway process's environment: its index, so its replica id and restarts are stable. */
export const PROCESS_INDEX_ENV = 'RLGATE_PROCESS_INDEX';
/** How long a restarted process waits after a crash, at least (a crash loop must not spin a core). */
const RESTART_DELAY_MS = 1_000;

/** The processes `config.processes` asks for: `auto` is one per core. */
export function processCount(config: Pick<GatewayConfig, 'processes'>): number {
  return config.processes === 'auto' ? availableParallelism() : Number(config.processes);
}

/** Whether this process is one of a supervisor's gateway processes. */
export function isGatewayProcess(): boolean {
  return cluster.isWorker && process.env[PROCESS_INDEX_ENV] !== undefined;
}

/**
 * A gateway process's own settings: the supervisor's NATS (when it embeds one); with a replica id
 * given, that id with the process's index (`gw-0`, `gw-1`...), so replica ids stay unique; the
 * `--worker-urls` for the first process only.
 */
export function processConfig(config: GatewayConfig, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const index = env[PROCESS_INDEX_ENV];
  if (index === undefined) return config;
  return {
    ...config,
    processes: '1',
    natsUrl: config.natsUrl ?? env.RLGATE_SUPERVISOR_NATS_URL,
    replicaId: config.replicaId === undefined ? undefined : `${config.replicaId}-${index}`,
    // Registered once, through the first process; every other one sees them in the shared registry.
    workerUrls: index === '0' ? config.workerUrls : [],
  };
}

/** Tells the supervisor this process listens. */
export function reportListening(url: string, replicaId: string): void {
  const msg: ProcessListening = { type: 'rlgate:listening', url, replicaId };
  process.send?.(msg);
}

export interface Supervisor {
  url: string;
  natsUrl: string;
  replicaIds: string[];
  /**
   * Stops every process (SIGTERM, each runs its own shutdown), then the embedded nats-server;
   * false when some process was still running at `timeoutMs` (it is SIGKILLed).
   */
  close(timeoutMs: number): Promise<boolean>;
}

/** Forks `count` gateway processes and resolves once every one listens. */
export async function superviseProcesses(config: GatewayConfig, count: number, log: Logger): Promise<Supervisor> {
  let nats: EmbeddedNats | undefined;
  let natsUrl = config.natsUrl;
  if (!natsUrl) {
    nats = await startEmbeddedNats({ log: (line) => log.debug({ component: 'nats-server' }, line), onEvent: logNatsServerEvent(log) });
    natsUrl = nats.url;
    log.info({ nats_url: natsUrl, nats_pid: nats.pid }, 'embedded nats-server started');
  }
  // Round-robin hand-off (Node's default off Windows): the kernel's own spreading of accepts among
  // processes sharing a socket is uneven, and connections are long-lived (keep-alive) here.
  cluster.schedulingPolicy = cluster.SCHED_RR;
  const workers = new Map<number, ClusterWorker>();
  let stopping = false;
  const listening = new Map<number, ProcessListening>();
  let ready: (() => void) | undefined;
  let failed: ((err: Error) => void) | undefined;
  const started = new Promise<void>((resolve, reject) => {
    ready = resolve;
    failed = reject;
  });

  const fork = (index: number) => {
    const env: Record<string, string> = { [PROCESS_INDEX_ENV]: String(index) };
    if (nats) env.RLGATE_SUPERVISOR_NATS_URL = nats.url;
    const w = cluster.fork(env);
    workers.set(index, w);
    w.on('message', (msg: ProcessListening) => {
      if (msg?.type !== 'rlgate:listening') return;
      listening.set(index, msg);
      log.info({ process: index, process_pid: w.process.pid, replica_id: msg.replicaId }, 'gateway process listening');
      if (listening.size === count) ready?.();
    });
    w.on('exit', (code, signal) => {
      if (workers.get(index) === w) workers.delete(index);
      if (stopping) return;
      if (listening.size < count && !listening.has(index)) {
        failed?.(new Error(`gateway process ${index} exited before listening (code ${code}, signal ${signal}); see its log above`));
        return;
      }
      // Its engines pass to the other replicas when its lease lapses; a new process joins as a new replica.
      log.error({ process: index, code, signal }, 'gateway process exited; starting another');
      listening.delete(index);
      setTimeout(() => {
        if (!stopping) fork(index);
      }, RESTART_DELAY_MS).unref();
    });
  };

  const close = async (timeoutMs: number) => {
    stopping = true;
    const exits = [...workers.values()].map(
      (w) =>
        new Promise<void>((resolve) => {
          if (w.isDead()) return resolve();
          w.once('exit', () => resolve());
          w.process.kill('SIGTERM');
        }),
    );
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([Promise.all(exits).then(() => true), new Promise<boolean>((r) => (timer = setTimeout(r, timeoutMs, false)))]);
    clearTimeout(timer);
    for (const w of workers.values()) if (!w.isDead()) w.process.kill('SIGKILL');
    await nats?.stop();
    return inTime;
  };

  for (let i = 0; i < count; i++) fork(i);
  try {
    await started;
  } catch (err) {
    await close(5_000);
    throw err;
  }
  const first = listening.get(0)!;
  return {
    url: first.url,
    natsUrl: redactUrl(natsUrl),
    replicaIds: [...listening.entries()].sort(([a], [b]) => a - b).map(([, l]) => l.replicaId),
    close,
  };
}
