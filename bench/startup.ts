// Start-up cost of the gateway CLI: CPU (user + system, from /proc) and wall time of the gateway's
// node process from spawn to its `{"event":"listening"}` line, the compiled build (bin/rlgate.mjs
// running the bundle in dist/bundle/cli/, scripts/bundle.mjs) next to the sources through tsx (warm and cold tsx cache) and next to node doing
// nothing but printing such a line (the floor), runs interleaved; then what the compiled gateway's
// imports cost, group by group: what it loads to listen, and what it loads only later (the first
// engine of a kind, the first /docs request). The goal (issue 19): ≤ 800 ms of CPU to listening,
// compiled, at the median. It measures only; it never builds dist/ (run `npm run build` first).
// `npm run bench -- --suites startup [--startup-runs N]` runs it as a suite of bench/run.ts;
// standalone: node --import tsx bench/startup.ts [--runs N] [--out DIR]. Both write
// <out>/startup-<ISO date>.{json,md} (default bench/results/).

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createInterface } from 'node:readline';
import { childEnv, loadavg, machineFacts, procStat, ROOT } from './children.ts';
import { summarize, type Summary } from './stats.ts';

const GOAL_CPU_MS = 800;
const GATEWAY_ARGS = ['gateway', '--port', '0', '--enable-rl'];

interface Mode {
  name: string;
  command: string;
  argv: string[];
  /** A fresh TMPDIR per run: tsx keeps its compile cache under the temporary directory. */
  freshTmp: boolean;
}

const MODES: Mode[] = [
  // The floor: node itself printing the line. On a loaded machine every figure rises with it.
  {
    name: 'node_floor',
    command: 'node -e <print the listening line, then wait>',
    argv: ['-e', `console.log('{"event":"listening"}'); setTimeout(() => {}, 60_000);`],
    freshTmp: false,
  },
  { name: 'compiled', command: `node bin/rlgate.mjs ${GATEWAY_ARGS.join(' ')}`, argv: ['bin/rlgate.mjs', ...GATEWAY_ARGS], freshTmp: false },
  {
    name: 'tsx_warm',
    command: `node --import tsx src/cli/main.ts ${GATEWAY_ARGS.join(' ')}`,
    argv: ['--import', 'tsx', 'src/cli/main.ts', ...GATEWAY_ARGS],
    freshTmp: false,
  },
  {
    name: 'tsx_cold',
    command: `node --import tsx src/cli/main.ts ${GATEWAY_ARGS.join(' ')} (empty tsx cache)`,
    argv: ['--import', 'tsx', 'src/cli/main.ts', ...GATEWAY_ARGS],
    freshTmp: true,
  },
];

interface Sample {
  cpu_ms: number;
  wall_ms: number;
  nats_server_cpu_ms: number | null;
}

/** The gateway's first child (its embedded nats-server), from /proc (Linux). */
function natsChildOf(pid: number): number | undefined {
  try {
    const first = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
    return first ? Number(first) : undefined;
  } catch {
    return undefined;
  }
}

