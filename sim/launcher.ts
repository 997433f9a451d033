// Runs engine simulators as child processes (one PID each: node, no npm or shell in between)
// and learns their URL from the `{"event":"listening"}` line they print.
// Used by the demo, `rlgate serve`-style launches and the benchmarks; tests have fixtures of
// their own on top of it.

import { spawn, type ChildProcess } from 'node:child_process';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

// The simulators are launched from the same tree as this module: the compiled build (dist/, `.js`)
// runs compiled simulators with plain node, the sources (`.ts`) run theirs through tsx's loader.
const EXT = extname(fileURLToPath(import.meta.url));
const LOADER = EXT === '.ts' ? ['--import', 'tsx'] : [];
const ENTRY: Record<string, string> = {
  sglang: fileURLToPath(new URL(`./sglang/main${EXT}`, import.meta.url)),
  zmq: fileURLToPath(new URL(`./zmq/main${EXT}`, import.meta.url)),
  tokenspeed: fileURLToPath(new URL(`./tokenspeed/main${EXT}`, import.meta.url)),
};

export interface SimProcess {
  kind: string;
  url: string;
  port: number;
  pid: number;
  child: ChildProcess;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL: the engine dies as a crashed GPU process would. */
  kill(): Promise<void>;
}

export async function launchSim(kind: string, args: string[] = [], opts: { startTimeoutMs?: number; stderr?: 'inherit' | 'ignore' } = {}): Promise<SimProcess> {
  const entry = ENTRY[kind];
  if (!entry) throw new Error(`unknown simulator kind \`${kind}\` (known: ${Object.keys(ENTRY).join(', ')})`);
  const hasPort = args.some((a) => a === '--port' || a.startsWith('--port='));
  // stdin stays open for the child's lifetime: if this process dies, the pipe closes and the
  // simulator exits by itself (--exit-on-stdin-close) instead of living on as an orphan.
  const child = spawn(process.execPath, [...LOADER, entry, ...(hasPort ? [] : ['--port', '0']), '--exit-on-stdin-close', ...args], {
    stdio: ['pipe', 'pipe', opts.stderr ?? 'ignore'],
    env: { ...process.env },
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const listening = await new Promise<{ url: string; port: number }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${kind} simulator did not start within ${opts.startTimeoutMs ?? 20_000} ms`));
    }, opts.startTimeoutMs ?? 20_000);
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        const msg = JSON.parse(line) as { event?: string; url?: string; port?: number };
        if (msg.event === 'listening' && msg.url && msg.port) {
          clearTimeout(timer);
          resolve({ url: msg.url, port: msg.port });
        }
      } catch {
        // not a JSON line: ignore
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${kind} simulator exited before listening (code ${code}, signal ${signal})`));
    });
  });
  const stop = async (graceMs = 3_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(t);
  };
  const kill = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGKILL');
    await exited;
  };
  return { kind, url: listening.url, port: listening.port, pid: child.pid!, child, stop, kill };
}
