// `rlgate refit` as a trainer's script runs it, against a real gateway, nats-server and two SGLang
// simulators: the report on stdout, the refit's progress on stderr (one line per event, one per
// engine per phase, naming a failed engine's error and status), and the documented exit codes:
// 0 all succeeded, 3 partial, 2 usage, 1 refused or no gateway. On a pseudo-terminal (`script`),
// the live view is drawn in place above the report.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { CLI, fields, run } from '../fixtures/cli-process.ts';

const refit = (args: string[]) => run(process.execPath, [...CLI, 'refit', ...args]);

function legs(stderr: string, refitId: string): Array<Record<string, string>> {
  return stderr
    .split('\n')
    .map(fields)
    .filter((f) => f.refit === refitId && f.event === 'leg');
}

describe('rlgate refit', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('exit 0 when every engine succeeded: the report on stdout, one progress line per engine per phase on stderr', async () => {
    const r = await refit(['--version', '11', '--model-path', '/m/11', '--nats-url', t.nats.url, '--refit-id', 'cli-ok']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ id: 'cli-ok', status: 'succeeded', weight_version: '11', total: 2, succeeded: 2 });
    const events = r.stderr
      .split('\n')
      .map(fields)
      .filter((f) => f.refit === 'cli-ok')
      .map((f) => f.event);
    expect(events[0]).toBe('accepted');
    expect(events.at(-1)).toBe('report');
    const seen = legs(r.stderr, 'cli-ok');
    for (const sim of sims) {
      expect(seen.filter((l) => l.engine === sim.url).map((l) => `${l.phase} ${l.outcome}`)).toEqual(['pause ok', 'refit ok', 'verify ok', 'resume ok']);
    }
    expect(seen.filter((l) => l.phase === 'refit').every((l) => l.step === 'update_weights_from_disk')).toBe(true);
    expect(r.stderr).toMatch(/event=report status=succeeded version=11 succeeded=2 total=2/);
  });

  it("exit 3 on a partial refit: the failed engine's line names its error and its status (501)", async () => {
    await sims[1]!.setFaults({ route: 'update_weights_from_disk', status: 501, times: 1 });
    const r = await refit(['--version', '12', '--model-path', '/m/12', '--nats-url', t.nats.url, '--refit-id', 'cli-partial']);
    expect(r.code, r.stderr).toBe(3);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ id: 'cli-partial', status: 'partial', succeeded: 1 });
    expect(report.failed).toMatchObject([{ url: sims[1]!.url, error: 'upstream_error', status: 501 }]);
    const failed = legs(r.stderr, 'cli-partial').filter((l) => l.outcome === 'failed');
    expect(failed).toEqual([
      expect.objectContaining({ engine: sims[1]!.url, phase: 'refit', step: 'update_weights_from_disk', error: 'upstream_error', status: '501' }),
    ]);
    const ok = legs(r.stderr, 'cli-partial').filter((l) => l.engine === sims[0]!.url);
    expect(ok.map((l) => `${l.phase} ${l.outcome}`)).toEqual(['pause ok', 'refit ok', 'verify ok', 'resume ok']);
  });

  it('draws a live view per engine on a terminal, and still prints the report', async () => {
    // A load that takes a while, so that the view is drawn while the engines are in it.
    for (const sim of sims) await sim.setFaults({ route: 'update_weights_from_disk', delayMs: 3_000, times: 1 });
    const command = `stty cols 120 rows 30; ${process.execPath} ${CLI.join(' ')} refit --version 13 --model-path /m/13 --nats-url ${t.nats.url} --refit-id cli-tty`;
    const r = await run('script', ['-qfec', command, '/dev/null']);
    expect(r.code, r.stdout).toBe(0);
    const out = r.stdout.replace(/\r/g, '');
    // Redrawn in place: the cursor goes back up over the last frame, lines are cleared to their end.
    expect(out).toMatch(/\x1b\[2A/);
    expect(out).toContain('\x1b[K');
    const frames = out
      .split('\x1b[?25l')
      .filter((f) => f.includes('refit cli-tty → version 13'))
      .map((f) => f.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ''));
    // A frame while the engines load, and the last one.
    expect(frames.some((f) => sims.every((sim) => new RegExp(`${sim.url} +running +refit 1/1 update_weights_from_disk`).test(f)))).toBe(true);
    const last = frames.at(-1)!;
    expect(last).toMatch(/refit cli-tty → version 13 · \d+\.\d s · 2 ok, 0 failed of 2 · succeeded/);
    for (const sim of sims) expect(last).toMatch(new RegExp(`${sim.url} +ok +resume +\\d+ ms`));
    expect(JSON.parse(out.slice(out.indexOf('{')))).toMatchObject({ id: 'cli-tty', status: 'succeeded' });
  });

  it('exit 1 when the gateway refuses the refit: its error on stdout, nothing runs', async () => {
    const r = await refit(['--version', '14', '--model-path', '/m', '--selector', 'role=nobody', '--nats-url', t.nats.url]);
    expect(r.code, r.stderr).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: 'no_workers_match' });
    expect(r.stderr).toMatch(/refused: no_workers_match \(400\)/);
  });

  it('exit 1 when no gateway answers (another subject root)', async () => {
    const r = await refit(['--version', '15', '--model-path', '/m', '--subject-root', 'nobody', '--nats-url', t.nats.url]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('no gateway answers on nobody.refit.request');
  });

  it('--strategy rolling: one engine at a time, each wave on the stderr lines, its legs marked with the wave', async () => {
    const r = await refit([
      '--version',
      '16',
      '--model-path',
      '/m/16',
      '--strategy',
      'rolling',
      '--max-unavailable',
      '1',
      '--nats-url',
      t.nats.url,
      '--refit-id',
      'cli-rolling',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ id: 'cli-rolling', status: 'succeeded', strategy: 'rolling', total: 2, succeeded: 2 });
    expect(report.waves.map((w: { refit_id: string }) => w.refit_id)).toEqual(['cli-rolling-w1', 'cli-rolling-w2']);
    const lines = r.stderr
      .split('\n')
      .map(fields)
      .filter((f) => f.refit === 'cli-rolling');
    expect(lines.filter((f) => f.event === 'wave').map((f) => `${f.wave} ${f.status}`)).toEqual([
      '1 draining',
      '1 refitting',
      '1 done',
      '2 draining',
      '2 refitting',
      '2 done',
    ]);
    // Each engine's four legs, in the wave that refit it, and no engine in the other.
    const byWave = (n: string) => new Set(lines.filter((f) => f.event === 'leg' && f.wave === n).map((f) => f.engine));
    expect(byWave('1').size).toBe(1);
    expect(byWave('2').size).toBe(1);
    expect(new Set([...byWave('1'), ...byWave('2')])).toEqual(new Set(sims.map((s) => s.url)));
    for (const sim of sims) expect((await sim.state()).weightVersion).toBe('16');
  });

  it('exit 2 on a usage error, before anything is sent', async () => {
    for (const args of [
      ['--model-path', '/m'],
      ['--version', '1', '--model-path', '/m', '--max-unavailable', '1'],
      ['--version', '1', '--model-path', '/m', '--strategy', 'rolling', '--max-failed', 'x'],
      ['--version', '1', '--model-path', '/m', '--refit-id', 'a.b'],
      ['--version', '1', '--model-path', '/m', '--bogus'],
    ]) {
      const r = await refit([...args, '--nats-url', t.nats.url]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain('usage: rlgate refit');
    }
  });
});
