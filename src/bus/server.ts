// Spawns and stops one embedded `nats-server` (the system binary, Debian package `nats-server`)
// with JetStream, bound to 127.0.0.1 only. It owns the child process and its temp dir; it never
// speaks the NATS protocol beyond a readiness probe (connections live in connection.ts).
//
// Supervision: a server that exits without stop() is started again on the same port and store dir,
// after a short backoff; `onEvent` hears of it. stop() ends the supervision.
//
// Lifetime guarantee: stop() sends SIGTERM, then SIGKILL after a grace, and removes the temp dir.
// If our process exits without stop(), an 'exit' hook SIGKILLs every live server and removes its
// temp dir. If our process dies without running JS (SIGKILL, crash, unhandled signal), the child
// still dies when `setpriv` (util-linux) is present: it is exec'd with a parent-death signal
// (SIGTERM). Linux ties that signal to the spawning *thread*, so spawn from the main thread, not a
// worker_thread. Without setpriv only the 'exit' hook applies (`deathGuard` says which one).

import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';

export interface EmbeddedNatsOptions {
  host?: '127.0.0.1';
  /** Client port; 0 or absent picks a free one (and retries if another process wins the race). */
  port?: number;
  /** HTTP monitor port; absent = no monitor, 0 = pick a free one. */
  monitorPort?: number;
  /** JetStream store; default a fresh temp dir removed by stop(). A given dir is never removed. */
  storeDir?: string;
  /** Largest message in bytes (default 8 MiB: fan-out replies carry 1 MiB engine bodies). */
  maxPayload?: number;
  serverName?: string;
  /** Receives every log line the server prints; by default only the last lines are kept. */
  log?: (line: string) => void;
  /** How long to wait for readiness (default 15 s). */
  readyTimeoutMs?: number;
  /** Start the server again when it exits without stop() (default true). */
  restart?: boolean;
  /** Told when the server exits unexpectedly and when it is (or cannot be) started again. */
  onEvent?: (event: NatsServerEvent) => void;
}

/** What the supervision of the embedded server reports. */
export type NatsServerEvent =
  | { type: 'exited'; pid: number; code: number | null; signal: NodeJS.Signals | null; restartInMs: number }
  | { type: 'restarted'; pid: number }
  | { type: 'restart_failed'; error: Error; retryInMs: number };

export interface EmbeddedNats {
  /** `nats://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** The running child's pid; a new one after each restart. */
  readonly pid: number;
  /** `http://127.0.0.1:<port>` when a monitor port was asked for. */
  readonly monitorUrl: string | undefined;
  /** Our temp dir (config file, default store); removed by stop(). */
  readonly dir: string;
  readonly storeDir: string;
  /** Which mechanism kills the child if our process dies without calling stop(). */
  readonly deathGuard: 'pdeathsig' | 'exit-hook';
  stop(): Promise<void>;
}

export const DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024;
const HOST = '127.0.0.1';
const STOP_GRACE_MS = 5_000;
const PORT_RACE_ATTEMPTS = 5;
const LOG_TAIL_LINES = 40;
const RESTART_FIRST_MS = 200;
const RESTART_MAX_MS = 5_000;
// A server that ran this long before dying was healthy: its restart starts the backoff over.
const HEALTHY_RUN_MS = 30_000;

/** The server binary is not installed (or RLGATE_NATS_SERVER points at nothing runnable). */
export class NatsServerNotFound extends Error {
  override readonly name = 'NatsServerNotFound';
  readonly code = 'nats_server_not_found';
}

/** The server exited or never became ready; the message carries the tail of its log. */
export class NatsServerStartFailed extends Error {
  override readonly name = 'NatsServerStartFailed';
  readonly code = 'nats_server_start_failed';
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function findOnPath(name: string, env: NodeJS.ProcessEnv): string | undefined {
  const dirs = [...(env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/local/bin'];
  return dirs
    .filter(Boolean)
    .map((d) => join(d, name))
    .find(isExecutable);
}

/**
 * Where the binary is: RLGATE_NATS_SERVER if set (authoritative: no fallback, so a wrong value is
 * noticed), else PATH, /usr/sbin, /usr/local/sbin, /usr/local/bin. scripts/ensure-deps.sh mirrors it.
 */
export function findNatsServer(env: NodeJS.ProcessEnv = process.env): string {
  const override = env.RLGATE_NATS_SERVER;
  if (override) {
    if (isExecutable(override)) return override;
    throw new NatsServerNotFound(
      `RLGATE_NATS_SERVER=${override} is not an executable nats-server; unset it or install the ` + `Debian package: apt-get install nats-server`,
    );
  }
  const found = findOnPath('nats-server', env);
  if (found) return found;
  throw new NatsServerNotFound(
    'nats-server not found (searched PATH, /usr/sbin, /usr/local/sbin, /usr/local/bin); install the ' +
      'Debian package: apt-get install nats-server (or set RLGATE_NATS_SERVER to the binary)',
  );
}

/** A port nobody listens on right now. Another process may take it before we use it (see retry). */
export function pickFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('could not read a free port'))));
    });
  });
}

