// `npm run bench [-- flags]`: the benchmark run, three suites in one process tree.
// fanout: for each fleet size, an engine fleet (one sim-fleet child) and a gateway (one `rlgate
// gateway` child with its embedded nats-server), the fan-out measured by fanout.ts.
// generate: one engine behind nginx, a bare fastify + undici hop and the gateway, the /generate
// data plane measured by generate.ts against the engine itself, in the same run.
// replicas: refits through one replica and through two replicas on one nats-server, and the
// takeover of a SIGKILLed replica's engines, measured by replicas.ts.
// scale: per fleet size (up to 10,000 engines, several sim-fleet children) a fresh fleet and
// gateway: registration time, memory, idle CPU, a fan-out to 1,000 and listings, by scale.ts.
// startup: the gateway CLI's CPU and wall time to listening, compiled and through tsx, by startup.ts.
// Writes bench/results/<suite>-<date>.{json,md} and latest.md (the newest tables of each suite).
// Every child dies with the run, also on error, SIGINT/SIGTERM, or (setpriv) a SIGKILLed run.

import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { defaultConfig } from '../src/gateway/config.ts';
import {
  Child,
  childEnv,
  cpuSampler,
  ENGINES_PER_FLEET_PROCESS,
  fdLimitOf,
  firstChildPid,
  live,
  loadavg,
  machineFacts,
  procStat,
  registerAll,
  ROOT,
  startFleet,
  startGateway,
  type Fleet,
} from './children.ts';
import { fanoutMarkdown, measureFanout, ROUTE, SELECTOR, type SizeResult } from './fanout.ts';
import { generateMarkdown, GENERATE_TARGETS, measureLatency, measureStreams, measureThroughput, type GenerateResult, type Target } from './generate.ts';
import { NGINX, startNginx, type NginxProxy } from './nginx.ts';
import {
  measureLargeRefit,
  measureRefits,
  measureTakeover,
  registerConcurrently,
  REPLICA_TARGETS,
  replicasMarkdown,
  settled,
  type RefitSetup,
  type ReplicasResult,
  type TakeoverResult,
} from './replicas.ts';
import { emptyScaleResult, FANOUT_GROUP, measureScale, SCALE_GOALS, scaleGoals, scaleMarkdown, type ScaleSizeResult } from './scale.ts';
import { startEmbeddedNats, type EmbeddedNats } from '../src/bus/server.ts';
import { ms, profileSummary, type CpuProfile } from './stats.ts';
import { WRK } from './wrk.ts';
import { request } from 'undici';
import { ROLLOUT_POLICIES, rolloutMarkdown, runRollout } from './rollout/suite.ts';
import { REALISTIC, type Workload } from './rollout/workload.ts';
import { LOAD_MS, refitUnderLoadMarkdown, runRefitUnderLoad } from './refit-under-load.ts';
import { inflightMarkdown, runInflight } from './inflight.ts';
import { runScaleOut, scaleOutBudgetMs, scaleOutMarkdown } from './scale-out.ts';
import { measureStartup } from './startup.ts';

// The flags, in a plain file so that bench/bench.sh can print them before anything is installed.
const HELP = readFileSync(new URL('./help.txt', import.meta.url), 'utf8');

type Suite = 'fanout' | 'generate' | 'replicas' | 'scale' | 'rollout' | 'refit-under-load' | 'inflight' | 'startup';
const SUITES: readonly Suite[] = ['fanout', 'generate', 'replicas', 'scale', 'rollout', 'refit-under-load', 'inflight', 'startup'];