async function once(mode: Mode): Promise<Sample> {
  const tmp = mode.freshTmp ? mkdtempSync(join(os.tmpdir(), 'rlgate-startup-')) : undefined;
  const env = tmp ? { ...childEnv(), TMPDIR: tmp } : childEnv();
  const t0 = process.hrtime.bigint();
  const child = spawn(process.execPath, mode.argv, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'ignore'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    return await new Promise<Sample>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${mode.name}: no listening line within 60 s`)), 60_000);
      child.once('exit', (code, signal) => reject(new Error(`${mode.name}: exited before listening (code ${code}, signal ${signal})`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (!line.includes('"listening"')) return;
        const cpu = procStat(child.pid!);
        const wall = Number(process.hrtime.bigint() - t0) / 1e6;
        const nats = natsChildOf(child.pid!);
        clearTimeout(timer);
        if (!cpu) return reject(new Error(`${mode.name}: no /proc entry for the gateway`));
        resolve({ cpu_ms: cpu.cpuMs, wall_ms: wall, nats_server_cpu_ms: nats === undefined ? null : (procStat(nats)?.cpuMs ?? null) });
      });
    });
  } finally {
    child.kill('SIGTERM');
    const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(kill);
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

// Where the compiled gateway's start-up goes: one fresh node process imports these groups in this
// order and reports the CPU each adds (a group's cost is what it adds to those before it). The
// first two are what the gateway loads to listen; the others it loads only when first needed.
const GROUPS: Array<{ name: string; what: string; imports: string[]; atStart: boolean }> = [
  {
    name: 'listen_deps',
    what: 'fastify, @fastify/swagger, @sinclair/typebox (+ compiler), NATS (transport, jetstream, kv), xstate, pino, prom-client',
    imports: [
      'fastify',
      '@fastify/swagger',
      '@sinclair/typebox',
      '@sinclair/typebox/compiler',
      '@nats-io/transport-node',
      '@nats-io/jetstream',
      '@nats-io/kv',
      'xstate',
      'pino',
      'prom-client',
    ],
    atStart: true,
  },
  { name: 'ours', what: 'dist/src/cli/gateway.js and the rest of what it imports', imports: ['./dist/src/cli/gateway.js'], atStart: true },
  { name: 'undici', what: 'undici: at the first HTTP engine or control call', imports: ['undici'], atStart: false },
  {
    name: 'grpc',
    what: '@grpc/grpc-js, @grpc/proto-loader: at the first TokenSpeed gRPC engine',
    imports: ['@grpc/grpc-js', '@grpc/proto-loader'],
    atStart: false,
  },
  { name: 'zmq', what: 'zeromq, msgpackr: at the first ZMQ engine', imports: ['zeromq', 'msgpackr'], atStart: false },
  {
    name: 'huggingface',
    what: '@huggingface/tokenizers, @huggingface/jinja: at the first tokenizer or chat template',
    imports: ['@huggingface/tokenizers', '@huggingface/jinja'],
    atStart: false,
  },
  {
    name: 'swagger_ui',
    what: '@fastify/swagger-ui (+ @fastify/static): at the first /docs request',
    imports: ['@fastify/swagger-ui', '@fastify/static'],
    atStart: false,
  },
];

async function breakdown(): Promise<Record<string, number>> {
  const script = [
    'const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };',
    'const out = { node: cpu() };',
    `for (const g of ${JSON.stringify(GROUPS.map((g) => ({ name: g.name, imports: g.imports })))}) {`,
    '  const t = cpu();',
    '  for (const m of g.imports) await import(m.startsWith(".") ? new URL(m, `file://${process.cwd()}/`).href : m);',
    '  out[g.name] = cpu() - t;',
    '}',
    'out.total = cpu();',
    'console.log(JSON.stringify(out));',
  ].join('\n');
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'pipe', 'inherit'] });
  let text = '';
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`breakdown: exit code ${code}`);
  return JSON.parse(text) as Record<string, number>;
}

function parse(argv: string[]): { runs: number; out: string } {
  let runs = 7;
  let out = join(ROOT, 'bench', 'results');
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--runs') runs = Number(argv[++i]);
    else if (argv[i] === '--out') out = argv[++i]!;
    else throw new Error(`unknown flag ${argv[i]} (flags: --runs N, --out DIR)`);
  }
  if (!Number.isInteger(runs) || runs < 1) throw new Error('--runs wants a positive integer');
  return { runs, out };
}

const f = (v: number) => (Number.isFinite(v) ? String(Math.round(v)) : '–');

export interface StartupResult {
  md: string;
  json: Record<string, unknown>;
  /** The goal's verdict line, as printed. */
  goal: string;
}