// Every server not yet stopped, so that the 'exit' hook can kill what stop() never reached.
interface Live {
  child: ChildProcess;
  dir: string;
}
const live = new Set<Live>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' handlers must be synchronous: signal, then remove what we own.
  process.on('exit', () => {
    for (const l of live) {
      if (l.child.exitCode === null && l.child.signalCode === null) l.child.kill('SIGKILL');
      rmSync(l.dir, { recursive: true, force: true, maxRetries: 2 });
    }
    live.clear();
  });
}

const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find(isExecutable);
let nameCounter = 0;

export async function startEmbeddedNats(opts: EmbeddedNatsOptions = {}): Promise<EmbeddedNats> {
  const bin = findNatsServer();
  const dir = mkdtempSync(join(tmpdir(), 'rlgate-nats-'));
  const storeDir = opts.storeDir ?? join(dir, 'store');
  const serverName = opts.serverName ?? `rlgate_${process.pid}_${++nameCounter}`;
  const maxPayload = opts.maxPayload ?? DEFAULT_MAX_PAYLOAD;
  const autoPort = !opts.port || opts.monitorPort === 0;
  try {
    for (let attempt = 1; ; attempt++) {
      const port = opts.port || (await pickFreePort());
      const monitorPort = opts.monitorPort === undefined ? undefined : opts.monitorPort || (await pickFreePort());
      try {
        return await launch({ bin, dir, storeDir, serverName, maxPayload, port, monitorPort, opts });
      } catch (err) {
        const raced = err instanceof NatsServerStartFailed && /address already in use/.test(err.message);
        if (!(raced && autoPort && attempt < PORT_RACE_ATTEMPTS)) throw err;
      }
    }
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

interface LaunchPlan {
  bin: string;
  dir: string;
  storeDir: string;
  serverName: string;
  maxPayload: number;
  port: number;
  monitorPort: number | undefined;
  opts: EmbeddedNatsOptions;
}

/** One running child: the process, its exit, and its entry in the exit hook's set. */
interface Running {
  child: ChildProcess;
  exited: Promise<void>;
  entry: Live;
}

/** Spawns one nats-server for the plan and waits until it is ready; a child that is not is killed. */
async function spawnServer(p: LaunchPlan): Promise<Running> {
  // max_payload has no flag; the monitor goes in the file too so it is pinned to loopback.
  const conf = join(p.dir, 'nats.conf');
  const lines = [`max_payload: ${p.maxPayload}`];
  if (p.monitorPort !== undefined) lines.push(`http: "${HOST}:${p.monitorPort}"`);
  writeFileSync(conf, lines.join('\n') + '\n');

  const args = ['-c', conf, '-js', '-a', HOST, '-p', String(p.port), '-sd', p.storeDir];
  args.push('--server_name', p.serverName);
  const [cmd, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'TERM', p.bin, ...args]] : [p.bin, args];
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });

  const tail: string[] = [];
  const onLine = (line: string) => {
    tail.push(line);
    if (tail.length > LOG_TAIL_LINES) tail.shift();
    p.opts.log?.(line);
  };
  for (const stream of [child.stdout, child.stderr]) {
    if (stream) createInterface({ input: stream }).on('line', onLine);
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));

  const entry: Live = { child, dir: p.dir };
  live.add(entry);
  installExitHook();

  const failed = (why: string) => new NatsServerStartFailed(`nats-server ${why} (port ${p.port}):\n${tail.join('\n')}`);
  const controller = new AbortController();
  try {
    await Promise.race([
      waitReady(p.port, p.monitorPort, controller.signal),
      exited.then(() => Promise.reject(failed(`exited with ${child.exitCode ?? child.signalCode}`))),
      spawnError.then((e) => Promise.reject(failed(`could not be spawned: ${e.message}`))),
      delay(p.opts.readyTimeoutMs ?? 15_000, controller.signal).then(() => Promise.reject(failed('was not ready in time'))),
    ]);
  } catch (err) {
    await terminate(child, exited);
    live.delete(entry);
    throw err;
  } finally {
    controller.abort();
  }

  // A forgotten server must not keep our process alive: the 'exit' hook reaps it instead.
  child.unref();
  for (const s of [child.stdout, child.stderr]) (s as { unref?: () => void } | null)?.unref?.();
  return { child, exited, entry };
}

