// `rlgate serve`: a fleet and its gateway in one command (as SMG's `smg serve`): engines of one
// kind or several (`--kind sglang:3,tokenspeed:2`) — the simulators, or a real engine command given
// as a template — each registered with the gateway (TokenSpeed workers with their `rl.control_url`
// stamped), supervised (a crashed engine is restarted with backoff) and stopped with it. Flags
// after `--` go to every engine; SGLang's spellings are renamed for each simulator (spellings.ts).

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, helpText, loadConfig } from '../gateway/config.ts';
import { redactUrl } from '../obs/redact-url.ts';
import type { Gateway } from '../gateway/gateway.ts';
import { pickFreePort } from '../bus/server.ts';
import { launchSim, type SimProcess } from '../../sim/launcher.ts';
import { simFlags, type SimKind } from '../../sim/spellings.ts';

const HELP = `usage: rlgate serve [--kind K[:N][,K[:N]...]] [--engines N] [--engine-cmd TEMPLATE]
                    [--engine-base-port P] [--rl-control-port C] [--servicer-impl python|rust]
                    [--model M] [--tp-size N] [gateway flags...] [-- engine flags...]

  --kind K[:N],...       the engines' kinds, each with its count: sglang (HTTP), tokenspeed (gRPC +
                         HTTP control app) or zmq, e.g. sglang:3,tokenspeed:2 (default sglang); a
                         kind without :N gets --engines
  --engines N            engines of each kind listed without a count (default 2)
  --engine-cmd TEMPLATE  launch a real engine instead of a simulator (one kind only); placeholders
                         {url}, {port}, {rl_control_port}, {index}, {model}, {tp_size},
                         {servicer_impl}, e.g.
                         'python -m smg_grpc_servicer.tokenspeed --model-path {model} --port {port}
                          --rl-control-port {rl_control_port} --servicer-impl {servicer_impl}'
  --engine-base-port P   engine i (counted across kinds, in --kind order) listens on P+i
                         (default: free ports)
  --rl-control-port C    TokenSpeed/ZMQ control app of engine i on C+i (default: free ports)
  --servicer-impl X      passed to TokenSpeed workers (python|rust)
  --model M              every engine's model (also --model-path)
  --tp-size N            every engine's tensor parallelism (also --tp, --tensor-parallel-size)
  --engine-ready-secs S  how long an engine may take to accept connections (default 120)
  -- FLAGS...            everything after -- goes to every engine: to each simulator (see
                         rlgate sim <kind> --help), with SGLang's spellings --tp/--tp-size/
                         --tensor-parallel-size, --dp/--dp-size/--data-parallel-size, --pp/--pp-size,
                         --model/--model-path and --max-running-requests renamed to the simulator's
                         own; or appended to --engine-cmd. A flag a simulator does not take is a
                         usage error. --port, --url and --rl-control-port are serve's to set.

Gateway flags (see rlgate gateway --help) come before --; --enable-rl is implied.`;

const KINDS: readonly SimKind[] = ['sglang', 'tokenspeed', 'zmq'];
const ALIASES: Record<string, string> = { tp: 'tp-size', 'tensor-parallel-size': 'tp-size', 'model-path': 'model' };
const OWN_FLAGS = new Set([
  'engines',
  'kind',
  'engine-cmd',
  'engine-base-port',
  'rl-control-port',
  'servicer-impl',
  'model',
  'tp-size',
  'engine-ready-secs',
  ...Object.keys(ALIASES),
]);
/** Engine flags serve sets per engine itself. */
const SERVE_SETS = new Set(['--port', '--url', '--rl-control-port']);
const MAX_ENGINES = 256;

interface EngineSlot {
  index: number;
  kind: SimKind;
  url: string;
  controlUrl: string | null;
  port: number;
  controlPort: number | null;
  proc?: SimProcess | ChildProcess;
  restarts: number;
}

