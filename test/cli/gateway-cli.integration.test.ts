// `rlgate gateway` as a real process: SMG's flag names are accepted, an invalid RL configuration
// stops startup with a non-zero exit and SMG's message on stderr before anything listens, and a
// valid one serves /v1/rl until SIGTERM.

import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { request } from 'undici';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// A gateway that wrongly starts is killed after this long, so a failing test cannot hang.
const KILL_AFTER_MS = 45_000;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The environment without any RLGATE_* variable, so the host's settings cannot leak in. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_')) env[k] = v;
  return { ...env, ...extra };
}

function runGateway(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'gateway', ...args], {
    cwd: REPO_ROOT,
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), KILL_AFTER_MS);
  return new Promise((res) =>
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      res({ code, signal, stdout, stderr });
    }),
  );
}

describe('rlgate gateway: startup errors', () => {
  it("each invalid RL setting exits non-zero with SMG's message on stderr and never listens", async () => {
    // One process per startup error, by SMG's flag names. (The same rules through the
    // environment and a config file are covered in test/gateway/config.test.ts.)
    const cases: Array<{ args: string[]; env?: Record<string, string>; message: string }> = [
      { args: ['--rl-version-policy', 'latest-only'], message: 'rl.version_policy requires rl.enabled' },
      { args: ['--enable-rl', '--rl-control-timeout-secs', '0'], message: 'rl.control_timeout_secs must be >= 1' },
      { args: ['--enable-rl', '--rl-fanout-concurrency', '0'], message: 'rl.fanout_concurrency must be >= 1' },
    ];
    // Port 0 everywhere: a gateway that wrongly starts binds nothing fixed.
    const runs = await Promise.all(cases.map((c) => runGateway(['--port', '0', ...c.args], c.env)));
    runs.forEach((r, i) => {
      const what = `${JSON.stringify(cases[i]!.args)} ${JSON.stringify(cases[i]!.env ?? {})}: ${r.stderr}`;
      expect(r.signal, what).toBeNull(); // exited by itself, not killed by the guard timer
      expect(r.code, what).not.toBe(0);
      expect(r.code, what).not.toBeNull();
      expect(r.stderr, what).toContain(cases[i]!.message);
      expect(r.stdout, what).not.toContain('listening');
    });
  }, 90_000);
});

describe('rlgate gateway: a valid RL launch', () => {
  it("accepts SMG's flag names, serves /v1/rl, and exits 0 on SIGTERM", async () => {
    const proc = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'src/cli/main.ts',
        'gateway',
        '--port',
        '0',
        '--log-level',
        'silent',
        '--enable-rl',
        '--rl-control-timeout-secs',
        '1',
        '--rl-fanout-concurrency',
        '2',
        '--rl-version-policy',
        'latest-only',
      ],
      { cwd: REPO_ROOT, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => proc.once('exit', (code, signal) => res({ code, signal })));
    const guard = setTimeout(() => proc.kill('SIGKILL'), KILL_AFTER_MS);
    try {
      const url = await new Promise<string>((res, rej) => {
        createInterface({ input: proc.stdout }).on('line', (line) => {
          try {
            const ev = JSON.parse(line) as { event?: string; url?: string };
            if (ev.event === 'listening' && ev.url) res(ev.url);
          } catch {
            // not the listening line
          }
        });
        void exited.then((e) => rej(new Error(`gateway exited early (${JSON.stringify(e)}): ${stderr}`)));
      });
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const res = await request(`${url}/v1/rl/workers`);
      expect(res.statusCode).toBe(200);
      expect(await res.body.json()).toEqual({ protocol_version: 1, workers: [], total: 0 });
      const sel = await request(`${url}/v1/rl/engine/flush_cache`, { method: 'POST', body: '{}' });
      expect(sel.statusCode).toBe(400);
      expect(((await sel.body.json()) as { error: string }).error).toBe('selector_required');
    } finally {
      proc.kill('SIGTERM');
      const e = await exited;
      clearTimeout(guard);
      expect(e.code, stderr).toBe(0);
    }
  }, 60_000);
});
