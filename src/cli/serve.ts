// `rlgate serve`: a fleet and its gateway in one command (as SMG's `smg serve`): N engines of a
// kind — the simulators, or a real engine command given as a template — each registered with the
// gateway (TokenSpeed workers with their `rl.control_url` stamped), supervised (a crashed engine
// is restarted with backoff) and stopped with it.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, helpText, loadConfig } from '../gateway/config.ts';
import { startGateway, type Gateway } from '../gateway/gateway.ts';
import { pickFreePort } from '../bus/server.ts';
import { launchSim, type SimProcess } from '../sim/launcher.ts';

const HELP = `usage: rlgate serve [--engines N] [--kind sglang|tokenspeed|zmq] [--engine-cmd TEMPLATE]
                    [--engine-base-port P] [--rl-control-port C] [--servicer-impl python|rust]
                    [--model M] [--tp-size N] [gateway flags...]

  --engines N            engines to launch (default 2)
  --kind K               sglang (HTTP), tokenspeed (gRPC + HTTP control app) or zmq (default sglang)
  --engine-cmd TEMPLATE  launch a real engine instead of a simulator; placeholders {url}, {port},
                         {rl_control_port}, {index}, {model}, {tp_size}, {servicer_impl}, e.g.
                         'python -m smg_grpc_servicer.tokenspeed --model-path {model} --port {port}
                          --rl-control-port {rl_control_port} --servicer-impl {servicer_impl}'
  --engine-base-port P   engine i listens on P+i (default: free ports)
  --rl-control-port C    TokenSpeed control app of engine i on C+i (default: free ports)
  --servicer-impl X      passed to TokenSpeed workers (python|rust)
  --engine-ready-secs S  how long an engine may take to accept connections (default 120)

Gateway flags (see rlgate gateway --help) follow; --enable-rl is implied.`;

const OWN_FLAGS = new Set(['engines', 'kind', 'engine-cmd', 'engine-base-port', 'rl-control-port', 'servicer-impl', 'model', 'tp-size', 'engine-ready-secs']);

interface EngineSlot {
  index: number;
  url: string;
  controlUrl: string | null;
  port: number;
  controlPort: number | null;
  proc?: SimProcess | ChildProcess;
  restarts: number;
}

export async function serveCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write(`${HELP}\n\n${helpText('rlgate serve')}\n`);
    return 0;
  }
  const own = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i]!.replace(/^--/, '').split('=')[0]!;
    if (!OWN_FLAGS.has(name)) {
      rest.push(argv[i]!);
      continue;
    }
    const inline = argv[i]!.includes('=') ? argv[i]!.slice(argv[i]!.indexOf('=') + 1) : undefined;
    own.set(name, inline ?? argv[++i] ?? '');
  }
  const kind = own.get('kind') ?? 'sglang';
  if (!['sglang', 'tokenspeed', 'zmq'].includes(kind)) return usage(`--kind must be sglang, tokenspeed or zmq, got \`${kind}\``);
  const count = Number(own.get('engines') ?? 2);
  if (!Number.isInteger(count) || count < 1 || count > 256) return usage('--engines must be an integer in 1..256');
  const servicer = own.get('servicer-impl');
  if (servicer !== undefined && servicer !== 'python' && servicer !== 'rust') return usage('--servicer-impl must be python or rust');
  const template = own.get('engine-cmd');
  const readyMs = Number(own.get('engine-ready-secs') ?? 120) * 1000;

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
    for (let i = 0; i < count; i++) {
      const basePort = own.get('engine-base-port');
      const port = basePort ? Number(basePort) + i : await pickFreePort();
      const ctlBase = own.get('rl-control-port');
      const controlPort = kind === 'sglang' ? null : ctlBase ? Number(ctlBase) + i : await pickFreePort();
      const slot: EngineSlot = {
        index: i,
        port,
        controlPort,
        // ZMQ engines dial the gateway's lane: the worker URL names the lane's ipc path, and the
        // port is the simulator's admin port.
        url: kind === 'sglang' ? `http://127.0.0.1:${port}` : kind === 'tokenspeed' ? `grpc://127.0.0.1:${port}` : `ipc://${join(laneDir(), `engine-${i}`)}`,
        controlUrl: controlPort === null ? null : `http://127.0.0.1:${controlPort}`,
        restarts: 0,
      };
      slots.push(slot);
    }
    const start = async (slot: EngineSlot) => {
      slot.proc = template ? await startTemplate(template, slot, own, servicer, readyMs) : await startSim(kind, slot, own, servicer);
      const child = 'child' in slot.proc ? slot.proc.child : slot.proc;
      child.once('exit', (code, signal) => {
        if (stopping) return;
        slot.restarts++;
        const delay = Math.min(30_000, 500 * 2 ** Math.min(slot.restarts, 6));
        process.stderr.write(`rlgate serve: engine ${slot.index} (${slot.url}) exited (code ${code}, signal ${signal}); restarting in ${delay} ms\n`);
        setTimeout(() => void (!stopping && start(slot).catch((err) => process.stderr.write(`rlgate serve: restart failed: ${(err as Error).message}\n`))), delay).unref();
      });
    };
    await Promise.all(slots.map(start));

    gw = await startGateway(config);
    for (const slot of slots) {
      const labels: Record<string, string> = {};
      if (slot.controlUrl) labels['rl.control_url'] = slot.controlUrl;
      // The ZMQ handshake names no model: say which one, so model-less requests resolve to it.
      if (kind === 'zmq') labels.model_id = own.get('model') ?? (template ? 'unknown' : 'sim-model');
      gw.services.registry.register({ url: slot.url, runtime_type: kind === 'sglang' ? 'sglang' : 'tokenspeed', labels });
    }
    process.stdout.write(
      `${JSON.stringify({ event: 'serving', url: gw.url, nats_url: gw.natsUrl, engines: slots.map((s) => ({ url: s.url, control_url: s.controlUrl, pid: pidOf(s.proc) })) })}\n`,
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

async function startSim(kind: string, slot: EngineSlot, own: Map<string, string>, servicer: string | undefined): Promise<SimProcess> {
  const args = ['--port', String(slot.port)];
  if (own.has('model')) args.push('--model', own.get('model')!);
  if (kind === 'sglang' && own.has('tp-size')) args.push('--tp-size', own.get('tp-size')!);
  if (kind === 'tokenspeed') {
    args.push('--rl-control-port', String(slot.controlPort));
    if (own.has('tp-size')) args.push('--attn-tp-size', own.get('tp-size')!);
    if (servicer) args.push('--servicer-impl', servicer);
  }
  if (kind === 'zmq') {
    args.push('--url', slot.url, '--rl-control-port', String(slot.controlPort));
    if (own.has('tp-size')) args.push('--tp-size', own.get('tp-size')!);
  }
  return launchSim(kind, args, { stderr: 'inherit' });
}

async function startTemplate(template: string, slot: EngineSlot, own: Map<string, string>, servicer: string | undefined, readyMs: number): Promise<ChildProcess> {
  const vars: Record<string, string> = {
    url: slot.url,
    port: String(slot.port),
    rl_control_port: String(slot.controlPort ?? ''),
    index: String(slot.index),
    model: own.get('model') ?? '',
    tp_size: own.get('tp-size') ?? '1',
    servicer_impl: servicer ?? 'python',
  };
  const argv = splitCommand(template).map((a) => a.replace(/\{(\w+)\}/g, (m, k: string) => vars[k] ?? m));
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
  process.stderr.write(`rlgate serve: ${message}\n${HELP}\n`);
  return 2;
}