/** `sglang:3,tokenspeed:2` (a kind without a count gets `engines`) → one kind per engine, in order. */
export function parseKinds(text: string, engines: number): SimKind[] {
  const out: SimKind[] = [];
  for (const entry of text.split(',').map((e) => e.trim())) {
    const [kind, count, extra] = entry.split(':');
    if (!KINDS.includes(kind as SimKind) || extra !== undefined) {
      throw new Error(`--kind takes sglang, tokenspeed or zmq, each with an optional :count (sglang:3,tokenspeed:2), got \`${entry}\``);
    }
    const n = count === undefined ? engines : Number(count);
    if (!/^\d+$/.test(count ?? String(engines)) || n < 1) throw new Error(`--kind ${entry}: the count must be a whole number ≥ 1`);
    for (let i = 0; i < n && out.length <= MAX_ENGINES; i++) out.push(kind as SimKind);
  }
  if (out.length > MAX_ENGINES) throw new Error(`at most ${MAX_ENGINES} engines in all`);
  return out;
}

/**
 * Checks each kind's simulator flags (`argsFor`) the way that simulator will, so a bad one is a usage
 * error before anything starts.
 */
async function checkSimFlags(kinds: readonly SimKind[], argsFor: (kind: SimKind) => string[]): Promise<void> {
  const parsers: Record<SimKind, () => Promise<(argv: string[]) => { help: boolean }>> = {
    sglang: async () => (await import('../../sim/sglang/options.ts')).parseArgs,
    tokenspeed: async () => (await import('../../sim/tokenspeed/cli.ts')).parseArgs,
    zmq: async () => (await import('../../sim/zmq/options.ts')).parseArgs,
  };
  for (const kind of new Set(kinds)) {
    let help: boolean;
    try {
      ({ help } = (await parsers[kind]())(argsFor(kind)));
    } catch (err) {
      throw new Error(`the ${kind} simulator refuses the engine flags: ${(err as Error).message.replace(/ \(see --help\)$/, '')} (rlgate sim ${kind} --help)`);
    }
    if (help) throw new Error(`--help after -- would start no engine: see rlgate sim ${kind} --help`);
  }
}