interface Args {
  suites: Suite[];
  sizes: number[];
  latencyRounds: number;
  throughputSeconds: number;
  throughputPasses: number;
  streams: number;
  streamTokens: number;
  streamTokenRate: number;
  iterations: number | undefined;
  warmup: number | undefined;
  fanoutConcurrency: number | undefined;
  refits: number;
  refitWarmup: number;
  replicaEngines: number;
  leases: number[];
  takeovers: number;
  largeRefitEngines: number;
  largeRefits: number;
  scaleSizes: number[];
  idleSeconds: number;
  registerConcurrency: number;
  /** The scale suite's replicas-on-a-cluster part (bench/scale-out.ts): on, off, or alone. */
  scaleOut: 'on' | 'off' | 'only';
  scaleOutReplicas: number;
  scaleOutEngines: number;
  scaleOutLeaseSecs: number;
  logLevel: string;
  rolloutSizes: number[];
  rolloutPolicies: string[];
  rolloutWorkloads: Array<Workload['kind']>;
  rolloutSeed: number;
  refitEngines: number;
  refitCallers: number;
  inflightSizes: number[];
  startupRuns: number;
  /** Default 300 s, or 1800 s when the scale or rollout suite runs (plus the scale-out part's share). */
  maxSeconds: number;
  profile: boolean;
  out: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    suites: ['fanout', 'generate'],
    sizes: [2, 12, 64],
    latencyRounds: 2000,
    throughputSeconds: 3,
    throughputPasses: 4,
    streams: 256,
    streamTokens: 256,
    streamTokenRate: 50,
    iterations: undefined,
    warmup: undefined,
    fanoutConcurrency: undefined,
    refits: 100,
    refitWarmup: 10,
    replicaEngines: 12,
    leases: [2, 5],
    takeovers: 5,
    largeRefitEngines: 1000,
    largeRefits: 10,
    scaleSizes: [1000, 5000, 10_000],
    idleSeconds: 30,
    registerConcurrency: 64,
    scaleOut: 'on',
    scaleOutReplicas: 10,
    scaleOutEngines: 50_000,
    scaleOutLeaseSecs: 5,
    logLevel: 'info',
    rolloutSizes: [4, 16],
    rolloutPolicies: [...ROLLOUT_POLICIES],
    rolloutWorkloads: ['grpo-short', 'grpo-long-system', 'agentic'],
    rolloutSeed: 20261203,
    refitEngines: 8,
    refitCallers: 64,
    inflightSizes: [2000, 10000],
    startupRuns: 7,
    maxSeconds: 0,
    profile: false,
    out: join(ROOT, 'bench/results'),
  };
  const int = (flag: string, v: string | undefined, min: number, max: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} needs an integer ${min}..${max}, got ${v}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.includes('=') ? (argv[i]!.split(/=(.*)/s, 2) as [string, string]) : [argv[i]!, undefined];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--suites': {
        const names = (value() ?? '')
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
        const bad = names.filter((x) => !SUITES.includes(x as Suite));
        if (bad.length || names.length === 0) throw new Error(`--suites takes ${SUITES.join(', ')}, got ${bad.join(',') || 'nothing'}`);
        a.suites = names as Suite[];
        break;
      }
      case '--rollout-sizes':
        a.rolloutSizes = (value() ?? '').split(',').map((x) => int(flag, x, 1, 64));
        break;
      case '--rollout-policies': {
        const names = (value() ?? '').split(',').filter(Boolean);
        const bad = names.filter((x) => !(ROLLOUT_POLICIES as readonly string[]).includes(x));
        if (bad.length || names.length === 0) throw new Error(`--rollout-policies takes ${ROLLOUT_POLICIES.join(', ')}, got ${bad.join(',') || 'nothing'}`);
        a.rolloutPolicies = names;
        break;
      }
      case '--rollout-workloads': {
        const kinds = ['grpo-short', 'grpo-long-system', 'agentic'];
        const names = (value() ?? '').split(',').filter(Boolean);
        const bad = names.filter((x) => !kinds.includes(x));
        if (bad.length || names.length === 0) throw new Error(`--rollout-workloads takes ${kinds.join(', ')}, got ${bad.join(',') || 'nothing'}`);
        a.rolloutWorkloads = names as Array<Workload['kind']>;
        break;
      }
      case '--rollout-seed':
        a.rolloutSeed = int(flag, value(), 0, 2 ** 31 - 1);
        break;
      case '--refit-engines':
        a.refitEngines = int(flag, value(), 2, 64);
        break;
      case '--refit-callers':
        a.refitCallers = int(flag, value(), 1, 4096);
        break;
      case '--inflight-sizes':
        a.inflightSizes = (value() ?? '').split(',').map((x) => int(flag, x, 1, 100_000));
        break;
      case '--startup-runs':
        a.startupRuns = int(flag, value(), 1, 100);
        break;
      case '--latency-rounds':
        a.latencyRounds = int(flag, value(), 10, 1_000_000);
        break;
      case '--throughput-seconds':
        a.throughputSeconds = int(flag, value(), 1, 600);
        break;
      case '--throughput-passes':
        a.throughputPasses = int(flag, value(), 1, 100);
        break;
      case '--streams':
        a.streams = int(flag, value(), 1, 4096);
        break;
      case '--stream-tokens':
        a.streamTokens = int(flag, value(), 1, 100_000);
        break;
      case '--stream-token-rate':
        a.streamTokenRate = int(flag, value(), 1, 100_000);
        break;
      case '--sizes':
        a.sizes = (value() ?? '').split(',').map((s) => int('--sizes', s.trim(), 1, 1024));
        break;
      case '--iterations':
        a.iterations = int(flag, value(), 1, 100_000);
        break;
      case '--warmup':
        a.warmup = int(flag, value(), 0, 10_000);
        break;
      case '--fanout-concurrency':
        a.fanoutConcurrency = int(flag, value(), 1, 4096);
        break;
      case '--refits':
        a.refits = int(flag, value(), 1, 100_000);
        break;
      case '--refit-warmup':
        a.refitWarmup = int(flag, value(), 0, 10_000);
        break;
      case '--replica-engines':
        a.replicaEngines = int(flag, value(), 2, 512);
        if (a.replicaEngines % 2) throw new Error('--replica-engines must be even (half are registered through each replica)');
        break;
      case '--leases':
        a.leases = (value() ?? '').split(',').map((s) => int('--leases', s.trim(), 1, 60));
        break;
      case '--takeovers':
        a.takeovers = int(flag, value(), 1, 1000);
        break;
      case '--refit-large-engines':
        a.largeRefitEngines = int(flag, value(), 0, 10_000);
        break;
      case '--refit-large-refits':
        a.largeRefits = int(flag, value(), 1, 1000);
        break;
      case '--scale-sizes':
        a.scaleSizes = (value() ?? '').split(',').map((s) => int('--scale-sizes', s.trim(), 1, 20_000));
        break;
      case '--idle-seconds':
        a.idleSeconds = int(flag, value(), 5, 600);
        break;
      case '--register-concurrency':
        a.registerConcurrency = int(flag, value(), 1, 1024);
        break;
      case '--scale-out': {
        const v = value();
        if (v !== 'on' && v !== 'off' && v !== 'only') throw new Error(`--scale-out takes on, off or only, got ${v}`);
        a.scaleOut = v;
        break;
      }
      case '--scale-out-replicas':
        a.scaleOutReplicas = int(flag, value(), 1, 100);
        break;
      case '--scale-out-engines':
        a.scaleOutEngines = int(flag, value(), 1, 100_000);
        break;
      case '--scale-out-lease-secs':
        a.scaleOutLeaseSecs = int(flag, value(), 1, 60);
        break;
      case '--log-level':
        a.logLevel = value() ?? 'info';
        break;
      case '--max-seconds':
        a.maxSeconds = int(flag, value(), 10, 3600);
        break;
      case '--profile':
        a.profile = true;
        break;
      case '--out':
        a.out = value() ?? a.out;
        break;
      case '--help':
      case '-h':
        process.stdout.write(HELP);
        process.exit(0);
      default:
        throw new Error(`unknown flag ${flag}\n${HELP}`);
    }
  }
  a.maxSeconds ||= a.suites.includes('scale') || a.suites.includes('rollout') ? 1800 : 300;
  // The scale suite's replicas-on-a-cluster part comes on top of it (10 replicas × 50,000 engines: about 30 minutes).
  if (a.suites.includes('scale') && a.scaleOut !== 'off' && !argv.some((x) => x.startsWith('--max-seconds')))
    a.maxSeconds = Math.min(7200, a.maxSeconds + Math.round(scaleOutBudgetMs(a.scaleOutReplicas, a.scaleOutEngines, a.idleSeconds) / 1000));
  return a;
}

function defaultIterations(size: number): number {
  return size <= 12 ? 300 : size <= 64 ? 150 : 100;
}

interface RunContext {
  args: Args;
  date: Date;
  stamp: string;
  logDir: string;
  profileDir: string | undefined;
  machine: ReturnType<typeof machineFacts>;
  /** A suite that records a failure and goes on sets this, so the logs outlive a finished run. */
  keepLogs?: boolean;
}

