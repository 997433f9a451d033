// The trainer guide's Python example (examples/python/refit.py, standard library only) run by
// Debian's interpreter against a live gateway with SGLang simulators: it posts the refit with
// `Prefer: respond-async`, follows the refit's server-sent events, prints a line per engine call
// as they come and the report, and exits 0 (succeeded), 3 (failed engines) or 1 (errors).

import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../fixtures/closed-port.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { PYTHON } from '../fixtures/python-grpc.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const KEY = 'py-admin-key';
const SCRIPT = 'examples/python/refit.py';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the script without blocking this process: the gateway under test lives in it. */
function refitPy(args: string[], env: Record<string, string> = {}): Promise<Ran> {
  const base: NodeJS.ProcessEnv = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', PYTHONDONTWRITEBYTECODE: '1' };
  return new Promise((resolve) => {
    execFile(PYTHON, [SCRIPT, ...args], { env: { ...base, ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err ? (err as { code?: unknown }).code : 0;
      resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
    });
  });
}

describe('examples/python/refit.py (Debian python3, standard library) against a live gateway', () => {
  let tg: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(), spawnSglangSim()]);
    tg = await startTestGateway({ adminKey: KEY });
    await tg.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await tg?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  const versions = async () => {
    const rows = await tg.http('GET', '/v1/rl/workers', { headers: { authorization: `Bearer ${KEY}` } });
    return Object.fromEntries(rows.json.workers.map((w: { url: string; weight_version: string }) => [w.url, w.weight_version]));
  };

  it('every engine refitted: a line per engine call as they come, then the report; exit 0', async () => {
    const r = await refitPy(['--gateway', tg.url, '--admin-key', KEY, '--version', '7', '--model-path', '/ckpt/step-7', '--refit-id', 'py-step-7']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe('refit py-step-7 queued; following /v1/rl/refits/py-step-7/events');
    expect(lines).toContain('accepted: refit py-step-7 to version 7 (disk), 2 engines, 0 left out');
    // One progress line per engine and call of each phase, before the report.
    const reportAt = lines.findIndex((l) => l.startsWith('refit py-step-7: '));
    expect(lines[reportAt]).toMatch(/^refit py-step-7: succeeded, 2\/2 engines at version 7, \d+ ms$/);
    for (const sim of sims) {
      for (const call of ['pause', 'refit update_weights_from_disk', 'resume']) {
        const at = lines.findIndex((l) => new RegExp(`^  ${sim.url}  ${call}  ok  \\d+ ms$`).test(l));
        expect(at, `${sim.url} ${call}\n${r.stdout}`).toBeGreaterThan(0);
        expect(at).toBeLessThan(reportAt);
      }
      expect(lines.slice(reportAt)).toContain(`  ok      ${sim.url}  version 7`);
    }
    expect(lines.indexOf('phase pause: 2 engines')).toBeLessThan(lines.findIndex((l) => l.startsWith('phase refit update_weights_from_disk (1/1)')));
    expect(Object.values(await versions())).toEqual(['7', '7']);
    const kept = await tg.http('GET', '/v1/rl/refits/py-step-7', { headers: { authorization: `Bearer ${KEY}` } });
    expect(kept.json.status).toBe('succeeded');
  });

  it('an engine failed its load: the failed call is printed, the report is partial; exit 3 (key from the environment)', async () => {
    const [bad, good] = sims as [SimProcess, SimProcess];
    await bad.setFaults({ route: 'update_weights_from_disk', status: 500, body: { success: false, message: 'disk read error' }, times: 1 });
    try {
      const r = await refitPy(['--gateway', tg.url, '--version', '8', '--model-path', '/ckpt/step-8', '--refit-id', 'py-step-8'], { RLGATE_ADMIN_KEY: KEY });
      expect(r.code, r.stderr).toBe(3);
      const lines = r.stdout.trimEnd().split('\n');
      const failed = lines.find((l) => l.startsWith(`  ${bad.url}  refit update_weights_from_disk  FAILED `));
      expect(failed, r.stdout).toMatch(/FAILED \w+ \(HTTP 500\): disk read error$/);
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^  ${good.url}  refit update_weights_from_disk  ok`)));
      expect(lines).toContainEqual(expect.stringMatching(/^refit py-step-8: partial, 1\/2 engines at version 8/));
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^  failed  ${bad.url}  in refit update_weights_from_disk: `)));
    } finally {
      await bad.clearFaults();
    }
    expect((await versions())[good.url]).toBe('8');
  });

  it('--json: the report alone on stdout, progress on stderr', async () => {
    const r = await refitPy(['--gateway', tg.url, '--admin-key', KEY, '--version', '9', '--model-path', '/ckpt/step-9', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { status: string; weight_version: string; succeeded: number };
    expect(report).toMatchObject({ status: 'succeeded', weight_version: '9', succeeded: 2 });
    expect(r.stderr).toMatch(/^phase resume: 2 engines$/m);
  });

  it('refused or unreachable: the reason on stderr, exit 1', async () => {
    const wrongKey = await refitPy(['--gateway', tg.url, '--admin-key', 'nope', '--version', '10', '--model-path', '/m']);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toMatch(/HTTP 401/);
    const noEngine = await refitPy(['--gateway', tg.url, '--admin-key', KEY, '--version', '10', '--model-path', '/m', '--selector', 'role=nobody']);
    expect(noEngine.code).toBe(1);
    expect(noEngine.stderr).toMatch(/HTTP 400 no_workers_match/);
    const down = await refitPy(['--gateway', `http://127.0.0.1:${await closedPort()}`, '--version', '10', '--model-path', '/m']);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the gateway/);
    // Nothing ran: the engines stayed at the last refit's version.
    expect(Object.values(await versions())).toEqual(['9', '9']);
  });

  it('bad flags: usage, exit 2', async () => {
    const r = await refitPy(['--gateway', tg.url, '--model-path', '/m']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--version is required/);
  });
});
