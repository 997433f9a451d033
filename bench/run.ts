// `npm run bench [-- --sizes 2,12,64,256 ...]`: the fan-out benchmark run. For each fleet size
// it starts the engines (one sim-fleet child) and a gateway (one `rlgate gateway` child with its
// embedded nats-server), registers the engines, measures (fanout.ts), stops both, and writes
// bench/results/fanout-<date>.{json,md} and latest.md. Every child dies with the run, also on
// error, SIGINT/SIGTERM, or (via setpriv's parent-death signal) a SIGKILLed run.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { defaultConfig } from '../src/gateway/config.ts';
import { fanoutMarkdown, measureFanout, ROUTE, SELECTOR, type SizeResult } from './fanout.ts';
import type { TagStats } from './sim-fleet.ts';
import { profileSummary, type CpuProfile } from './stats.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
});
const HELP = `usage: npm run bench -- [flags]
  --sizes 2,12,64          fleet sizes (engines), each in a fresh fleet and gateway (max 1024)
  --iterations N           measured fan-outs per size and client (default 300 up to 12 engines, 150 up to 64, 100 above)
  --warmup N               unmeasured fan-outs per size and client first (default 50, 20 above 64 engines)
  --fanout-concurrency K   the gateway's --rl-fanout-concurrency (default: the gateway's own default)
  --log-level L            the gateway's log level (default info, as shipped)
  --max-seconds S          time budget of the whole run (default 300)
  --profile                run the gateway under --cpu-prof and print its top frames (latest.md untouched)
  --out DIR                where results go (default bench/results)
`;

interface Args {
  sizes: number[];
  iterations: number | undefined;
  warmup: number | undefined;
  fanoutConcurrency: number | undefined;
  logLevel: string;
  maxSeconds: number;
  profile: boolean;
  out: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { sizes: [2, 12, 64], iterations: undefined, warmup: undefined, fanoutConcurrency: undefined, logLevel: 'info', maxSeconds: 300, profile: false, out: join(ROOT, 'bench/results') };
  const int = (flag: string, v: string | undefined, min: number, max: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} needs an integer ${min}..${max}, got ${v}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.includes('=') ? (argv[i]!.split(/=(.*)/s, 2) as [string, string]) : [argv[i]!, undefined];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--sizes': a.sizes = (value() ?? '').split(',').map((s) => int('--sizes', s.trim(), 1, 1024)); break;
      case '--iterations': a.iterations = int(flag, value(), 1, 100_000); break;
      case '--warmup': a.warmup = int(flag, value(), 0, 10_000); break;
      case '--fanout-concurrency': a.fanoutConcurrency = int(flag, value(), 1, 4096); break;
      case '--log-level': a.logLevel = value() ?? 'info'; break;
      case '--max-seconds': a.maxSeconds = int(flag, value(), 10, 3600); break;
      case '--profile': a.profile = true; break;
      case '--out': a.out = value() ?? a.out; break;
      case '--help': case '-h': process.stdout.write(HELP); process.exit(0);
      default: throw new Error(`unknown flag ${flag}\n${HELP}`);
    }
  }
  return a;
}

/** A child process that speaks JSON lines on stdout; stderr goes to a log file. */
class Child {
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

const live = new Set<Child>();

function childEnv(): NodeJS.ProcessEnv {
  // A gateway setting left in the caller's environment must not change what is measured.
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('RLGATE_') || k === 'RLGATE_NATS_SERVER'));
}

async function startFleet(count: number, logDir: string): Promise<{ child: Child; urls: string[] }> {
  const child = new Child(`sim-fleet(${count})`, ['--import', 'tsx', 'bench/sim-fleet.ts', '--count', String(count)], join(logDir, `fleet-${count}.log`), childEnv());
  live.add(child);
  const line = await child.next('listening', 30_000 + count * 50);
  return { child, urls: line.urls as string[] };
}