export async function serveCommand(argv: string[]): Promise<number> {
  const cut = argv.indexOf('--');
  const head = cut < 0 ? argv : argv.slice(0, cut);
  const engineFlags = cut < 0 ? [] : argv.slice(cut + 1);
  if (head.includes('--help') || head.includes('-h')) {
    process.stdout.write(`${HELP}\n\n${helpText('rlgate serve')}\n`);
    return 0;
  }
  const own = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < head.length; i++) {
    const raw = head[i]!.replace(/^--/, '').split('=')[0]!;
    if (!head[i]!.startsWith('--') || !OWN_FLAGS.has(raw)) {
      rest.push(head[i]!);
      continue;
    }
    const inline = head[i]!.includes('=') ? head[i]!.slice(head[i]!.indexOf('=') + 1) : undefined;
    own.set(ALIASES[raw] ?? raw, inline ?? head[++i] ?? '');
  }
  const engines = Number(own.get('engines') ?? 2);
  if (!Number.isInteger(engines) || engines < 1 || engines > MAX_ENGINES) return usage(`--engines must be an integer in 1..${MAX_ENGINES}`);
  let kinds: SimKind[];
  try {
    kinds = parseKinds(own.get('kind') ?? 'sglang', engines);
  } catch (err) {
    return usage((err as Error).message);
  }
  const servicer = own.get('servicer-impl');
  if (servicer !== undefined && servicer !== 'python' && servicer !== 'rust') return usage('--servicer-impl must be python or rust');
  const template = own.get('engine-cmd');
  if (template !== undefined && new Set(kinds).size > 1) return usage('--engine-cmd launches engines of one kind: give one kind in --kind');
  const readyMs = Number(own.get('engine-ready-secs') ?? 120) * 1000;
  const reserved = engineFlags.find((f) => SERVE_SETS.has(f.split('=')[0]!));
  if (reserved) return usage(`${reserved.split('=')[0]} after -- is serve's to set (see --engine-base-port and --rl-control-port)`);
  if (template === undefined) {
    try {
      await checkSimFlags(kinds, (kind) => [...simOwnFlags(kind, own, servicer), ...simFlags(kind, engineFlags)]);
    } catch (err) {
      return usage((err as Error).message);
    }
  }

  let config;
  try {
    config = loadConfig([...rest, '--enable-rl']);
  } catch (err) {
    if (err instanceof ConfigError) return usage(err.message);
    throw err;
  }

  const slots: EngineSlot[] = [];
  let gw: Gateway | undefined;
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    await gw?.close();
    await Promise.all(slots.map((s) => stopProc(s.proc)));
  };

  try {
    for (const [i, kind] of kinds.entries()) {
      const basePort = own.get('engine-base-port');
      const port = basePort ? Number(basePort) + i : await pickFreePort();
      const ctlBase = own.get('rl-control-port');
      const controlPort = kind === 'sglang' ? null : ctlBase ? Number(ctlBase) + i : await pickFreePort();
      slots.push({
        index: i,
        kind,
        port,
        controlPort,
        // ZMQ engines dial the gateway's lane: the worker URL names the lane's ipc path, and the
        // port is the simulator's admin port.
        url: kind === 'sglang' ? `http://127.0.0.1:${port}` : kind === 'tokenspeed' ? `grpc://127.0.0.1:${port}` : `ipc://${join(laneDir(), `engine-${i}`)}`,
        controlUrl: controlPort === null ? null : `http://127.0.0.1:${controlPort}`,
        restarts: 0,
      });
    }
    const start = async (slot: EngineSlot) => {
      slot.proc = template ? await startTemplate(template, slot, own, servicer, readyMs, engineFlags) : await startSim(slot, own, servicer, engineFlags);
      const child = 'child' in slot.proc ? slot.proc.child : slot.proc;
      child.once('exit', (code, signal) => {
        if (stopping) return;
        slot.restarts++;
        const delay = Math.min(30_000, 500 * 2 ** Math.min(slot.restarts, 6));
        process.stderr.write(`rlgate serve: engine ${slot.index} (${slot.url}) exited (code ${code}, signal ${signal}); restarting in ${delay} ms\n`);
        setTimeout(
          () => void (!stopping && start(slot).catch((err) => process.stderr.write(`rlgate serve: restart failed: ${(err as Error).message}\n`))),
          delay,
        ).unref();
      });
    };
    await Promise.all(slots.map(start));

    // Loaded after the flags are checked: a usage error never pays for the gateway's code.
    const { startGateway } = await import('../gateway/gateway.ts');
    gw = await startGateway(config);
    for (const slot of slots) {
      const labels: Record<string, string> = {};
      if (slot.controlUrl) labels['rl.control_url'] = slot.controlUrl;
      // The ZMQ handshake names no model: say which one, so model-less requests resolve to it.
      if (slot.kind === 'zmq') labels.model_id = zmqModel(own, engineFlags, template);
      gw.services.registry.register({ url: slot.url, runtime_type: slot.kind === 'sglang' ? 'sglang' : 'tokenspeed', labels });
    }
    process.stdout.write(
      `${JSON.stringify({ event: 'serving', url: gw.url, nats_url: gw.natsUrl, engines: slots.map((s) => ({ kind: s.kind, url: s.url, control_url: s.controlUrl, pid: pidOf(s.proc) })) })}\n`,
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    return 0;
  } finally {
    await stopAll();
  }
}

/** The flags serve's own options turn into for one simulator kind. */
function simOwnFlags(kind: SimKind, own: Map<string, string>, servicer: string | undefined): string[] {
  const args: string[] = [];
  if (own.has('model')) args.push('--model', own.get('model')!);
  if (own.has('tp-size')) args.push('--tp-size', own.get('tp-size')!);
  if (kind === 'tokenspeed' && servicer) args.push('--servicer-impl', servicer);
  return simFlags(kind, args);
}

