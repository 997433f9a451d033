// The benchmark's child processes: a JSON-lines child wrapper that dies with the run (setpriv's
// parent-death signal) and starts with its open-file limit raised to the hard limit, the engine
// fleet (one or several sim-fleet processes) and gateway launchers, registration, and /proc
// readings (CPU, RSS, open-file limits). Shared by every suite; it never measures anything itself.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants, openSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import type { TagStats } from './sim-fleet.ts';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The first of `paths` that is an executable file, if any. */
export function findExecutable(paths: string[]): string | undefined {
  return paths.find((p) => {
    try {
      accessSync(p, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const SETPRIV = findExecutable(['/usr/bin/setpriv', '/bin/setpriv']);
const SH = findExecutable(['/bin/sh', '/usr/bin/sh']);
// A fleet of thousands of engines needs thousands of sockets in one process: the soft open-file
// limit goes up to the hard one (a no-op where it already is), then the shell execs node, so the
// pid, the parent-death signal and the stdio stay those of the process measured.
const RAISE_FD_LIMIT = 'ulimit -S -n "$(ulimit -H -n)" 2>/dev/null; exec "$0" "$@"';

/** A child process that speaks JSON lines on stdout; stderr goes to a log file. */
export class Child {
  private readonly proc: ChildProcess;
  private readonly events: Array<Record<string, unknown>> = [];
  private wake: (() => void) | undefined;
  private readonly exited: Promise<void>;
  private exitNote = '';

  constructor(
    readonly name: string,
    args: string[],
    readonly logPath: string,
    env: NodeJS.ProcessEnv,
  ) {
    const fd = openSync(logPath, 'a');
    const node = SH ? [SH, '-c', RAISE_FD_LIMIT, process.execPath, ...args] : [process.execPath, ...args];
    const [cmd, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'TERM', ...node]] : [node[0]!, node.slice(1)];
    this.proc = spawn(cmd, argv, { cwd: ROOT, env, stdio: ['pipe', 'pipe', fd] });
    closeSync(fd);
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        return; // not ours (a stray print); the log file has stderr
      }
      this.wake?.();
    });
    this.exited = new Promise((resolve) =>
      this.proc.once('exit', (code, signal) => {
        this.exitNote = `${this.name} exited (${signal ?? code}); see ${this.logPath}`;
        this.wake?.();
        resolve();
      }),
    );
  }

  /** The next line whose `event` is `event`, waiting at most timeoutMs. */
  async next(event: string, timeoutMs: number): Promise<Record<string, unknown>> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const i = this.events.findIndex((e) => e.event === event);
      if (i >= 0) return this.events.splice(i, 1)[0]!;
      if (this.exitNote) throw new Error(this.exitNote);
      const left = until - Date.now();
      if (left <= 0) throw new Error(`${this.name}: no ${event} line within ${timeoutMs} ms; see ${this.logPath}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  send(line: unknown): void {
    this.proc.stdin?.write(`${JSON.stringify(line)}\n`);
  }

  /** SIGKILL at once (a crash, no clean shutdown); resolves once the process is gone. */
  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
    this.proc.stdin?.destroy();
  }

  /** SIGTERM, then SIGKILL after a grace; resolves once the process is gone. */
  async stop(graceMs = 10_000): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), graceMs);
      await this.exited;
      clearTimeout(t);
    }
    this.proc.stdin?.destroy();
  }
}

export const live = new Set<Child>();

export function childEnv(): NodeJS.ProcessEnv {
  // A gateway setting left in the caller's environment must not change what is measured.
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('RLGATE_') || k === 'RLGATE_NATS_SERVER'));
}

/** Engines per sim-fleet process: with a 20,000-fd limit, 2,500 listeners and their connections fit. */
export const ENGINES_PER_FLEET_PROCESS = 2500;

/** The engine fleet: one or several sim-fleet processes, their URLs merged in order. */
export interface Fleet {
  urls: string[];
  children: Child[];
  /** Each process's soft open-file limit, from /proc. */
  fdLimits: Array<number | null>;
  /** Engine-side timings of the tagged requests since the last call, merged over the processes. */
  stats(): Promise<Record<string, TagStats>>;
  stop(): Promise<void>;
}

/**
 * N SGLang simulators, in ceil(N / 2,500) sim-fleet children started at once (split evenly);
 * `extra` goes to sim-fleet.ts (e.g. `--token-rate`). One that fails to start stops the others.
 */
export async function startFleet(count: number, logDir: string, extra: string[] = [], label = String(count), timeoutMs = 30_000 + count * 20): Promise<Fleet> {
  const parts = Math.ceil(count / ENGINES_PER_FLEET_PROCESS);
  const sizes = Array.from({ length: parts }, (_, i) => Math.floor(count / parts) + (i < count % parts ? 1 : 0));
  const children = sizes.map((n, i) => {
    const name = parts === 1 ? label : `${label}-${i}`;
    const child = new Child(
      `sim-fleet(${name})`,
      ['--import', 'tsx', 'bench/sim-fleet.ts', '--count', String(n), ...extra],
      join(logDir, `fleet-${name}.log`),
      childEnv(),
    );
    live.add(child);
    return child;
  });
  const stop = async () => {
    await Promise.allSettled(children.map((c) => c.stop()));
    for (const c of children) live.delete(c);
  };
  const lines = await Promise.allSettled(children.map((c) => c.next('listening', timeoutMs)));
  const failed = lines.find((l): l is PromiseRejectedResult => l.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  const ok = lines.map((l) => (l as PromiseFulfilledResult<Record<string, unknown>>).value);
  return {
    urls: ok.flatMap((l) => l.urls as string[]),
    children,
    fdLimits: children.map((c) => fdLimitOf(c.pid)),
    stats: async () =>
      mergeTagStats(
        await Promise.all(
          children.map(async (c) => {
            c.send({ cmd: 'stats' });
            return (await c.next('stats', 30_000)).tags as Record<string, TagStats>;
          }),
        ),
      ),
    stop,
  };
}

/** One tag's timings from several fleet processes: legs added, the slowest kept, spans on the wall clock. */
function mergeTagStats(parts: Array<Record<string, TagStats>>): Record<string, TagStats> {
  if (parts.length === 1) return parts[0]!;
  const out: Record<string, TagStats> = {};
  for (const part of parts) {
    for (const [tag, t] of Object.entries(part)) {
      const a = out[tag];
      if (!a) {
        out[tag] = { ...t };
        continue;
      }
      a.n += t.n;
      a.max_service_ms = Math.max(a.max_service_ms, t.max_service_ms);
      a.first_ms = Math.min(a.first_ms, t.first_ms);
      a.last_ms = Math.max(a.last_ms, t.last_ms);
      a.span_ms = Math.round((a.last_ms - a.first_ms) * 1000) / 1000;
    }
  }
  return out;
}

/** The product CLI (`rlgate gateway`, RL on) with its embedded nats-server; `flags` are added. */
export async function startGateway(
  flags: string[],
  logDir: string,
  profileDir: string | undefined,
  label: string,
): Promise<{ child: Child; url: string; natsUrl: string | undefined }> {
  const node = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  // One process unless a suite asks for more (`--processes`, later flags win): the suites measure one replica.
  const all = ['--host', '127.0.0.1', '--port', '0', '--enable-rl', '--processes', '1', ...flags];
  const child = new Child('gateway', [...node, '--import', 'tsx', 'src/cli/main.ts', 'gateway', ...all], join(logDir, `gateway-${label}.log`), childEnv());
  live.add(child);
  // Several processes (--processes) each load the sources through tsx before the line comes.
  const line = await child.next('listening', flags.includes('--processes') ? 180_000 : 60_000);
  return { child, url: line.url as string, natsUrl: typeof line.nats_url === 'string' ? line.nats_url : undefined };
}

export async function registerAll(gatewayUrl: string, urls: string[]): Promise<void> {
  for (const url of urls) {
    const res = await request(`${gatewayUrl}/workers`, { method: 'POST', body: JSON.stringify({ url }), headers: { 'content-type': 'application/json' } });
    const text = await res.body.text();
    if (res.statusCode !== 202) throw new Error(`POST /workers ${url} answered ${res.statusCode}: ${text}`);
  }
  const until = Date.now() + 30_000 + urls.length * 200;
  let last = '';
  while (Date.now() < until) {
    const res = await request(`${gatewayUrl}/v1/rl/workers`);
    const body = (await res.body.json()) as { workers?: Array<{ health: string }> };
    const rows = body.workers ?? [];
    const ready = rows.filter((r) => r.health === 'ready').length;
    if (rows.length === urls.length && ready === urls.length) return;
    last = `${ready}/${rows.length} ready of ${urls.length}`;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`engines not ready in time: ${last}`);
}

export function machineFacts() {
  const git = (args: string[]) => {
    try {
      return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return '';
    }
  };
  const commit = git(['rev-parse', '--short', 'HEAD']) || 'unknown';
  const dirty = git(['status', '--porcelain', '--untracked-files=no']) !== '';
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpu_model: cpus[0]?.model.trim() ?? 'unknown',
    total_mem_gib: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    commit: dirty ? `${commit} (with uncommitted changes)` : commit,
    loadavg_start: loadavg(),
  };
}

// Asked once, when first needed: loading this module (e.g. for --help) starts no process.
let clkTck: number | undefined;
function ticksPerSecond(): number {
  if (clkTck === undefined) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  return clkTck;
}

/** user + system CPU of a process from /proc (Linux), ms; the fields after `(comm)`. */
export function procStat(pid: number): { ppid: number; cpuMs: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), cpuMs: ((Number(f[11]) + Number(f[12])) * 1000) / ticksPerSecond() };
  } catch {
    return undefined;
  }
}

/** The first child process of `pid` (the gateway's embedded nats-server), from /proc. */
export function firstChildPid(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map(Number)
      .find((p) => p !== pid && procStat(p)?.ppid === pid);
  } catch {
    return undefined;
  }
}

/** Resident memory of a process (VmRSS from /proc/<pid>/status), MiB; undefined when it is gone. */
export function rssMiB(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Math.round((Number(kb) / 1024) * 10) / 10;
  } catch {
    return undefined;
  }
}

/** The soft open-file limit of a process (/proc/<pid>/limits); null when unlimited or unreadable. */
export function fdLimitOf(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const row = readFileSync(`/proc/${pid}/limits`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = row?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft === undefined || soft === 'unlimited' ? null : Number(soft);
  } catch {
    return null;
  }
}

/** Open file descriptors of a process right now (/proc/<pid>/fd); undefined when unreadable. */
export function openFds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return undefined;
  }
}

/** CPU ms so far of a process's main thread alone (/proc/<pid>/task/<pid>/stat): the rest is GC helpers and the libuv pool. */
export function mainThreadCpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / ticksPerSecond();
  } catch {
    return undefined;
  }
}

/** CPU ms so far of the gateway, its nats-server (its child), the fleet's processes, `extra` and this client. */
export function cpuSampler(
  gatewayPid: number | undefined,
  fleetPids: Array<number | undefined>,
  extra: Record<string, number | undefined> = {},
): () => Record<string, number> {
  const natsPid = firstChildPid(gatewayPid);
  return () => {
    const out: Record<string, number> = {};
    const add = (name: string, pid: number | undefined) => {
      const s = pid === undefined ? undefined : procStat(pid);
      if (s) out[name] = s.cpuMs;
    };
    add('gateway', gatewayPid);
    add('nats_server', natsPid);
    const engines = fleetPids.map((p) => (p === undefined ? undefined : procStat(p)?.cpuMs)).filter((v): v is number => v !== undefined);
    if (engines.length) out.engines = engines.reduce((a, b) => a + b, 0);
    for (const [name, pid] of Object.entries(extra)) add(name, pid);
    const own = process.cpuUsage();
    out.client = (own.user + own.system) / 1000;
    return out;
  };
}

export function loadavg(): number[] {
  return os.loadavg().map((v) => Math.round(v * 100) / 100);
}
