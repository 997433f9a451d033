// Secrets out of sight (issue 11, item 5), over real `rlgate` processes and a real nats-server
// that asks for a password: no refused or unreachable `nats://user:pass@` URL prints the password,
// a URL with userinfo is shown masked, `--admin-key-file` and RLGATE_ADMIN_KEY pass the admin key
// off the command line, and `--admin-key` on it warns that other users can read it.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { closedPort } from '../fixtures/closed-port.ts';
import { CLI } from '../fixtures/entry.ts';
import { startGatewayProcess } from '../fixtures/gateway-process.ts';
import { startSecureNats, type SecureNats } from '../fixtures/secure-nats.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PASSWORD = 's3cret';
const WARNING = /--admin-key on the command line is visible to other users/;

/** Runs `rlgate <args>` to its exit (at most 30 s) and returns its code and everything it printed. */
function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | string; out: string }> {
  return new Promise((res) => {
    const proc = spawn(process.execPath, [...CLI, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      res({ code: code ?? signal ?? -1, out });
    });
  });
}

async function status(url: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await request(url, { headers });
  await res.body.dump();
  return res.statusCode;
}

describe('secrets out of sight', () => {
  let nats: SecureNats;
  let dir: string;

  beforeAll(async () => {
    nats = await startSecureNats({ conf: `authorization { user: rl, password: "${PASSWORD}" }` });
    dir = mkdtempSync(join(tmpdir(), 'rlgate-secrets-'));
  });
  afterAll(async () => {
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a refused or unreachable nats://user:pass@ URL never prints the password, on any command', { timeout: 240_000 }, async () => {
    const down = `nats://rl:${PASSWORD}@127.0.0.1:${await closedPort()}`;
    const cases: Array<[string, string[], NodeJS.ProcessEnv?]> = [
      ['gateway, unreachable server', ['gateway', '--port', '0', '--nats-url', down]],
      ['gateway, NATS_URL unreachable', ['gateway', '--port', '0'], { NATS_URL: down }],
      ['gateway, wrong password', ['gateway', '--port', '0', '--nats-url', `nats://rl:x${PASSWORD}@127.0.0.1:${nats.port}`]],
      ['gateway, URL that does not parse', ['gateway', '--port', '0', '--nats-url', `nats://rl:${PASSWORD}@[bad`]],
      ['gateway, unencoded slash in the password', ['gateway', '--port', '0', '--nats-url', `nats://rl:${PASSWORD}/x@127.0.0.1:4222`]],
      ['gateway, wrong scheme', ['gateway', '--port', '0', '--nats-url', `http://rl:${PASSWORD}@127.0.0.1:4222`]],
      ['gateway, URL given without its flag', ['gateway', '--port', '0', down]],
      ['gateway, worker URL with a password', ['gateway', '--port', '0', '--worker-urls', `http://rl:${PASSWORD}@127.0.0.1:1`]],
      ['watch, unreachable server', ['watch', '--nats-url', down]],
      ['refit, unreachable server', ['refit', '--nats-url', down, '--version', '2', '--model-path', '/m']],
      ['refit, URL that does not parse', ['refit', '--nats-url', `nats://rl:${PASSWORD}@[bad`, '--version', '2', '--model-path', '/m']],
      ['refit, URL given without its flag', ['refit', down, '--version', '2', '--model-path', '/m']],
      ['watch, URL given without its flag', ['watch', down]],
      ['trainer, URL given without its flag', ['trainer', down, '--version', '2']],
      ['serve, URL given without its flag', ['serve', down]],
    ];
    // Three at a time: each is a process start (and some wait out a connection attempt).
    const results: Array<{ what: string; code: number | string; out: string }> = [];
    const queue = [...cases];
    await Promise.all(
      [0, 1, 2].map(async () => {
        for (let c = queue.shift(); c; c = queue.shift()) results.push({ what: c[0], ...(await runCli(c[1], c[2])) });
      }),
    );
    expect(results).toHaveLength(cases.length);
    for (const { what, code, out } of results) {
      expect(code, `${what}: ${out}`).not.toBe(0);
      expect(out.trim(), what).not.toBe('');
      expect(out, what).not.toContain(PASSWORD);
    }
  });

  it('a gateway joined with nats://user:pass@ shows the URL masked, and so does rlgate watch', async () => {
    const url = `nats://rl:${PASSWORD}@127.0.0.1:${nats.port}`;
    const gw = await startGatewayProcess(['--nats-url', url, '--log-level', 'info']);
    try {
      expect(await status(`${gw.url}/health`)).toBe(200);
      const watch = spawn(process.execPath, [...CLI, 'watch', '--nats-url', url], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      watch.stdout.on('data', (c: Buffer) => (out += c.toString()));
      watch.stderr.on('data', (c: Buffer) => (out += c.toString()));
      const deadline = Date.now() + 30_000;
      while (!/watching/.test(out) && Date.now() < deadline && watch.exitCode === null) await new Promise((r) => setTimeout(r, 50));
      watch.kill('SIGTERM');
      await new Promise((r) => watch.once('exit', r));
      expect(out).toMatch(/watching .* on nats:\/\/\*\*\*@127\.0\.0\.1/);
      expect(out).not.toContain(PASSWORD);
    } finally {
      await gw.stop();
    }
    expect(gw.stderr()).not.toContain(PASSWORD);
  });

  it('--admin-key-file passes the key off the command line: 401 without it, 200 with it, no warning', async () => {
    const key = 'file-key-7f3a';
    const file = join(dir, 'admin-key');
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    const gw = await startGatewayProcess(['--admin-key-file', file]);
    try {
      expect(await status(`${gw.url}/v1/rl/workers`)).toBe(401);
      expect(await status(`${gw.url}/v1/rl/workers`, { authorization: 'Bearer wrong' })).toBe(401);
      expect(await status(`${gw.url}/v1/rl/workers`, { authorization: `Bearer ${key}` })).toBe(200);
      expect(readFileSync(`/proc/${gw.pid}/cmdline`, 'utf8')).not.toContain(key);
    } finally {
      await gw.stop();
    }
    expect(gw.stderr()).not.toMatch(WARNING);
    expect(gw.stderr()).not.toContain(key);
  });

  it('RLGATE_ADMIN_KEY passes the key too, without a warning', async () => {
    const key = 'env-key-91bc';
    const gw = await startGatewayProcess([], { ...process.env, RLGATE_ADMIN_KEY: key });
    try {
      expect(await status(`${gw.url}/v1/rl/workers`)).toBe(401);
      expect(await status(`${gw.url}/v1/rl/workers`, { authorization: `Bearer ${key}` })).toBe(200);
    } finally {
      await gw.stop();
    }
    expect(gw.stderr()).not.toMatch(WARNING);
  });

  it('--admin-key on the command line still works, and warns at start that other users can read it', async () => {
    const key = 'argv-key-5d20';
    const gw = await startGatewayProcess(['--admin-key', key]);
    try {
      expect(await status(`${gw.url}/v1/rl/workers`, { authorization: `Bearer ${key}` })).toBe(200);
    } finally {
      await gw.stop();
    }
    expect(gw.stderr()).toMatch(WARNING);
    expect(gw.stderr()).not.toContain(key);
  });

  it('an admin key file that cannot be used, or a key given twice, stops the start with a clear error that shows no key', async () => {
    const file = join(dir, 'twice');
    writeFileSync(file, 'twice-key-0e4d\n');
    const empty = join(dir, 'empty');
    writeFileSync(empty, '\n');
    const cases: Array<[string, string[], RegExp, NodeJS.ProcessEnv?]> = [
      ['missing file', ['--admin-key-file', join(dir, 'none')], /cannot read the admin key file .*none \(ENOENT\)/],
      ['empty file', ['--admin-key-file', empty], /admin key file .*empty/],
      ['file and flag', ['--admin-key-file', file, '--admin-key', 'other-key-1'], /not both/],
      ['file and environment', ['--admin-key-file', file], /not both/, { RLGATE_ADMIN_KEY: 'other-key-2' }],
    ];
    for (const [what, args, message, env] of cases) {
      const { code, out } = await runCli(['gateway', '--port', '0', ...args], env);
      expect(code, what).toBe(2);
      expect(out, what).toMatch(message);
      expect(out, what).not.toMatch(/twice-key|other-key/);
    }
  });
});