/**
 * The first server is up: from here on a child that exits without stop() is started again on the
 * same port and store (clients reconnect to the same URL, JetStream data survives), after a
 * backoff that grows while restarts keep failing or the server keeps dying young.
 */
async function launch(p: LaunchPlan): Promise<EmbeddedNats> {
  let current = await spawnServer(p);
  let stopped = false;
  let reviving: Promise<void> | undefined;
  let attempt = 0; // restarts in a row that failed, or whose server died young
  const backoff = new AbortController(); // stop() cuts a pending wait short
  const emit = (event: NatsServerEvent) => {
    try {
      p.opts.onEvent?.(event);
    } catch {
      // a listener's failure must not end the supervision
    }
  };

  const supervise = (run: Running) => {
    const startedAt = Date.now();
    void run.exited.then(() => {
      if (stopped || run !== current || p.opts.restart === false) return;
      live.delete(run.entry);
      if (Date.now() - startedAt >= HEALTHY_RUN_MS) attempt = 0;
      reviving = revive(run).finally(() => (reviving = undefined));
    });
  };

  const revive = async (dead: Running) => {
    let waitMs = restartDelay(attempt++);
    emit({ type: 'exited', pid: dead.child.pid as number, code: dead.child.exitCode, signal: dead.child.signalCode, restartInMs: waitMs });
    for (;;) {
      await backoffWait(waitMs, backoff.signal);
      if (stopped) return;
      try {
        current = await spawnServer(p);
      } catch (err) {
        if (stopped) return;
        waitMs = restartDelay(attempt++);
        emit({ type: 'restart_failed', error: err as Error, retryInMs: waitMs });
        continue;
      }
      emit({ type: 'restarted', pid: current.child.pid as number });
      supervise(current);
      return;
    }
  };
  supervise(current);

  let stopping: Promise<void> | undefined;
  return {
    url: `nats://${HOST}:${p.port}`,
    port: p.port,
    get pid() {
      return current.child.pid as number;
    },
    monitorUrl: p.monitorPort === undefined ? undefined : `http://${HOST}:${p.monitorPort}`,
    dir: p.dir,
    storeDir: p.storeDir,
    deathGuard: SETPRIV ? 'pdeathsig' : 'exit-hook',
    stop() {
      stopping ??= (async () => {
        stopped = true;
        backoff.abort();
        await reviving; // a restart in progress finishes (or fails) first, so its child is ours to end
        await terminate(current.child, current.exited);
        live.delete(current.entry);
        await rm(p.dir, { recursive: true, force: true, maxRetries: 3 });
      })();
      return stopping;
    },
  };
}

/** Resolves after `ms`, or at once when `signal` aborts (stop() must not wait out a backoff). */
function backoffWait(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    t.unref(); // a server being restarted must not keep the process alive on its own
    signal.addEventListener('abort', done, { once: true });
  });
}

/** 200 ms, doubling per restart in a row, at most 5 s. */
function restartDelay(attempt: number): number {
  return Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** attempt);
}

/** SIGTERM (nats-server shuts JetStream down cleanly), SIGKILL if it lingers past the grace. */
async function terminate(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  child.kill('SIGTERM');
  const controller = new AbortController();
  const timedOut = await Promise.race([exited.then(() => false), delay(STOP_GRACE_MS, controller.signal).then(() => true)]);
  controller.abort();
  if (timedOut) {
    child.kill('SIGKILL');
    await exited;
  }
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    // The listener goes when the timer fires: waitReady's polls share one signal, and would
    // otherwise pile one listener each on it (a MaxListenersExceededWarning after 200 ms).
    const onAbort = () => clearTimeout(t);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Polls until the server answers: the monitor's JetStream health if any, else a client INFO line. */
async function waitReady(port: number, monitorPort: number | undefined, signal: AbortSignal) {
  while (!signal.aborted) {
    const ok = monitorPort === undefined ? await probeInfo(port) : await probeHealth(monitorPort);
    if (ok) return;
    await delay(20, signal);
  }
}

async function probeHealth(monitorPort: number): Promise<boolean> {
  try {
    const res = await fetch(`http://${HOST}:${monitorPort}/healthz?js-enabled-only=true`, {
      signal: AbortSignal.timeout(1_000),
    });
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}

// nats-server starts accepting clients only after JetStream is enabled, so the INFO line that
// greets a new connection means the whole server is up.
function probeInfo(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: HOST, port });
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(1_000, () => done(false));
    sock.once('error', () => done(false));
    sock.once('data', (chunk) => done(chunk.toString('latin1').startsWith('INFO ')));
  });
}
