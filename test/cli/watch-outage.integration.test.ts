// `rlgate watch` when its nats-server goes away: it says so (stderr, or a JSON line on stdout with
// --json), says so again when the server is back on the same port, and exits 0 on SIGINT or
// SIGTERM within 5 s even while it is disconnected.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';
import { until } from '../fixtures/gateway-process.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const EXIT_BOUND_MS = 5_000;

interface Watch {
  proc: ChildProcess;
  out(): string;
  err(): string;
  exited: Promise<number | null>;
}

const servers: EmbeddedNats[] = [];
const watches: Watch[] = [];
afterEach(async () => {
  for (const w of watches.splice(0)) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function server(port = 0): Promise<EmbeddedNats> {
  const s = await startEmbeddedNats({ port, restart: false });
  servers.push(s);
  return s;
}

async function watch(url: string, extra: string[] = []): Promise<Watch> {
  const proc = spawn(process.execPath, ['bin/rlgate.mjs', 'watch', '--nats-url', url, ...extra], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const w: Watch = { proc, out: () => out, err: () => err, exited: new Promise((res) => proc.once('exit', (code) => res(code))) };
  watches.push(w);
  await until('watch to subscribe', 20_000, async () => err.includes('watching'));
  return w;
}

describe('rlgate watch without its server', () => {
  it('prints disconnected and reconnected, and exits 0 on SIGINT while disconnected', async () => {
    const first = await server();
    const plain = await watch(first.url);
    const json = await watch(first.url, ['--json']);

    await first.stop();
    await until('the disconnect line', EXIT_BOUND_MS, async () => plain.err().includes('NATS disconnected'));
    await until('the disconnect JSON line', EXIT_BOUND_MS, async () => json.out().includes('"bus":"disconnected"'));
    const line = JSON.parse(json.out().trim().split('\n').at(-1)!);
    expect(line).toMatchObject({ bus: 'disconnected' });
    expect(typeof line.time).toBe('string');

    await server(first.port);
    await until('the reconnect line', 10_000, async () => plain.err().includes('NATS reconnected'));
    await until('the reconnect JSON line', 10_000, async () => json.out().includes('"bus":"reconnected"'));

    await servers[1]!.stop();
    await until('the second disconnect', EXIT_BOUND_MS, async () => plain.err().split('NATS disconnected').length === 3);
    const t0 = Date.now();
    plain.proc.kill('SIGINT');
    json.proc.kill('SIGTERM');
    const codes = await Promise.all([plain.exited, json.exited]);
    expect(codes).toEqual([0, 0]);
    expect(Date.now() - t0).toBeLessThan(EXIT_BOUND_MS);
  }, 60_000);
});
