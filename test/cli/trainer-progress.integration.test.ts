// `rlgate trainer` shows its refit's progress while it runs, against a real gateway, nats-server
// and two SGLang simulators joined to the trainer's broadcast group: one key=value line per event
// on stderr (each engine through every step of the distributed refit, a failed engine's error and
// status), over NATS (`<root>.refit.<id>.events`) and over HTTP (`GET /v1/rl/refits/{id}/events`),
// and the live view on a pseudo-terminal (`script`); the report and the exit codes are unchanged.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { CLI, fields, run, type Run } from '../fixtures/cli-process.ts';

const STEPS = ['init_weights_update_group', 'update_weights_from_distributed 1/2', 'update_weights_from_distributed 2/2', 'destroy_weights_update_group'];

const trainer = (args: string[]) => run(process.execPath, [...CLI, 'trainer', ...args], 90_000);

function events(stderr: string, refitId: string): Array<Record<string, string>> {
  return stderr
    .split('\n')
    .map(fields)
    .filter((f) => f.refit === refitId);
}

describe('rlgate trainer progress', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--tp-size', '1', '--token-rate', '0']), spawnSglangSim(['--tp-size', '1', '--token-rate', '0'])]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 10 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  /** Every engine went through pause, every refit step in order, and resume, each ok. */
  function expectEveryStep(stderr: string, refitId: string): void {
    const seen = events(stderr, refitId);
    expect(seen[0]?.event).toBe('accepted');
    expect(seen.at(-1)).toMatchObject({ event: 'report', status: 'succeeded' });
    for (const sim of sims) {
      const legs = seen.filter((l) => l.event === 'leg' && l.engine === sim.url);
      expect(legs.every((l) => l.outcome === 'ok')).toBe(true);
      expect(legs[0]?.phase).toBe('pause');
      expect(legs.filter((l) => l.phase === 'refit').map((l) => `${l.step_index} ${l.step}`)).toEqual(STEPS.map((s, i) => `${i} ${s}`));
      expect(legs.at(-1)?.phase).toBe('resume');
    }
  }

  it('over NATS: one line per engine per step on stderr, the summary on stdout, exit 0', async () => {
    const r = await trainer(['--nats-url', t.nats.url, '--version', '1', '--params', '4', '--shape', '32,32', '--per-chunk', '2', '--refit-id', 'tp-nats']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')[0]).toMatch(/^refit tp-nats to version 1: succeeded, 2 of 2 engines/);
    expectEveryStep(r.stderr, 'tp-nats');
    expect(r.stderr).toMatch(/refit tp-nats to version 1: 200, report from /);
  });

  it("over HTTP: the same lines, from the refit's event stream", async () => {
    const r = await trainer(['--gateway', t.url, '--version', '2', '--params', '4', '--shape', '32,32', '--per-chunk', '2', '--refit-id', 'tp-http']);
    expect(r.code, r.stderr).toBe(0);
    expectEveryStep(r.stderr, 'tp-http');
  });

  it('an engine that refuses a chunk with 501: its line names the error and the status, exit 3', async () => {
    const [bad] = sims as [SimProcess, SimProcess];
    await bad.setFaults({ route: 'update_weights_from_distributed', status: 501, times: 1 });
    let r: Run;
    try {
      r = await trainer(['--nats-url', t.nats.url, '--version', '3', '--params', '4', '--shape', '32,32', '--per-chunk', '2', '--refit-id', 'tp-501']);
    } finally {
      await bad.clearFaults();
    }
    expect(r.code, r.stderr).toBe(3);
    const failed = events(r.stderr, 'tp-501').filter((l) => l.event === 'leg' && l.engine === bad.url && l.outcome === 'failed');
    expect(failed).toEqual([expect.objectContaining({ phase: 'refit', step: 'update_weights_from_distributed 1/2', error: 'upstream_error', status: '501' })]);
  });

  it('on a terminal: the live view per engine, then the summary', async () => {
    const command = `stty cols 140 rows 20; ${process.execPath} ${CLI.join(' ')} trainer --nats-url ${t.nats.url} --version 4 --params 4 --shape 32,32 --per-chunk 2 --refit-id tp-tty`;
    const r = await run('script', ['-qfec', command, '/dev/null']);
    expect(r.code, r.stdout).toBe(0);
    const out = r.stdout.replace(/\r/g, '');
    const frames = out
      .split('\x1b[?25l')
      .filter((f) => f.includes('refit tp-tty → version 4'))
      .map((f) => f.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ''));
    const last = frames.at(-1)!;
    expect(last).toMatch(/refit tp-tty → version 4 · \d+\.\d s · 2 ok, 0 failed of 2 · succeeded/);
    for (const sim of sims) expect(last).toMatch(new RegExp(`${sim.url} +ok +resume +\\d+ ms`));
    expect(out).toMatch(/refit tp-tty to version 4: succeeded, 2 of 2 engines/);
  });
});
