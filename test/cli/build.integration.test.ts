// The packaged entry point runs the compiled build: `node bin/rlgate.mjs` with a module-resolution
// guard (in NODE_OPTIONS, so every node process it starts has it too) that refuses every `.ts`
// module and the tsx package. The sources through tsx cannot start under it (checked here too),
// so whatever answers is dist/: --help, a gateway that listens, the SGLang simulator with its
// broadcast transport, and `serve --kind tokenspeed`, whose gateway and simulator both load proto/
// from the build. Needs dist/ (`npm test` builds it first).

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../fixtures/gateway-process.ts';
import { alive, commandOf, groupMembers } from '../fixtures/pids.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const FALLBACK_NOTICE = 'running the TypeScript sources through tsx';

const HOOKS = `
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (/\\.[cm]?tsx?$/.test(new URL(r.url).pathname) || r.url.includes('/node_modules/tsx/')) {
    throw new Error('build test guard: refused to load ' + r.url);
  }
  return r;
}
`;
const GUARD = `import { register } from 'node:module';\nregister(new URL('./hooks.mjs', import.meta.url));\n`;

let guardDir = '';
let guardEnv: NodeJS.ProcessEnv = {};

beforeAll(() => {
  expect(existsSync(join(REPO_ROOT, 'dist/src/cli/main.js')), 'dist/ is not built: run `npm run build`').toBe(true);
  guardDir = mkdtempSync(join(os.tmpdir(), 'rlgate-build-test-'));
  writeFileSync(join(guardDir, 'hooks.mjs'), HOOKS);
  writeFileSync(join(guardDir, 'guard.mjs'), GUARD);
  guardEnv = { ...cleanEnv(), NODE_OPTIONS: `--import=${pathToFileURL(join(guardDir, 'guard.mjs')).href}` };
});
afterAll(() => {
  if (guardDir) rmSync(guardDir, { recursive: true, force: true });
});

/** The environment without any RLGATE_* variable, so the host's settings cannot leak in. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_') && k !== 'NODE_OPTIONS') env[k] = v;
  return env;
}

interface Started {
  child: ChildProcess;
  pgid: number;
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const started: Started[] = [];
afterEach(() => {
  // A failed test leaves nothing behind: every process of every group it started is killed.
  for (const s of started.splice(0)) for (const pid of groupMembers(s.pgid)) process.kill(pid, 'SIGKILL');
});

/** `node <argv>` from the repository root, under the guard, in a process group of its own. */
function start(argv: string[]): Started {
  const child = spawn(process.execPath, argv, { cwd: REPO_ROOT, env: guardEnv, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.once('exit', (code, signal) => res({ code, signal })));
  const stderr: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => stderr.push(line));
  const s: Started = { child, pgid: child.pid!, stderr, exited };
  started.push(s);
  return s;
}

/** The first stdout line that is JSON with this `event`; rejects if the process exits first. */
function eventLine<T>(s: Started, event: string): Promise<T> {
  return new Promise<T>((res, rej) => {
    createInterface({ input: s.child.stdout! }).on('line', (line) => {
      try {
        const m = JSON.parse(line) as { event?: string };
        if (m.event === event) res(m as T);
      } catch {
        // not a JSON line
      }
    });
    void s.exited.then(({ code, signal }) =>
      rej(new Error(`exited before \`${event}\` (code ${code}, signal ${signal}): ${s.stderr.join('\n').slice(-2000)}`)),
    );
  });
}

async function run(argv: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const s = start(argv);
  let stdout = '';
  s.child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  const { code } = await s.exited;
  await new Promise((r) => setImmediate(r)); // the last stderr lines
  return { code, stdout, stderr: s.stderr.join('\n') };
}

/** SIGTERM to the group leader; every process of its group gone within 10 s, exit code 0. */
async function stopAll(s: Started): Promise<void> {
  s.child.kill('SIGTERM');
  const { code } = await s.exited;
  await until(`every process of group ${s.pgid} to exit`, 10_000, async () => groupMembers(s.pgid).length === 0).catch((err) => {
    throw new Error(
      `${(err as Error).message}; left: ${groupMembers(s.pgid)
        .map((p) => `${p} ${commandOf(p)}`)
        .join('; ')}`,
    );
  });
  expect(code).toBe(0);
}

describe('bin/rlgate.mjs runs the compiled build', () => {
  it('the guard refuses the sources through tsx (so the checks below can fail)', async () => {
    const r = await run(['--import', 'tsx', 'src/cli/main.ts', '--help']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('build test guard: refused to load');
  });

  it('--help answers with no .ts module and no tsx loaded', async () => {
    const r = await run(['bin/rlgate.mjs', '--help']);
    expect(r.stderr).not.toContain('build test guard');
    expect(r.stderr).not.toContain(FALLBACK_NOTICE);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage: rlgate <command>/);
    expect(r.stdout).toContain('gateway');
  });

  it('`gateway --port 0 --enable-rl` listens on 127.0.0.1, answers, and stops on SIGTERM leaving no process', async () => {
    const s = start(['bin/rlgate.mjs', 'gateway', '--port', '0', '--enable-rl', '--host', '127.0.0.1', '--log-level', 'warn']);
    const listening = await eventLine<{ url: string; nats_url: string }>(s, 'listening');
    expect(listening.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const r = await request(`${listening.url}/v1/rl/workers`);
    expect(r.statusCode).toBe(200);
    expect(((await r.body.json()) as { total: number }).total).toBe(0);
    expect(s.stderr.join('\n')).not.toContain(FALLBACK_NOTICE);
    await stopAll(s);
  }, 60_000);

  it('`sim sglang` finds its broadcast transport, a module it loads by a computed specifier, in dist/', async () => {
    const s = start(['bin/rlgate.mjs', 'sim', 'sglang', '--port', '0']);
    const listening = await eventLine<{ url: string; transport: string }>(s, 'listening');
    expect(listening.transport).toBe('tcp');
    // Answering a request also means its SIGTERM handler is in place (set just after that line).
    const r = await request(`${listening.url}/health`);
    await r.body.dump();
    expect(r.statusCode).toBe(200);
    await stopAll(s);
  }, 60_000);

  it('`serve --kind tokenspeed`: the compiled gateway and simulator both load proto/ and the engine becomes ready', async () => {
    const s = start(['bin/rlgate.mjs', 'serve', '--kind', 'tokenspeed', '--engines', '1', '--tp-size', '1', '--port', '0', '--log-level', 'warn']);
    const serving = await eventLine<{ url: string; engines: Array<{ url: string; pid: number }> }>(s, 'serving');
    const sim = serving.engines[0]!;
    expect(commandOf(sim.pid)).toContain(join(REPO_ROOT, 'dist/sim/tokenspeed/main.js'));
    const rows = await until('the tokenspeed engine to be ready', 30_000, async () => {
      const r = await request(`${serving.url}/v1/rl/workers`);
      const body = (await r.body.json()) as { workers: Array<{ health: string; connection_mode: string }> };
      return body.workers.length === 1 && body.workers[0]!.health === 'ready' ? body.workers : undefined;
    });
    expect(rows[0]!.connection_mode).toBe('grpc');
    expect(s.stderr.join('\n')).not.toContain('build test guard');
    await stopAll(s);
    expect(alive(sim.pid)).toBe(false);
  }, 90_000);
});