async function startGateway(args: Args, logDir: string, profileDir: string | undefined, size: number): Promise<{ child: Child; url: string }> {
  const node = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const flags = ['--host', '127.0.0.1', '--port', '0', '--enable-rl', '--log-level', args.logLevel];
  if (args.fanoutConcurrency) flags.push('--rl-fanout-concurrency', String(args.fanoutConcurrency));
  const child = new Child('gateway', [...node, '--import', 'tsx', 'src/cli/main.ts', 'gateway', ...flags], join(logDir, `gateway-${size}.log`), childEnv());
  live.add(child);
  const line = await child.next('listening', 60_000);
  return { child, url: line.url as string };
}

async function registerAll(gatewayUrl: string, urls: string[]): Promise<void> {
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

function machineFacts() {
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
function procStat(pid: number): { ppid: number; cpuMs: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), cpuMs: ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK };
  } catch {
    return undefined;
  }
}

/** CPU ms so far of the gateway, its nats-server (its child), the fleet and this client. */
function cpuSampler(gatewayPid: number | undefined, fleetPid: number | undefined): () => Record<string, number> {
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
    const own = process.cpuUsage();
    out.client = (own.user + own.system) / 1000;
    return out;
  };
}

function loadavg(): number[] {
  return os.loadavg().map((v) => Math.round(v * 100) / 100);
}

function defaultIterations(size: number): number {
  return size <= 12 ? 300 : size <= 64 ? 150 : 100;
}

