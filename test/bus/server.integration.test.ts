// The embedded nats-server: start/stop leaves no process and no temp dir behind, the monitor and
// limits are what we asked for, a missing binary names the Debian package, and the child dies
// with a parent that exits without stop() or is SIGKILLed.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_PAYLOAD, findNatsServer, NatsServerNotFound, startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';

const SERVER_TS = fileURLToPath(new URL('../../src/bus/server.ts', import.meta.url));

/** Running, and not a zombie waiting for an init that may be slow to reap orphans. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Polls a condition with a deadline (waiting for an effect, not measuring speed). */
async function eventually(cond: () => boolean, what: string, deadlineMs = 15_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const started: EmbeddedNats[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.stop()));
});

describe('startEmbeddedNats', () => {
  it('starts on a loopback port and stop() kills the process and removes its temp dir', async () => {
    const s = await startEmbeddedNats();
    started.push(s);
    expect(s.url).toBe(`nats://127.0.0.1:${s.port}`);
    expect(s.port).toBeGreaterThan(0);
    expect(alive(s.pid)).toBe(true);
    expect(existsSync(s.dir)).toBe(true);
    expect(s.storeDir.startsWith(s.dir)).toBe(true);

    await s.stop();
    expect(alive(s.pid)).toBe(false);
    expect(existsSync(s.dir)).toBe(false);
    await s.stop(); // idempotent
  });

  it('serves JetStream health and the raised max_payload on a loopback monitor', async () => {
    const s = await startEmbeddedNats({ monitorPort: 0, serverName: 'rlgate_test_monitor' });
    started.push(s);
    expect(s.monitorUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const health = await fetch(`${s.monitorUrl}/healthz?js-enabled-only=true`);
    expect(health.status).toBe(200);
    const varz = (await (await fetch(`${s.monitorUrl}/varz`)).json()) as Record<string, unknown>;
    expect(varz.max_payload).toBe(DEFAULT_MAX_PAYLOAD);
    expect(varz.host).toBe('127.0.0.1');
    expect(varz.server_name).toBe('rlgate_test_monitor');
    expect((varz.jetstream as { config?: unknown } | undefined)?.config).toBeTruthy();
  });

  it('two servers in one process get different ports and stores', async () => {
    const [a, b] = await Promise.all([startEmbeddedNats(), startEmbeddedNats()]);
    started.push(a, b);
    expect(a.port).not.toBe(b.port);
    expect(a.dir).not.toBe(b.dir);
  });

  it('passes every server log line to the log option', async () => {
    const lines: string[] = [];
    const s = await startEmbeddedNats({ log: (l) => lines.push(l) });
    started.push(s);
    expect(lines.some((l) => l.includes('Starting JetStream'))).toBe(true);
  });

  it('names the Debian package when the binary is missing', async () => {
    const before = process.env.RLGATE_NATS_SERVER;
    process.env.RLGATE_NATS_SERVER = '/nonexistent/rlgate/nats-server';
    try {
      const err = await startEmbeddedNats().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NatsServerNotFound);
      expect((err as NatsServerNotFound).code).toBe('nats_server_not_found');
      expect((err as Error).message).toContain('apt-get install nats-server');
      expect((err as Error).message).toContain('/nonexistent/rlgate/nats-server');
    } finally {
      if (before === undefined) delete process.env.RLGATE_NATS_SERVER;
      else process.env.RLGATE_NATS_SERVER = before;
    }
  });

  it('finds the binary through RLGATE_NATS_SERVER when it is valid', () => {
    const bin = findNatsServer();
    expect(findNatsServer({ RLGATE_NATS_SERVER: bin, PATH: '' })).toBe(bin);
  });
});

// A separate Node process owns a server; the test plays the parent's death.
async function spawnOwner(then: 'exit' | 'hang') {
  const script = [
    `import { startEmbeddedNats } from ${JSON.stringify(SERVER_TS)};`,
    `const s = await startEmbeddedNats();`,
    `console.log(JSON.stringify({ pid: s.pid, dir: s.dir, deathGuard: s.deathGuard }));`,
    then === 'exit' ? `process.exit(0);` : `setInterval(() => {}, 1000);`,
  ].join('\n');
  const owner = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: owner.stdout! }).once('line', resolve);
    owner.once('exit', (code) => reject(new Error(`owner exited early with ${code}`)));
  });
  return { owner, info: JSON.parse(first) as { pid: number; dir: string; deathGuard: string } };
}

describe('a server outliving its owner', () => {
  it('is killed and its temp dir removed when the owner exits without stop()', async () => {
    const { owner, info } = await spawnOwner('exit');
    try {
      await eventually(() => owner.exitCode !== null, 'owner exit');
      await eventually(() => !alive(info.pid), 'nats-server to die');
      expect(existsSync(info.dir)).toBe(false);
    } finally {
      if (alive(info.pid)) process.kill(info.pid, 'SIGKILL');
      rmSync(info.dir, { recursive: true, force: true });
    }
  });

  it('is killed by the parent-death signal when the owner is SIGKILLed', async () => {
    const { owner, info } = await spawnOwner('hang');
    try {
      expect(info.deathGuard).toBe('pdeathsig');
      expect(alive(info.pid)).toBe(true);
      owner.kill('SIGKILL');
      await eventually(() => !alive(info.pid), 'nats-server to die after its owner');
    } finally {
      if (owner.exitCode === null && owner.signalCode === null) owner.kill('SIGKILL');
      if (alive(info.pid)) process.kill(info.pid, 'SIGKILL');
      rmSync(info.dir, { recursive: true, force: true }); // no JS ran in the owner to remove it
    }
  });
});