function machineLine(ctx: RunContext): string {
  const m = ctx.machine;
  return (
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.total_mem_gib} GiB, ${m.os}, Node ${m.node}; ` +
    `load average (1/5/15 min) at start ${m.loadavg_start.join(' ')}, at end ${loadavg().join(' ')}; commit ${m.commit}; ${ctx.date.toISOString()}.`
  );
}

/** Indented for reading, but number arrays (samples, load averages) stay on one line each. */
function writeResult(ctx: RunContext, suite: Suite | 'scaleout', json: Record<string, unknown>, md: string): void {
  mkdirSync(ctx.args.out, { recursive: true });
  const text = JSON.stringify(json, null, 1).replace(/\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]/g, (_m, body: string) => `[${body.replace(/\s+/g, '')}]`);
  writeFileSync(join(ctx.args.out, `${suite}-${ctx.stamp}.json`), `${text}\n`);
  writeFileSync(join(ctx.args.out, `${suite}-${ctx.stamp}.md`), md);
  process.stdout.write(`\n${md}\nbench: wrote ${join(ctx.args.out, `${suite}-${ctx.stamp}`)}.{json,md}\n`);
}

async function runFanout(ctx: RunContext, deadline: number): Promise<string> {
  const { args, logDir, profileDir } = ctx;
  const started = performance.now();
  const concurrency = args.fanoutConcurrency ?? defaultConfig().rl.fanoutConcurrency;
  const results: SizeResult[] = [];
  const skipped: number[] = [];
  for (const [k, size] of args.sizes.entries()) {
    const remaining = deadline - performance.now() - 15_000;
    if (remaining < 10_000) {
      skipped.push(size);
      continue;
    }
    const fleet = await startFleet(size, logDir);
    const flags = ['--log-level', args.logLevel];
    if (args.fanoutConcurrency) flags.push('--rl-fanout-concurrency', String(args.fanoutConcurrency));
    let gw: Awaited<ReturnType<typeof startGateway>> | undefined;
    try {
      gw = await startGateway(flags, logDir, profileDir, String(size));
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
        cpuTimes: cpuSampler(
          gw.child.pid,
          fleet.children.map((c) => c.pid),
        ),
        fleetStats: fleet.stats,
        natsUrl: gw.natsUrl,
        subjectRoot: defaultConfig().subjectRoot,
      });
      results.push(result);
      const g = result.gateway.overhead;
      const d = result.direct.overhead;
      process.stdout.write(
        `bench: ${size} engines: gateway overhead p50 ${g.p50} p99 ${g.p99} ms, direct p50 ${d.p50} p99 ${d.p99} ms; CPU µs per leg gateway ${result.cpu_us_per_leg.gateway} direct ${result.cpu_us_per_leg.direct}; NATS messages per fan-out ${result.nats ? `${result.nats.per_fanout_own_subjects} on rl.>, ${result.nats.per_fanout_net} net, ${result.nats.per_fanout} all` : result.nats_error} (${result.wall_seconds} s)\n`,
      );
    } finally {
      if (gw) await stopChildren(gw.child);
      await fleet.stop();
    }
  }

  const setupLine =
    `Set-up: \`${ROUTE.method} /v1/rl/engine/${ROUTE.path}\` body \`${ROUTE.body}\`, selector \`${SELECTOR}\` (every engine); ` +
    'one request at a time, gateway and direct alternating; warm-up first. Gateway: the `rlgate gateway` CLI in its own ' +
    `process with its embedded nats-server, log level ${args.logLevel}, ${concurrency === undefined ? 'fan-out concurrency as shipped (by call: the whole fleet, at least 256, for calls that move no weights)' : `fanout_concurrency ${concurrency}`}, defaults otherwise ` +
    '(health probes every 5 s). Engines: SGLang simulators, all N in one separate process (bench/sim-fleet.ts). ' +
    `Client (this process): undici, keep-alive.${args.profile ? ' **Gateway under --cpu-prof: timings inflated.**' : ''}`;
  const md =
    fanoutMarkdown(results, { date: ctx.date.toISOString().slice(0, 10), machine: machineLine(ctx), setup: setupLine }) +
    (skipped.length ? `\nSkipped for the time budget: ${skipped.join(', ')} engines.\n` : '');
  writeResult(
    ctx,
    'fanout',
    {
      benchmark: 'fanout',
      date: ctx.date.toISOString(),
      machine: { ...ctx.machine, loadavg_end: loadavg() },
      setup: {
        route: ROUTE,
        selector: SELECTOR,
        gateway: {
          process: 'rlgate gateway CLI child',
          nats: 'embedded',
          log_level: args.logLevel,
          fanout_concurrency: concurrency ?? 'default (by call)',
          profiled: args.profile,
        },
        engines: 'sglang simulators, one sim-fleet child process',
        client: 'undici in the bench process, sequential, alternating',
      },
      targets: { issue_overhead_p99_ms: { 12: 1, 256: 3 }, spec_overhead_ms: 5 },
      results,
      skipped,
      wall_seconds: Math.round(performance.now() - started) / 1000,
    },
    md,
  );
  return md;
}

/** latest.md: the newest tables of each suite found in `dir`, so a run of one suite keeps the others'. */
function latestTables(dir: string): string {
  const files = readdirSync(dir);
  // The scale-out part of the scale suite writes its own files, after the scale suite's tables.
  return SUITES.flatMap((s) => (s === 'scale' ? ['scale', 'scaleout'] : [s]))
    .flatMap((suite) => {
      const newest = files
        .filter((f) => f.startsWith(`${suite}-`) && f.endsWith('.md'))
        .sort()
        .pop();
      return newest ? [readFileSync(join(dir, newest), 'utf8')] : [];
    })
    .join('\n');
}

async function stopChildren(...children: Child[]): Promise<void> {
  for (const c of children) {
    await c.stop();
    live.delete(c);
  }
}