async function main(args: Args): Promise<void> {
  const started = performance.now();
  const runDeadline = started + args.maxSeconds * 1000;
  const date = new Date();
  const stamp = date.toISOString().replace(/:/g, '-').replace(/\.\d+Z$/, 'Z');
  const logDir = mkdtempSync(join(os.tmpdir(), 'rlgate-bench-'));
  const profileDir = args.profile ? join(logDir, 'profiles') : undefined;
  const machine = machineFacts();
  const concurrency = args.fanoutConcurrency ?? defaultConfig().rl.fanoutConcurrency;
  process.stdout.write(`bench: child logs in ${logDir} (removed after a clean run)\n`);

  const results: SizeResult[] = [];
  const skipped: number[] = [];
  for (const [k, size] of args.sizes.entries()) {
    const remaining = runDeadline - performance.now() - 15_000;
    if (remaining < 10_000) {
      skipped.push(size);
      continue;
    }
    const fleet = await startFleet(size, logDir);
    const gw = await startGateway(args, logDir, profileDir, size);
    try {
      await registerAll(gw.url, fleet.urls);
      const iterations = args.iterations ?? defaultIterations(size);
      process.stdout.write(`bench: ${size} engines, ${iterations} iterations per client...\n`);
      const result = await measureFanout({
        gatewayUrl: gw.url,
        engineUrls: fleet.urls,
        iterations,
        warmup: args.warmup ?? (size > 64 ? 20 : 50),
        // Sizes left share what is left of the budget, so a slow large size cannot starve the rest.
        deadline: performance.now() + remaining / (args.sizes.length - k),
        cpuTimes: cpuSampler(gw.child.pid, fleet.child.pid),
        fleetStats: async () => {
          fleet.child.send({ cmd: 'stats' });
          return (await fleet.child.next('stats', 30_000)).tags as Record<string, TagStats>;
        },
      });
      results.push(result);
      const g = result.gateway.overhead;
      const d = result.direct.overhead;
      process.stdout.write(`bench: ${size} engines: gateway overhead p50 ${g.p50} p99 ${g.p99} ms, direct p50 ${d.p50} p99 ${d.p99} ms (${result.wall_seconds} s)\n`);
    } finally {
      await gw.child.stop();
      await fleet.child.stop();
      live.delete(gw.child);
      live.delete(fleet.child);
    }
  }

  const setupLine =
    `Set-up: \`${ROUTE.method} /v1/rl/engine/${ROUTE.path}\` body \`${ROUTE.body}\`, selector \`${SELECTOR}\` (every engine); ` +
    'one request at a time, gateway and direct alternating; warm-up first. Gateway: the `rlgate gateway` CLI in its own ' +
    `process with its embedded nats-server, log level ${args.logLevel}, fanout_concurrency ${concurrency}, defaults otherwise ` +
    '(health probes every 5 s). Engines: SGLang simulators, all N in one separate process (bench/sim-fleet.ts). ' +
    `Client (this process): undici, keep-alive.${args.profile ? ' **Gateway under --cpu-prof: timings inflated.**' : ''}`;
  const machineLine =
    `Machine: ${machine.cores} cores (${machine.cpu_model}), ${machine.total_mem_gib} GiB, ${machine.os}, Node ${machine.node}; ` +
    `load average (1/5/15 min) at start ${machine.loadavg_start.join(' ')}, at end ${loadavg().join(' ')}; commit ${machine.commit}; ${date.toISOString()}.`;
  const md = fanoutMarkdown(results, { date: date.toISOString().slice(0, 10), machine: machineLine, setup: setupLine }) +
    (skipped.length ? `\nSkipped for the time budget: ${skipped.join(', ')} engines.\n` : '');
  const json = {
    benchmark: 'fanout',
    date: date.toISOString(),
    machine: { ...machine, loadavg_end: loadavg() },
    setup: { route: ROUTE, selector: SELECTOR, gateway: { process: 'rlgate gateway CLI child', nats: 'embedded', log_level: args.logLevel, fanout_concurrency: concurrency, profiled: args.profile }, engines: 'sglang simulators, one sim-fleet child process', client: 'undici in the bench process, sequential, alternating' },
    targets: { issue_overhead_p99_ms: { 12: 1, 256: 3 }, spec_overhead_ms: 5 },
    results,
    skipped,
    wall_seconds: Math.round(performance.now() - started) / 1000,
  };
  mkdirSync(args.out, { recursive: true });
  // Indented for reading, but number arrays (samples, load averages) stay on one line each.
  const text = JSON.stringify(json, null, 1).replace(/\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]/g, (_m, body: string) => `[${body.replace(/\s+/g, '')}]`);
  writeFileSync(join(args.out, `fanout-${stamp}.json`), `${text}\n`);
  writeFileSync(join(args.out, `fanout-${stamp}.md`), md);
  if (!args.profile) writeFileSync(join(args.out, 'latest.md'), md);
  process.stdout.write(`\n${md}\nbench: wrote ${join(args.out, `fanout-${stamp}`)}.{json,md}${args.profile ? '' : ' and latest.md'}\n`);
  if (profileDir) {
    for (const f of readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile'))) {
      process.stdout.write(`\nprofile ${join(profileDir, f)}\n${profileSummary(JSON.parse(readFileSync(join(profileDir, f), 'utf8')) as CpuProfile, 25)}\n`);
    }
  } else {
    // Logs matter only when something failed (then this line is never reached).
    rmSync(logDir, { recursive: true, force: true });
  }
}

let stopping = false;
async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    await Promise.allSettled([...live].map((c) => c.stop()));
  }
  process.exit(code);
}

let args: Args;
try {
  args = parseArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`bench: ${(err as Error).message}\n`);
  process.exit(2);
}
// A net under the bounded loops: whatever hangs, the run ends and takes its children with it.
setTimeout(() => {
  process.stderr.write('bench: watchdog fired; stopping everything\n');
  void stopAll(1);
}, (args.maxSeconds + 120) * 1000).unref();
// A closed stdout (`| head`) must not end the run without its cleanup; anything unexpected stops all.
process.stdout.on('error', () => {});
process.on('uncaughtException', (err) => {
  process.stderr.write(`bench: ${err.stack ?? String(err)}\n`);
  void stopAll(1);
});
process.once('SIGINT', () => void stopAll(130));
process.once('SIGTERM', () => void stopAll(143));
main(args).then(
  () => stopAll(0),
  (err: unknown) => {
    process.stderr.write(`bench: ${(err as Error)?.stack ?? String(err)}\n`);
    return stopAll(1);
  },
);
