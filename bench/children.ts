// The benchmark's child processes: a JSON-lines child wrapper that dies with the run (setpriv's
// parent-death signal), the engine fleet and gateway launchers, registration, and /proc CPU
// readings. Shared by every suite; it never measures anything itself.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants, openSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

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

/** A child process that speaks JSON lines on stdout; stderr goes to a log file. */
export class Child {
  private readonly proc: ChildProcess;
  private readonly events: Array<Record<string, unknown>> = [];
  private wake: (() => void) | undefined;
  private readonly exited: Promise<void>;
  private exitNote = '';

  constructor(readonly name: string, args: string[], readonly logPath: string, env: NodeJS.ProcessEnv) {
    const fd = openSync(logPath, 'a');
    const [cmd, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'TERM', process.execPath, ...args]] : [process.execPath, args];
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
        this.wake = () => { clearTimeout(t); resolve(); };
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

/** N SGLang simulators in one child; `extra` goes to sim-fleet.ts (e.g. `--token-rate`). */
export async function startFleet(count: number, logDir: string, extra: string[] = [], label = String(count)): Promise<{ child: Child; urls: string[] }> {
  const child = new Child(`sim-fleet(${label})`, ['--import', 'tsx', 'bench/sim-fleet.ts', '--count', String(count), ...extra], join(logDir, `fleet-${label}.log`), childEnv());
  live.add(child);
  const line = await child.next('listening', 30_000 + count * 50);
  return { child, urls: line.urls as string[] };
}

/** The product CLI (`rlgate gateway`, RL on) with its embedded nats-server; `flags` are added. */
export async function startGateway(flags: string[], logDir: string, profileDir: string | undefined, label: string): Promise<{ child: Child; url: string }> {
  const node = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const all = ['--host', '127.0.0.1', '--port', '0', '--enable-rl', ...flags];
  const child = new Child('gateway', [...node, '--import', 'tsx', 'src/cli/main.ts', 'gateway', ...all], join(logDir, `gateway-${label}.log`), childEnv());
  live.add(child);
  const line = await child.next('listening', 60_000);
  return { child, url: line.url as string };
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

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** user + system CPU of a process from /proc (Linux), ms; the fields after `(comm)`. */
export function procStat(pid: number): { ppid: number; cpuMs: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), cpuMs: ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK };
  } catch {
    return undefined;
  }
}

/** CPU ms so far of the gateway, its nats-server (its child), the fleet, `extra` and this client. */
export function cpuSampler(gatewayPid: number | undefined, fleetPid: number | undefined, extra: Record<string, number | undefined> = {}): () => Record<string, number> {
  let natsPid: number | undefined;
  try {
    natsPid = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number).find((p) => p !== gatewayPid && procStat(p)?.ppid === gatewayPid);
  } catch {
    natsPid = undefined;
  }
  return () => {
    const out: Record<string, number> = {};
    const add = (name: string, pid: number | undefined) => {
      const s = pid === undefined ? undefined : procStat(pid);
      if (s) out[name] = s.cpuMs;
    };
    add('gateway', gatewayPid);
    add('nats_server', natsPid);
    add('engines', fleetPid);
    for (const [name, pid] of Object.entries(extra)) add(name, pid);
    const own = process.cpuUsage();
    out.client = (own.user + own.system) / 1000;
    return out;
  };
}

export function loadavg(): number[] {
  return os.loadavg().map((v) => Math.round(v * 100) / 100);
}