/** One engine and every hop in front of it: nginx (when installed), the bare Node hop, the gateway. */
async function startHops(
  ctx: RunContext,
  label: string,
  tokenRate: number,
): Promise<{
  targets: Target[];
  pids: Record<string, number | undefined>;
  gatewayPid: number | undefined;
  /** The every-core gateway: its supervisor and the gateway processes it forked. */
  allCorePids: () => number[];
  processes: number;
  fleetPids: Array<number | undefined>;
  nginx: NginxProxy | undefined;
  stop(): Promise<void>;
}> {
  const { args, logDir, profileDir } = ctx;
  const fleet = await startFleet(1, logDir, ['--token-rate', String(tokenRate)], label);
  const children: Child[] = [...fleet.children];
  let nginx: NginxProxy | undefined;
  const stop = async () => {
    await nginx?.stop();
    await stopChildren(...children.reverse());
  };
  try {
    const engine = fleet.urls[0]!;
    const gw = await startGateway(['--log-level', args.logLevel, '--processes', '1'], logDir, profileDir, `generate-${label}`);
    children.push(gw.child);
    await registerAll(gw.url, [engine]);
    // The same gateway on every core (--processes auto: one gateway process per core).
    const all = await startGateway(['--log-level', args.logLevel, '--processes', 'auto'], logDir, profileDir, `generate-${label}-all`);
    children.push(all.child);
    await registerAll(all.url, [engine]);
    const processes = os.availableParallelism();
    await waitAllProcessesRoute(all.url, processes);
    const hop = new Child('node-hop', ['--import', 'tsx', 'bench/node-hop.ts', '--upstream', engine], join(logDir, `node-hop-${label}.log`), childEnv());
    live.add(hop);
    children.push(hop);
    const hopUrl = (await hop.next('listening', 30_000)).url as string;
    if (NGINX) nginx = await startNginx(engine, join(logDir, `nginx-${label}`));
    const targets: Target[] = [{ name: 'direct', url: engine }];
    if (nginx) targets.push({ name: 'nginx', url: nginx.url });
    targets.push({ name: 'node_hop', url: hopUrl }, { name: 'gateway', url: gw.url }, { name: 'gateway_all', url: all.url });
    // nginx's work happens in its worker, a child of the master.
    const nginxWorker = nginx ? childPids(nginx.pid)[0] : undefined;
    // The supervisor and its node children (not its nats-server: the one-process gateway's is not counted either).
    const allCorePids = () => [all.child.pid!, ...childPids(all.child.pid).filter((p) => readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'node')];
    return {
      targets,
      pids: { nginx: nginxWorker, node_hop: hop.pid },
      gatewayPid: gw.child.pid,
      allCorePids,
      processes,
      fleetPids: fleet.children.map((c) => c.pid),
      nginx,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Adds the every-core gateway's CPU (all its processes) to a sampler's figures, as `gateway_all`. */
function withAllCores(sample: () => Record<string, number>, pids: number[]): () => Record<string, number> {
  return () => {
    const out = sample();
    out.gateway_all = pids.reduce((sum, p) => sum + (procStat(p)?.cpuMs ?? 0), 0);
    return out;
  };
}

/**
 * Waits until every process of an every-core gateway routes to the registered engine: each new
 * connection goes to the next process, so `processes` successes in a row on new connections cover all.
 */
async function waitAllProcessesRoute(url: string, processes: number): Promise<void> {
  const deadline = performance.now() + 60_000;
  const body = JSON.stringify({ input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 1 } });
  let inRow = 0;
  while (inRow < 2 * processes) {
    if (performance.now() > deadline) throw new Error(`not every gateway process routes to the engine within 60 s (${url})`);
    const res = await request(`${url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' }, body, reset: true });
    await res.body.text();
    inRow = res.statusCode === 200 ? inRow + 1 : 0;
    if (inRow === 0) await new Promise((r) => setTimeout(r, 200));
  }
}

function childPids(parent: number | undefined): number[] {
  if (parent === undefined) return [];
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number)
    .filter((p) => procStat(p)?.ppid === parent);
}

async function runGenerate(ctx: RunContext, deadline: number): Promise<string> {
  const { args } = ctx;
  const started = performance.now();
  const notes: string[] = [];
  if (!NGINX) notes.push('nginx is not installed: no nginx column, and the throughput target is unchecked (apt-get install nginx).');
  if (!WRK) notes.push('wrk is not installed: the throughput part was skipped (apt-get install wrk).');

  process.stdout.write('bench: generate: one instant engine behind every hop...\n');
  const instant = await startHops(ctx, 'instant', 0);
  let latency: GenerateResult['latency'];
  let throughput: GenerateResult['throughput'] = null;
  try {
    latency = await measureLatency(instant.targets, args.latencyRounds, 200, deadline);
    process.stdout.write(
      `bench: generate: latency p50 by hop ${JSON.stringify(Object.fromEntries(Object.entries(latency.by_target).map(([k, v]) => [k, v.p50])))} ms\n`,
    );
    if (WRK) {
      throughput = await measureThroughput(
        instant.targets,
        64,
        args.throughputSeconds,
        args.throughputPasses,
        ctx.logDir,
        withAllCores(cpuSampler(instant.gatewayPid, instant.fleetPids, instant.pids), instant.allCorePids()),
      );
      throughput.processes = { gateway: 1, gateway_all: instant.processes };
      process.stdout.write(`bench: generate: requests/s at 64 connections ${JSON.stringify(throughput.requests_per_s)}\n`);
    }
  } finally {
    await instant.stop();
  }

  process.stdout.write(`bench: generate: ${args.streams} streams against an engine paced at ${args.streamTokenRate} tokens/s...\n`);
  const paced = await startHops(ctx, 'paced', args.streamTokenRate);
  let streams: GenerateResult['streams'];
  try {
    streams = await measureStreams(paced.targets, args.streams, args.streamTokens, args.streamTokenRate);
    process.stdout.write(`bench: generate: tokens/s ${JSON.stringify(streams.tokens_per_s)}\n`);
  } finally {
    await paced.stop();
  }

  const result: GenerateResult = { latency, throughput, streams, notes };
  const setupLine =
    'Set-up: one SGLang simulator (bench/sim-fleet.ts, its own process) answering `POST /generate`; in front of it, each in ' +
    `its own process: ${instant.nginx ? `${instant.nginx.version} (\`proxy_pass\`, one worker, upstream keepalive, unbuffered)` : 'no nginx'}, ` +
    'a bare fastify + undici relay (bench/node-hop.ts), and the `rlgate gateway` CLI (RL on, the engine registered with ' +
    `\`POST /workers\`, its embedded nats-server, log level ${args.logLevel}). "direct" calls the simulator itself. ` +
    'Latency and stream clients: undici in this process; throughput client: wrk, one thread. For latency and throughput ' +
    'the engine answers at once (8 tokens, `--token-rate 0`); for streams it is paced per stream, as a GPU is.';
  const md = generateMarkdown(result, { date: ctx.date.toISOString().slice(0, 10), machine: machineLine(ctx), setup: setupLine });
  writeResult(
    ctx,
    'generate',
    {
      benchmark: 'generate',
      date: ctx.date.toISOString(),
      machine: { ...ctx.machine, loadavg_end: loadavg() },
      setup: {
        engine: 'sglang simulator, one sim-fleet child',
        hops: instant.targets.map((t) => t.name),
        nginx: instant.nginx?.version ?? null,
        gateway: { rl: true, log_level: args.logLevel, profiled: args.profile, processes: { gateway: 1, gateway_all: instant.processes } },
      },
      targets: GENERATE_TARGETS,
      ...result,
      wall_seconds: Math.round(performance.now() - started) / 1000,
    },
    md,
  );
  return md;
}

/** What the generate suite needs of the budget: latency rounds, 10 wrk runs, 10 stream rounds, start-ups (five hops). */
function generateBudgetMs(args: Args): number {
  const streamRound = (args.streamTokens / args.streamTokenRate + 2) * 1000;
  return 60_000 + args.latencyRounds * 5 * 0.5 + (WRK ? 5 * (args.throughputPasses * args.throughputSeconds + 2) * 1000 : 0) + 12 * streamRound;
}

/** A standalone nats-server for gateways joined with --nats-url (what several replicas need). */
async function startSharedNats(): Promise<EmbeddedNats> {
  return startEmbeddedNats({ restart: false });
}

/** CPU ms so far of the named processes (from /proc); a name with several pids gets their sum. */
function cpuOf(pids: Record<string, number | undefined | Array<number | undefined>>): () => Record<string, number> {
  return () => {
    const out: Record<string, number> = {};
    for (const [name, pid] of Object.entries(pids)) {
      const stats = (Array.isArray(pid) ? pid : [pid]).map((p) => (p === undefined ? undefined : procStat(p))).filter((st) => st !== undefined);
      if (stats.length) out[name] = stats.reduce((sum, st) => sum + st.cpuMs, 0);
    }
    return out;
  };
}

/** POST /workers for each URL, answered 202; waiting for readiness is the caller's. */
async function registerThrough(gatewayUrl: string, urls: string[]): Promise<void> {
  for (const url of urls) {
    const res = await fetch(`${gatewayUrl}/workers`, { method: 'POST', body: JSON.stringify({ url }), headers: { 'content-type': 'application/json' } });
    const text = await res.text();
    if (res.status !== 202) throw new Error(`POST /workers ${url} through ${gatewayUrl} answered ${res.status}: ${text}`);
  }
}

async function runReplicas(ctx: RunContext, deadline: number): Promise<string> {
  const { args, logDir, profileDir } = ctx;
  const started = performance.now();
  const n = args.replicaEngines;
  const notes: string[] = [];
  const gatewayFlags = (natsUrl: string, id: string, extra: string[] = []) => [
    '--nats-url',
    natsUrl,
    '--replica-id',
    id,
    '--log-level',
    args.logLevel,
    ...extra,
  ];
  const nats: EmbeddedNats[] = [];
  const children: Child[] = [];
  const stopAllOfSuite = async () => {
    await stopChildren(...children.splice(0).reverse());
    await Promise.allSettled(nats.splice(0).map((x) => x.stop()));
  };

  // Part 1: the same refit through one replica owning every engine, and through two replicas on
  // one nats-server owning half each (the refit sent to the first). Both layouts live side by
  // side, each with its own nats-server and fleet, and take turns.
  let refits: ReplicasResult['refits'] = null;
  process.stdout.write(`bench: replicas: refits of ${n} engines through one replica and through two...\n`);
  try {
    const natsOne = await startSharedNats();
    nats.push(natsOne);
    const fleetOne = await startFleet(n, logDir, ['--token-rate', '0'], 'replicas-one');
    children.push(...fleetOne.children);
    const solo = await startGateway(gatewayFlags(natsOne.url, 'solo'), logDir, profileDir, 'replicas-solo');
    children.push(solo.child);
    await registerAll(solo.url, fleetOne.urls);

    const natsTwo = await startSharedNats();
    nats.push(natsTwo);
    const fleetTwo = await startFleet(n, logDir, ['--token-rate', '0'], 'replicas-two');
    children.push(...fleetTwo.children);
    const ra = await startGateway(gatewayFlags(natsTwo.url, 'ra'), logDir, profileDir, 'replicas-ra');
    children.push(ra.child);
    const rb = await startGateway(gatewayFlags(natsTwo.url, 'rb'), logDir, profileDir, 'replicas-rb');
    children.push(rb.child);
    const half = new Set(fleetTwo.urls.slice(0, n / 2));
    await registerThrough(ra.url, fleetTwo.urls.slice(0, n / 2));
    await registerThrough(rb.url, fleetTwo.urls.slice(n / 2));
    // Each replica owns what was registered through it, and both list the whole fleet.
    const split = (w: { url: string; owner: string | null }) => w.owner === (half.has(w.url) ? 'ra' : 'rb');
    await settled(ra.url, n, split, 60_000, 'two replicas, ra');
    await settled(rb.url, n, split, 60_000, 'two replicas, rb');

    const setups: RefitSetup[] = [
      {
        name: 'one_replica',
        replicas: 1,
        frontUrl: solo.url,
        engines: n,
        fleetStats: fleetOne.stats,
        cpuTimes: cpuOf({ gateway: solo.child.pid, nats_server: natsOne.pid, engines: fleetOne.children.map((c) => c.pid) }),
      },
      {
        name: 'two_replicas',
        replicas: 2,
        frontUrl: ra.url,
        engines: n,
        fleetStats: fleetTwo.stats,
        cpuTimes: cpuOf({ gateway: ra.child.pid, gateway_second: rb.child.pid, nats_server: natsTwo.pid, engines: fleetTwo.children.map((c) => c.pid) }),
      },
    ];
    refits = await measureRefits({
      setups,
      iterations: args.refits,
      warmup: args.refitWarmup,
      deadline: Math.max(performance.now() + 10_000, deadline - takeoverBudgetMs(args)),
      label: ctx.stamp,
    });
    for (const s of refits.setups) {
      process.stdout.write(
        `bench: replicas: ${s.name}: wall p50 ${ms(s.wall.p50)} p99 ${ms(s.wall.p99)}, overhead p50 ${ms(s.overhead.p50)} p99 ${ms(s.overhead.p99)} ms\n`,
      );
    }
  } finally {
    await stopAllOfSuite();
  }

  // Part 2: one replica refitting a large fleet (its own nats-server, fleet and gateway), each
  // refit paired with the same calls sent straight to the engines.
  let large: ReplicasResult['large'] = null;
  const big = args.largeRefitEngines;
  if (big > 0 && performance.now() + largeRefitBudgetMs(args) > deadline - takeoverBudgetMs(args)) {
    notes.push(`The refit at ${big} engines was skipped for the time budget.`);
  } else if (big > 0) {
    process.stdout.write(`bench: replicas: refits of ${big} engines through one replica...\n`);
    try {
      const server = await startSharedNats();
      nats.push(server);
      const fleet = await startFleet(big, logDir, ['--token-rate', '0'], `replicas-large`);
      children.push(...fleet.children);
      const gw = await startGateway(gatewayFlags(server.url, 'large'), logDir, profileDir, 'replicas-large');
      children.push(gw.child);
      await registerConcurrently(gw.url, fleet.urls, 64);
      await settled(gw.url, big, (w) => w.owner === 'large', 120_000, `${big} engines`);
      large = await measureLargeRefit({
        frontUrl: gw.url,
        engineUrls: fleet.urls,
        fleetStats: fleet.stats,
        cpuTimes: cpuOf({ gateway: gw.child.pid, nats_server: server.pid }),
        iterations: args.largeRefits,
        warmup: 2,
        deadline: Math.max(performance.now() + 10_000, deadline - takeoverBudgetMs(args)),
        label: ctx.stamp,
      });
      process.stdout.write(
        `bench: replicas: ${big} engines: wall p50 ${ms(large.wall.p50)}, direct p50 ${ms(large.direct_wall.p50)}, overhead p50 ${ms(large.overhead.p50)} p99 ${ms(large.overhead.p99)} ms\n`,
      );
    } catch (err) {
      notes.push(`The refit at ${big} engines failed: ${(err as Error).message}`);
      process.stdout.write(`bench: replicas: ${big} engines failed: ${(err as Error).message}\n`);
    } finally {
      await stopAllOfSuite();
    }
  }

  // Part 3: takeovers, one fresh nats-server and fleet per lease.
  const takeovers: TakeoverResult[] = [];
  for (const lease of args.leases) {
    if (performance.now() + (lease + 15) * 1000 > deadline) {
      notes.push(`Takeover with a ${lease} s lease skipped for the time budget.`);
      continue;
    }
    process.stdout.write(`bench: replicas: takeovers with a ${lease} s lease, ${n} engines...\n`);
    try {
      const server = await startSharedNats();
      nats.push(server);
      const fleet = await startFleet(n, logDir, ['--token-rate', '0'], `takeover-${lease}`);
      children.push(...fleet.children);
      let k = 0;
      const result = await measureTakeover({
        leaseSecs: lease,
        engineUrls: fleet.urls,
        trials: args.takeovers,
        deadline,
        startReplica: async () => {
          const id = `lease${lease}-r${k++}`;
          const gw = await startGateway(gatewayFlags(server.url, id, ['--lease-secs', String(lease)]), logDir, profileDir, `takeover-${id}`);
          children.push(gw.child);
          return { id, url: gw.url, kill: () => gw.child.kill() };
        },
        register: async (front, urls) => registerThrough(front, urls),
      });
      takeovers.push(result);
      process.stdout.write(
        `bench: replicas: lease ${lease} s: serving again after p50 ${ms(result.serving.p50)} max ${ms(result.serving.max)} ms (${result.trials} trials, ${result.timed_out} timed out)\n`,
      );
    } finally {
      await stopAllOfSuite();
    }
  }

  const result: ReplicasResult = { refits, large, takeovers, notes };
  const setupLine =
    `Set-up: every gateway is the \`rlgate gateway\` CLI in its own process (RL on, log level ${args.logLevel}, defaults otherwise: ` +
    'health probes every 5 s, lease 5 s unless stated), joined with `--nats-url` to a standalone nats-server (one per layout, ' +
    `JetStream, loopback) that the bench starts; engines: ${n} SGLang simulators per layout in one separate process (bench/sim-fleet.ts, ` +
    '`--token-rate 0`: control calls answered at once). One layout: one replica owning every engine. Two layouts: two replicas, ' +
    `${n / 2} engines registered through each (so each owns ${n / 2}), every refit sent to the first. Client (this process): undici, ` +
    `one refit at a time, layouts alternating.${args.profile ? ' **Gateways under --cpu-prof: timings inflated.**' : ''}`;
  const md = replicasMarkdown(result, { date: ctx.date.toISOString().slice(0, 10), machine: machineLine(ctx), setup: setupLine });
  writeResult(
    ctx,
    'replicas',
    {
      benchmark: 'replicas',
      date: ctx.date.toISOString(),
      machine: { ...ctx.machine, loadavg_end: loadavg() },
      setup: {
        engines: n,
        nats: 'standalone nats-server per layout',
        gateway: { process: 'rlgate gateway CLI child', log_level: args.logLevel, profiled: args.profile },
        refit: { source: 'disk', iterations: args.refits, warmup: args.refitWarmup },
        large_refit: { engines: args.largeRefitEngines, iterations: args.largeRefits, warmup: 2 },
        takeover: { leases_secs: args.leases, trials: args.takeovers, poll_ms: 20 },
      },
      targets: REPLICA_TARGETS,
      ...result,
      wall_seconds: Math.round(performance.now() - started) / 1000,
    },
    md,
  );
  return md;
}

/** What the takeovers need of the budget: per lease a fleet and two replicas, then per trial the lease, a poll and a fresh replica. */
function takeoverBudgetMs(args: Args): number {
  return args.leases.reduce((sum, l) => sum + args.takeovers * (l + 8) * 1000 + 15_000, 0);
}

/** What the large refit needs of the budget: a fleet, a gateway, registration (~5 ms per engine here), the paired refits (~1 s per 1,000 engines). */
function largeRefitBudgetMs(args: Args): number {
  const n = args.largeRefitEngines;
  return n > 0 ? 20_000 + n * 5 + (args.largeRefits + 2) * n * 1 : 0;
}

/** What the replicas suite needs of the budget: start-ups, the refits (~150 ms each here), the large refit, the takeovers. */
function replicasBudgetMs(args: Args): number {
  return 30_000 + args.refits * 2 * 150 + largeRefitBudgetMs(args) + takeoverBudgetMs(args);
}

/** What one scale size needs of the budget: start-ups, registration, the idle window, fan-outs and listings. */
function scaleSizeBudgetMs(args: Args, engines: number): number {
  return (args.idleSeconds + 60 + engines / 40) * 1000;
}

function scaleBudgetMs(args: Args): number {
  return args.scaleSizes.reduce((sum, n) => sum + scaleSizeBudgetMs(args, n), 0);
}

/**
 * What a gateway's log says went wrong: its first error lines (pino level ≥ 50, or about EMFILE or
 * the open-file limit), and its warnings counted by message.
 */
function gatewayLogDigest(logPath: string, limit = 5): { errors: string[]; warnings: Record<string, number> } {
  const errors: string[] = [];
  const warnings: Record<string, number> = {};
  if (!existsSync(logPath)) return { errors, warnings };
  for (const line of readFileSync(logPath, 'utf8').split('\n')) {
    const serious = /EMFILE|open-file limit/i.test(line) || /"level":(5\d|60)/.test(line);
    const warning = /"level":4\d/.test(line);
    if (!serious && !warning) continue;
    let text: string;
    try {
      const j = JSON.parse(line) as { msg?: string; err?: { message?: string; code?: string }; error?: string };
      text = [j.msg, j.err?.code, j.err?.message ?? j.error].filter(Boolean).join(': ');
    } catch {
      text = line.slice(0, 300);
    }
    if (serious && errors.length < limit) errors.push(text);
    if (warning) {
      // Ports and ids vary per engine: counted by the message with its numbers folded.
      const key = text.replace(/\d+/g, 'N').slice(0, 200);
      warnings[key] = (warnings[key] ?? 0) + 1;
    }
  }
  const top = Object.entries(warnings)
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit);
  return { errors, warnings: Object.fromEntries(top) };
}

async function runScale(ctx: RunContext, deadline: number): Promise<string> {
  const { args, logDir, profileDir } = ctx;
  const started = performance.now();
  const results: ScaleSizeResult[] = [];
  for (const [k, size] of args.scaleSizes.entries()) {
    const r = emptyScaleResult(size);
    results.push(r);
    const t0 = performance.now();
    // Sizes left share what is left of the budget by what they need, so time a small size does
    // not use goes to the larger ones.
    const rest = args.scaleSizes.slice(k).reduce((sum, n) => sum + scaleSizeBudgetMs(args, n), 0);
    const sizeDeadline = t0 + ((deadline - t0 - 10_000) * scaleSizeBudgetMs(args, size)) / rest;
    if (sizeDeadline - t0 < 30_000) {
      r.errors.push({ step: 'start', message: 'not run: skipped for the time budget' });
      continue;
    }
    process.stdout.write(`bench: scale: ${size} engines (${Math.round((sizeDeadline - t0) / 1000)} s of budget)...\n`);
    let fleet: Fleet | undefined;
    let gw: Awaited<ReturnType<typeof startGateway>> | undefined;
    let stage = 'fleet start';
    try {
      fleet = await startFleet(size, logDir, [], `scale-${size}`, Math.min(60_000 + size * 20, sizeDeadline - performance.now()));
      r.fleet = { processes: fleet.children.length, start_s: Math.round(performance.now() - t0) / 1000, fd_limits: fleet.fdLimits };
      process.stdout.write(`bench: scale: ${size} engines listening in ${fleet.children.length} processes after ${r.fleet.start_s} s\n`);
      stage = 'gateway start';
      const g0 = performance.now();
      gw = await startGateway(['--log-level', args.logLevel], logDir, profileDir, `scale-${size}`);
      r.gateway = { start_s: Math.round(performance.now() - g0) / 1000, fd_limit: fdLimitOf(gw.child.pid) };
      stage = 'measure';
      await measureScale(
        {
          gatewayUrl: gw.url,
          engineUrls: fleet.urls,
          gatewayPid: gw.child.pid,
          natsPid: firstChildPid(gw.child.pid),
          deadline: sizeDeadline,
          idleSeconds: args.idleSeconds,
          registerConcurrency: args.registerConcurrency,
          fanouts: 20,
          fanoutWarmup: 3,
          listings: 10,
          progress: (line) => process.stdout.write(`bench: scale: ${size}: ${line}\n`),
        },
        r,
      );
    } catch (err) {
      r.errors.push({ step: stage, message: (err as Error).message });
    } finally {
      r.wall_seconds = Math.round(performance.now() - t0) / 1000;
      // A profiled gateway writes its profile on the way out: give it longer before SIGKILL.
      if (gw) {
        await gw.child.stop(profileDir ? 60_000 : 10_000);
        live.delete(gw.child);
        const digest = gatewayLogDigest(gw.child.logPath);
        r.gateway_errors = digest.errors;
        r.gateway_warnings = digest.warnings;
      }
      await fleet?.stop();
    }
    if (r.errors.length) ctx.keepLogs = true;
    const reg = r.register;
    process.stdout.write(
      `bench: scale: ${size} engines: ${r.errors.map((e) => `FAILED at ${e.step}: ${e.message.slice(0, 300)}; `).join('')}accepted ${reg?.accepted_s ?? '–'} s, ready ${reg?.ready_s ?? '–'} s, RSS ${r.rss_mib.ready?.total ?? '–'} MiB, idle ${r.idle?.total_pct ?? '–'}%, fan-out p50 ${r.fanout?.envelope.p50 ?? '–'} ms, /v1/rl/workers p50 ${r.listing?.rl_workers.wall.p50 ?? '–'} ms (${r.wall_seconds} s)\n`,
    );
  }

  const setupLine =
    'Set-up: per size a fresh engine fleet and a fresh gateway. Gateway: the `rlgate gateway` CLI in its own process ' +
    `(\`--enable-rl\`, log level ${args.logLevel}, every other setting as shipped: health probes every 5 s, fan-out concurrency by call), ` +
    'with its embedded nats-server. Engines: SGLang simulators, at most ' +
    `${ENGINES_PER_FLEET_PROCESS.toLocaleString('en-US')} per bench/sim-fleet.ts process, the processes started at once. Client (this process): undici; ` +
    `${args.registerConcurrency} registrations in flight, then one request at a time. Idle window ${args.idleSeconds} s. ` +
    `Every child's open-file limit raised to its hard limit.${args.profile ? ' **Gateway under --cpu-prof: timings inflated.**' : ''}`;
  const md = scaleMarkdown(results, { date: ctx.date.toISOString().slice(0, 10), machine: machineLine(ctx), setup: setupLine });
  writeResult(
    ctx,
    'scale',
    {
      benchmark: 'scale',
      date: ctx.date.toISOString(),
      machine: { ...ctx.machine, loadavg_end: loadavg() },
      setup: {
        sizes: args.scaleSizes,
        gateway: { process: 'rlgate gateway CLI child', flags: ['--enable-rl', '--log-level', args.logLevel], nats: 'embedded', profiled: args.profile },
        engines: `sglang simulators, at most ${ENGINES_PER_FLEET_PROCESS} per sim-fleet child process`,
        register_concurrency: args.registerConcurrency,
        idle_seconds: args.idleSeconds,
        fanout: {
          route: 'POST /v1/rl/engine/flush_cache',
          selector: `${FANOUT_GROUP.key}=${FANOUT_GROUP.value}`,
          engines: FANOUT_GROUP.engines,
          iterations: 20,
          warmup: 3,
        },
        listings: 10,
      },
      goals: SCALE_GOALS,
      verdicts: scaleGoals(results),
      results,
      wall_seconds: Math.round(performance.now() - started) / 1000,
    },
    md,
  );
  return md;
}

async function main(args: Args): Promise<void> {
  const started = performance.now();
  const runDeadline = started + args.maxSeconds * 1000;
  const date = new Date();
  const ctx: RunContext = {
    args,
    date,
    stamp: date
      .toISOString()
      .replace(/:/g, '-')
      .replace(/\.\d+Z$/, 'Z'),
    logDir: mkdtempSync(join(os.tmpdir(), 'rlgate-bench-')),
    profileDir: undefined,
    machine: machineFacts(),
  };
  ctx.profileDir = args.profile ? join(ctx.logDir, 'profiles') : undefined;
  process.stdout.write(`bench: child logs in ${ctx.logDir} (removed after a clean run)\n`);

  const parts: string[] = [];
  // The rollout suite runs last and takes what is left; the others leave it a third of the run.
  const rolloutShare = args.suites.includes('rollout') ? (args.maxSeconds * 1000) / 3 : 0;
  const scaleOutShare =
    args.suites.includes('scale') && args.scaleOut !== 'off' ? scaleOutBudgetMs(args.scaleOutReplicas, args.scaleOutEngines, args.idleSeconds) : 0;
  const scaleShare = args.suites.includes('scale') ? (args.scaleOut === 'only' ? 0 : scaleBudgetMs(args)) + scaleOutShare + rolloutShare : rolloutShare;
  const replicasShare = args.suites.includes('replicas') ? replicasBudgetMs(args) : 0;
  const generateShare = args.suites.includes('generate') ? generateBudgetMs(args) : 0;
  // First: start-up CPU is read before the other suites have loaded the machine.
  if (args.suites.includes('startup')) parts.push(await runStartupSuite(ctx));
  if (args.suites.includes('fanout')) parts.push(await runFanout(ctx, runDeadline - generateShare - replicasShare - scaleShare));
  if (args.suites.includes('generate')) parts.push(await runGenerate(ctx, runDeadline - replicasShare - scaleShare));
  if (args.suites.includes('replicas')) parts.push(await runReplicas(ctx, runDeadline - scaleShare));
  if (args.suites.includes('scale') && args.scaleOut !== 'only') parts.push(await runScale(ctx, runDeadline - rolloutShare - scaleOutShare));
  if (args.suites.includes('scale') && args.scaleOut !== 'off') parts.push(await runScaleOutSuite(ctx, runDeadline - rolloutShare));
  if (args.suites.includes('refit-under-load')) parts.push(await runRefitSuite(ctx));
  if (args.suites.includes('inflight')) parts.push(await runInflightSuite(ctx));
  if (args.suites.includes('rollout')) parts.push(await runRolloutSuite(ctx, runDeadline));
  if (!args.profile) writeFileSync(join(args.out, 'latest.md'), latestTables(args.out));
  if (ctx.profileDir) {
    for (const f of readdirSync(ctx.profileDir).filter((f) => f.endsWith('.cpuprofile'))) {
      process.stdout.write(
        `\nprofile ${join(ctx.profileDir, f)}\n${profileSummary(JSON.parse(readFileSync(join(ctx.profileDir, f), 'utf8')) as CpuProfile, 25)}\n`,
      );
    }
  } else if (ctx.keepLogs) {
    process.stdout.write(`bench: a step failed; the child logs stay in ${ctx.logDir}\n`);
  } else {
    // Logs matter only when something failed (then this line is never reached, or keepLogs is set).
    rmSync(ctx.logDir, { recursive: true, force: true });
  }
}

/** The scale suite's second part: replicas on a 3-node NATS cluster (bench/scale-out.ts). */
async function runScaleOutSuite(ctx: RunContext, deadline: number): Promise<string> {
  const { args } = ctx;
  process.stdout.write(`bench: scale-out: ${args.scaleOutReplicas} replicas, ${args.scaleOutEngines} engines, a 3-node NATS cluster...\n`);
  const result = await runScaleOut({
    replicas: args.scaleOutReplicas,
    engines: args.scaleOutEngines,
    logDir: ctx.logDir,
    logLevel: args.logLevel,
    idleSeconds: args.idleSeconds,
    leaseSecs: args.scaleOutLeaseSecs,
    registerConcurrency: args.registerConcurrency,
    deadline,
    progress: (line) => process.stdout.write(`bench: scale-out: ${line}\n`),
  });
  if (result.errors.length || process.env.RLGATE_BENCH_KEEP_LOGS) ctx.keepLogs = true;
  const setupLine =
    `Set-up: three nats-server nodes (JetStream, routed to each other, loopback), ${result.replicas} gateway replicas (the \`rlgate gateway\` CLI, ` +
    `each its own process, \`--enable-rl\`, \`--nats-url\` naming all three nodes, log level ${args.logLevel}, every other setting as shipped: ` +
    `lease ${args.scaleOutLeaseSecs} s${args.scaleOutLeaseSecs === 5 ? '' : ' (shipped: 5 s)'}, probes every 5 s at most 100/s per replica); ` +
    'SGLang simulators (`--token-rate 0`), at most 2,500 per bench/sim-fleet.ts process; each replica registers an equal share (`POST /workers` through it, so it owns them). Client (this process): undici.';
  const md = scaleOutMarkdown(result, { date: ctx.date.toISOString().slice(0, 10), machine: machineLine(ctx), setup: setupLine });
  writeResult(ctx, 'scaleout', { benchmark: 'scaleout', date: ctx.date.toISOString(), machine: { ...ctx.machine, loadavg_end: loadavg() }, ...result }, md);
  return md;
}

async function runStartupSuite(ctx: RunContext): Promise<string> {
  const { md, json, goal } = await measureStartup({ runs: ctx.args.startupRuns, machineLine: machineLine(ctx), date: ctx.date });
  writeResult(ctx, 'startup', json, md);
  process.stdout.write(`bench: startup: ${goal}\n`);
  return md;
}

async function runInflightSuite(ctx: RunContext): Promise<string> {
  const { runs, fdLimit, processes } = await runInflight({ sizes: ctx.args.inflightSizes, logDir: ctx.logDir });
  const md = inflightMarkdown(runs, fdLimit, processes, machineLine(ctx));
  writeResult(ctx, 'inflight', { machine: ctx.machine, fd_limit: fdLimit, gateway_processes: processes, runs }, md);
  return md;
}

async function runRefitSuite(ctx: RunContext): Promise<string> {
  const { args } = ctx;
  const runs = await runRefitUnderLoad({
    engines: args.refitEngines,
    callers: args.refitCallers,
    steadySeconds: 10,
    logDir: ctx.logDir,
    seed: args.rolloutSeed,
  });
  const md = refitUnderLoadMarkdown(runs, args.refitEngines, args.refitCallers, machineLine(ctx));
  writeResult(ctx, 'refit-under-load', { machine: ctx.machine, engines: args.refitEngines, callers: args.refitCallers, load_ms: LOAD_MS, runs }, md);
  return md;
}

async function runRolloutSuite(ctx: RunContext, deadline: number): Promise<string> {
  const { args } = ctx;
  const runs = await runRollout({
    sizes: args.rolloutSizes,
    policies: args.rolloutPolicies,
    workloads: args.rolloutWorkloads,
    seed: args.rolloutSeed,
    logDir: ctx.logDir,
    // One event per 16 tokens: SGLang's --stream-interval, so long outputs stream without an event a token.
    simArgs: ['--stream-interval', '16'],
    deadline,
  });
  const md = rolloutMarkdown(runs, machineLine(ctx));
  writeResult(ctx, 'rollout', { machine: ctx.machine, seed: args.rolloutSeed, cost_model: REALISTIC, runs }, md);
  return md;
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
setTimeout(
  () => {
    process.stderr.write('bench: watchdog fired; stopping everything\n');
    void stopAll(1);
  },
  (args.maxSeconds + 120) * 1000,
).unref();
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
