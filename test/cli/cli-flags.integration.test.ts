// The command line's own flags, as a user types them (issue 10): `rlgate --version` from the
// sources and from the build, `--help` of every command (exit 0, usage on stdout), an unknown flag
// (usage, exit 2) where a command parses its flags, SGLang's flag spellings on the SGLang
// simulator, and `npm run bench -- --help`, which must print its help and install nothing.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/closed-port.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const PKG = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
const TSX_MAIN = ['--import', 'tsx', 'src/cli/main.ts'];

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(file: string, args: string[], env: NodeJS.ProcessEnv = cleanEnv()): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(file, args, { env, timeout: 60_000, maxBuffer: 4 << 20 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: unknown }).code as number | null) : 0;
      resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
    });
  });
}

/** `rlgate ARGS` as installed: bin/rlgate.mjs, which runs the build (`npm test` builds it first). */
const rlgate = (...args: string[]) => run(process.execPath, ['bin/rlgate.mjs', ...args]);

/** The environment without RLGATE_* or NATS_URL, so the host's settings cannot leak in. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_') && k !== 'NATS_URL') env[k] = v;
  return env;
}

describe('rlgate --version', () => {
  it.each([
    ['the sources through tsx', [...TSX_MAIN]],
    ['the build', ['dist/src/cli/main.js']],
    ['bin/rlgate.mjs', ['bin/rlgate.mjs']],
  ])('prints the package version from %s, as --version and as -V', async (_, entry) => {
    for (const flag of ['--version', '-V']) {
      const r = await run(process.execPath, [...entry, flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`rlgate ${PKG.version}\n`);
    }
  });

  it("after a command, --version is that command's: a weight version for refit and trainer", async () => {
    const port = await closedPort();
    const refit = await rlgate('refit', '--version', '5', '--model-path', '/m', '--nats-url', `nats://127.0.0.1:${port}`, '--timeout-secs', '1');
    // Parsed as a weight version (no usage error), then no NATS to reach: a failure, never the package version.
    expect(refit.code).not.toBe(0);
    expect(refit.code).not.toBe(2);
    expect(refit.stdout).not.toContain(`rlgate ${PKG.version}`);
    const trainer = await rlgate('trainer', '--version', '5', '--gateway', `http://127.0.0.1:${port}`, '--timeout-secs', '5');
    expect(trainer.code).toBe(4); // no report: nothing answered
    expect(trainer.stdout).not.toContain(`rlgate ${PKG.version}`);
  });
});

describe('--help on every command', () => {
  const commands: Array<[string, string[], RegExp]> = [
    ['rlgate', [], /^usage: rlgate <command>/],
    ['gateway', ['gateway'], /^usage: rlgate gateway/],
    ['serve', ['serve'], /^usage: rlgate serve/],
    ['demo', ['demo'], /^usage: rlgate demo/],
    ['watch', ['watch'], /^usage: rlgate watch/],
    ['refit', ['refit'], /^usage: rlgate refit/],
    ['trainer', ['trainer'], /^usage: rlgate trainer/],
    ['sim', ['sim'], /^usage: rlgate sim </],
    ['sim sglang', ['sim', 'sglang'], /^usage: rlgate sim sglang/i],
    ['sim tokenspeed', ['sim', 'tokenspeed'], /^usage: rlgate sim tokenspeed/i],
    ['sim zmq', ['sim', 'zmq'], /^usage: rlgate sim zmq/i],
  ];

  it.each(commands)(
    '%s --help and -h print its usage on stdout and exit 0',
    async (_, argv, usage) => {
      for (const flag of ['--help', '-h']) {
        const r = await rlgate(...argv, flag);
        expect(r.code, `${argv.join(' ')} ${flag}: ${r.stderr}`).toBe(0);
        expect(r.stdout).toMatch(usage);
      }
    },
    60_000,
  );

  // Where a command parses its flags. The gateway's usage is its whole settings table: it names
  // the flag and points at --help instead.
  const refusing: Array<[string, string[], RegExp]> = [
    ...commands
      .filter(([name]) => !['rlgate', 'gateway', 'sim'].includes(name))
      .map(([name, argv, usage]): [string, string[], RegExp] => [name, argv, new RegExp(usage.source.replace('^', '(^|\\n)'), 'i')]),
    ['gateway', ['gateway'], /^rlgate gateway: unknown flag --no-such-flag; see --help/],
  ];
  it.each(refusing)('%s --no-such-flag says so on stderr, with its usage, and exits 2', async (_, argv, usage) => {
    const r = await rlgate(...argv, '--no-such-flag');
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain('--no-such-flag');
    expect(r.stderr).toMatch(usage);
    expect(r.stdout).toBe('');
  });

  it('an unknown simulator kind prints the usage of sim and exits 2', async () => {
    const r = await rlgate('sim', 'vllm');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/usage: rlgate sim </);
  });
});

describe("SGLang's flag spellings on the SGLang simulator", () => {
  let sim: SimProcess | undefined;
  afterAll(async () => sim?.stop());

  it('takes --tp, --dp, --model-path and --max-running-requests as SGLang does', async () => {
    sim = await spawnSglangSim(['--tp', '2', '--dp', '2', '--pp', '1', '--model-path', 'org/spelled', '--max-running-requests', '7']);
    const r = await request(`${sim.url}/server_info`);
    const info = (await r.body.json()) as Record<string, unknown>;
    expect(info).toMatchObject({ tp_size: 2, dp_size: 2, pp_size: 1, model_path: 'org/spelled', served_model_name: 'org/spelled', max_running_requests: 7 });
  });
});

describe('npm run bench -- --help', () => {
  const help = readFileSync('bench/help.txt', 'utf8');

  it('prints bench/help.txt with nothing but bash, cat and dirname on PATH (no npm, node or apt-get to install with)', async () => {
    const bin = mkdtempSync(join(tmpdir(), 'rlgate-bench-path-'));
    try {
      for (const tool of ['bash', 'cat', 'dirname']) symlinkSync(`/usr/bin/${tool}`, join(bin, tool));
      const r = await run('/usr/bin/bash', ['bench/bench.sh', '--help'], { PATH: bin, HOME: tmpdir() });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(help);
      expect(r.stderr).toBe('');
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it('through npm: the same help, and node_modules is left as it was', async () => {
    const stamp = statSync('node_modules/.package-lock.json').mtimeMs;
    const r = await run('npm', ['run', '--silent', 'bench', '--', '--help']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(help);
    expect(statSync('node_modules/.package-lock.json').mtimeMs).toBe(stamp);
  });
});