/** The model a ZMQ engine serves: the last --model/--model-path among the engine flags, else serve's. */
function zmqModel(own: Map<string, string>, engineFlags: readonly string[], template: string | undefined): string {
  let model = own.get('model');
  const flags = simFlags('zmq', engineFlags);
  for (let i = 0; i < flags.length; i++) {
    if (flags[i] === '--model') model = flags[i + 1] ?? model;
    else if (flags[i]!.startsWith('--model=')) model = flags[i]!.slice('--model='.length);
  }
  return model ?? (template ? 'unknown' : 'sim-model');
}

async function startSim(slot: EngineSlot, own: Map<string, string>, servicer: string | undefined, engineFlags: readonly string[]): Promise<SimProcess> {
  const args = ['--port', String(slot.port)];
  if (slot.kind === 'tokenspeed') args.push('--rl-control-port', String(slot.controlPort));
  if (slot.kind === 'zmq') args.push('--url', slot.url, '--rl-control-port', String(slot.controlPort));
  // serve's own flags first, so the engine flags after -- win where both set the same thing.
  args.push(...simOwnFlags(slot.kind, own, servicer), ...simFlags(slot.kind, engineFlags));
  return launchSim(slot.kind, args, { stderr: 'inherit' });
}

async function startTemplate(
  template: string,
  slot: EngineSlot,
  own: Map<string, string>,
  servicer: string | undefined,
  readyMs: number,
  engineFlags: readonly string[],
): Promise<ChildProcess> {
  const vars: Record<string, string> = {
    url: slot.url,
    port: String(slot.port),
    rl_control_port: String(slot.controlPort ?? ''),
    index: String(slot.index),
    model: own.get('model') ?? '',
    tp_size: own.get('tp-size') ?? '1',
    servicer_impl: servicer ?? 'python',
  };
  const argv = [...splitCommand(template).map((a) => a.replace(/\{(\w+)\}/g, (m, k: string) => vars[k] ?? m)), ...engineFlags];
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'inherit', 'inherit'] });
  // A ZMQ engine listens on nothing (it dials the gateway's lane): registration shows its state.
  if (!slot.url.startsWith('ipc://')) await waitForPort(slot.port, readyMs, child);
  return child;
}

let lanes: string | undefined;
/** One private folder per serve process for the ZMQ lanes' ipc sockets. */
function laneDir(): string {
  lanes ??= mkdtempSync(join(tmpdir(), 'rlgate-serve-'));
  return lanes;
}

/** Splits a command template on whitespace, honouring single and double quotes (no shell). */
export function splitCommand(template: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  for (let m = re.exec(template); m; m = re.exec(template)) out.push(m[1] ?? m[2] ?? m[3]!);
  if (out.length === 0) throw new Error('--engine-cmd is empty');
  return out;
}

async function waitForPort(port: number, timeoutMs: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the engine command exited with code ${child.exitCode} before listening on ${port}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = createConnection({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  child.kill('SIGTERM');
  throw new Error(`the engine did not listen on port ${port} within ${timeoutMs} ms`);
}

async function stopProc(p: SimProcess | ChildProcess | undefined): Promise<void> {
  if (!p) return;
  if ('stop' in p) return p.stop();
  if (p.exitCode !== null || p.signalCode !== null) return;
  p.kill('SIGTERM');
  await new Promise<void>((resolve) => {
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      resolve();
    }, 5_000);
    p.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

function pidOf(p: SimProcess | ChildProcess | undefined): number | null {
  if (!p) return null;
  return 'child' in p ? p.pid : (p.pid ?? null);
}

function usage(message: string): number {
  process.stderr.write(`rlgate serve: ${redactUrl(message)}\n${HELP}\n`);
  return 2;
}