/** Measures `runs` interleaved start-ups per mode and the import breakdown; writes nothing. */
export async function measureStartup(o: { runs: number; machineLine: string; date: Date }): Promise<StartupResult> {
  const { runs, machineLine, date } = o;
  if (!existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js'))) throw new Error('dist/ is not built: run `npm run build` first');
  const machine = machineFacts();
  // One unmeasured run each: the file cache and tsx's compile cache (warm mode) are primed.
  for (const mode of MODES) await once(mode);
  const samples: Record<string, Sample[]> = Object.fromEntries(MODES.map((m) => [m.name, []]));
  for (let i = 0; i < runs; i++) {
    for (const mode of MODES) {
      const s = await once(mode);
      samples[mode.name]!.push(s);
      process.stderr.write(`${mode.name} run ${i + 1}: cpu ${f(s.cpu_ms)} ms, wall ${f(s.wall_ms)} ms\n`);
    }
  }
  const parts: Array<Record<string, number>> = [];
  for (let i = 0; i < runs; i++) parts.push(await breakdown());
  const partP50 = (k: string) => summarize(parts.map((p) => p[k] ?? Number.NaN)).p50;
  const atListening = summarize(parts.map((p) => GROUPS.filter((g) => g.atStart).reduce((sum, g) => sum + (p[g.name] ?? 0), p.node ?? 0))).p50;
  const summary: Record<string, { cpu_ms: Summary; wall_ms: Summary }> = {};
  for (const mode of MODES) {
    const list = samples[mode.name]!;
    summary[mode.name] = { cpu_ms: summarize(list.map((s) => s.cpu_ms)), wall_ms: summarize(list.map((s) => s.wall_ms)) };
  }
  const compiled = summary.compiled!.cpu_ms;
  const met = compiled.p50 <= GOAL_CPU_MS;
  const goal =
    `Goal: ≤ ${GOAL_CPU_MS} ms of CPU to a listening gateway (compiled build, median): **${met ? 'met' : 'missed'}**, ` +
    `${f(compiled.p50)} ms at the median (${f(compiled.min)} to ${f(compiled.max)} ms over ${runs} runs).`;
  const md = [
    `# Gateway start-up: compiled build vs tsx, ${date.toISOString().slice(0, 10)}`,
    '',
    machineLine,
    '',
    `Each run spawns the command below from the repository root and reads the gateway's node process`,
    `(all its threads) from /proc when its \`{"event":"listening"}\` line arrives: CPU = user + system`,
    `(10 ms ticks), wall = spawn → line. The embedded nats-server is a separate process, not counted`,
    `(its CPU at that moment in the last column). ${runs} runs per mode, interleaved, after one`,
    "unmeasured run each; all values in ms. CPU figures rise with the machine's load (see the floor).",
    '',
    '| mode | command | CPU p50 | CPU min / max | wall p50 | wall min / max | nats-server CPU p50 |',
    '|---|---|---:|---:|---:|---:|---:|',
    ...MODES.map((m) => {
      const s = summary[m.name]!;
      const nats = summarize(samples[m.name]!.map((x) => x.nats_server_cpu_ms ?? Number.NaN).filter(Number.isFinite));
      return `| ${m.name} | \`${m.command}\` | ${f(s.cpu_ms.p50)} | ${f(s.cpu_ms.min)} / ${f(s.cpu_ms.max)} | ${f(s.wall_ms.p50)} | ${f(s.wall_ms.min)} / ${f(s.wall_ms.max)} | ${f(nats.p50)} |`;
    }),
    '',
    goal,
    '',
    '## Where the compiled start-up goes',
    '',
    'One fresh node process imports these groups in this order (the imports only; nothing starts)',
    `and reports the CPU each adds to those before it: median of ${runs} processes, in ms. The gateway`,
    'loads the first two to listen; the others only when first needed. The groups are imported',
    'unbundled (node_modules and dist/src/, a file at a time): what each costs before bundling; the',
    'bundle the CLI runs loads the same code in a few files: compare the `compiled` CPU above with `at start`.',
    '',
    '| group | what | loaded | CPU p50 |',
    '|---|---|---|---:|',
    `| node | node's own start | at start | ${f(partP50('node'))} |`,
    ...GROUPS.map((g) => `| ${g.name} | ${g.what} | ${g.atStart ? 'at start' : 'later'} | ${f(partP50(g.name))} |`),
    `| at start | node + the groups loaded at start | | ${f(atListening)} |`,
    `| total | all of the above | | ${f(partP50('total'))} |`,
    '',
  ].join('\n');
  const json = {
    benchmark: 'startup',
    date: date.toISOString(),
    machine: { ...machine, loadavg_end: loadavg() },
    goal_cpu_ms: GOAL_CPU_MS,
    goal_met: met,
    runs,
    modes: MODES.map((m) => ({ name: m.name, command: m.command })),
    summary,
    samples,
    import_groups: GROUPS,
    import_cpu_ms: parts,
  };
  return { md, json, goal };
}

async function main(): Promise<void> {
  const { runs, out } = parse(process.argv.slice(2));
  const date = new Date();
  const m = machineFacts();
  const machineLine = `Machine: ${m.cores} cores (${m.cpu_model}), ${m.os}, Node ${m.node}; load average (1/5/15 min) at start ${m.loadavg_start.join(' ')}; commit ${m.commit}; ${date.toISOString()}.`;
  const { md, json } = await measureStartup({ runs, machineLine, date });
  const stamp = date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, `startup-${stamp}.json`), `${JSON.stringify(json, null, 1)}\n`);
  writeFileSync(join(out, `startup-${stamp}.md`), md);
  process.stdout.write(`${md}\nwritten: ${join(out, `startup-${stamp}.{json,md}`)}\n`);
}

// Standalone only: bench/run.ts imports measureStartup.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`startup bench: ${(err as Error).message}\n`);
      process.exit(1);
    },
  );
}
