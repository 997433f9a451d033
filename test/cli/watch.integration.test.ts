// `rlgate watch` as an operator runs it: a child process that prints the fleet as the shared
// engines bucket holds it, then one line per engine transition (rl.engine.*.state) while a refit
// runs, each naming the refit and step touching the engine; with --json, the records and the
// events themselves, the refit's with their step; and on a terminal, a table redrawn in place.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { CLI } from '../fixtures/entry.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface Watch {
  proc: ChildProcess;
  out(): string;
}

describe('rlgate watch', () => {
  let t: TestGateway;
  let sim: SimProcess;
  const watches: Watch[] = [];

  /** A watcher, once subscribed (it says so: on stderr, or on the terminal for `script`). */
  async function watch(command: string, args: string[]): Promise<Watch> {
    const proc = spawn(command, args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout!.on('data', (d) => (out += d));
    proc.stderr!.on('data', (d) => (err += d));
    const w = { proc, out: () => out };
    watches.push(w);
    await until('watch to subscribe', 20_000, async () => err.includes('watching') || out.includes('watching'));
    return w;
  }

  const refit = async (id: string, version: string) => {
    const r = await t.http('POST', '/v1/rl/refits', { body: { refit_id: id, weight_version: version, source: { kind: 'disk', model_path: '/m' } } });
    expect(r.status, r.text).toBe(200);
  };

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    await t.register([sim.url]);
  });
  afterAll(async () => {
    for (const w of watches) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGTERM');
    await t?.close();
    await sim?.stop();
  });

  it('starts from the fleet as it stands, then prints the transitions of a refit in order, naming the refit and step', async () => {
    const w = await watch(process.execPath, [...CLI, 'watch', '--nats-url', t.nats.url]);
    const lines = () =>
      w
        .out()
        .trim()
        .split('\n')
        .filter((l) => l.includes(sim.url));
    expect(lines().map((l) => l.split(/\s+/)[2])).toEqual(['serving']);
    expect(lines()[0]).toContain(`owner=${t.gw.replicaId}`);
    expect(lines()[0]).not.toContain('refit=');
    await refit('watch-plain', '9');
    await until('the transitions of the refit', 10_000, async () => lines().length >= 6);
    const all = lines();
    expect(all.map((l) => l.split(/\s+/)[2])).toEqual(['serving', 'pausing', 'paused', 'refitting', 'paused', 'serving']);
    expect(all[1]).toMatch(/ refit=watch-plain step=pause$/);
    expect(all[3]).toMatch(/ refit=watch-plain step="refit 1\/1 update_weights_from_disk"$/);
    expect(all[5]).toContain('version=9');
  });

  it('--json: the snapshot records first, then the state events and the refit events with their step', async () => {
    const w = await watch(process.execPath, [...CLI, 'watch', '--json', '--nats-url', t.nats.url]);
    await refit('watch-json', '10');
    const parsed = () =>
      w
        .out()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
    await until('the refit report event', 10_000, async () => parsed().some((e) => e.kind === 'refit' && e.type === 'report'));
    const events = parsed();
    expect(events[0]).toMatchObject({ kind: 'engine', snapshot: true, url: sim.url, state: 'serving', owner: t.gw.replicaId });
    const later = events.slice(1);
    expect(later.every((e) => !e.snapshot)).toBe(true);
    expect(later.filter((e) => e.kind === 'engine').map((e) => e.state)).toEqual(['pausing', 'paused', 'refitting', 'paused', 'serving']);
    const refits = later.filter((e) => e.kind === 'refit');
    expect(refits.every((e) => e.refit_id === 'watch-json')).toBe(true);
    expect(refits[0]).toMatchObject({ type: 'accepted', weight_version: '10' });
    expect(refits.find((e) => e.type === 'phase' && e.phase === 'refit')).toMatchObject({ step: 'update_weights_from_disk', step_index: 0, steps: 1 });
    expect(refits.filter((e) => e.type === 'leg').map((e) => `${e.phase} ${e.step ?? '-'} ${e.outcome}`)).toEqual([
      'pause - ok',
      'refit update_weights_from_disk ok',
      'verify - ok',
      'resume - ok',
    ]);
    expect(refits.at(-1)).toMatchObject({ type: 'report', report: { id: 'watch-json', status: 'succeeded' } });
  });

  it("on a terminal: a table redrawn in place, the engine's row naming the refit and its step", async () => {
    const command = `stty cols 160 rows 12; ${process.execPath} ${CLI.join(' ')} watch --nats-url ${t.nats.url}`;
    const w = await watch('script', ['-qfec', command, '/dev/null']);
    // A load that takes a while, so that the table is drawn while the engine is in it.
    await sim.setFaults({ route: 'update_weights_from_disk', delayMs: 3_000, times: 1 });
    await refit('watch-tty', '11');
    const frames = () =>
      w
        .out()
        .replace(/\r/g, '')
        .split('\x1b[?25l')
        .map((f) => f.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ''));
    const row = (f: string) => f.split('\n').find((l) => l.startsWith(sim.url)) ?? '';
    // The engine's state and the refit's report are separate events: wait for both to be drawn.
    await until('the row back to serving and the refit over', 30_000, async () => {
      const f = frames().at(-1)!;
      return /serving .* 11 /.test(row(f)) && f.includes(' 0 refits running');
    });
    const all = frames();
    expect(w.out()).toMatch(/\x1b\[2A/); // back up over the last frame (a header, the titles, one row)
    const during = all.map(row).find((r) => r.includes('refitting'));
    expect(during?.split(/\s{2,}/)).toEqual([
      sim.url,
      'refitting',
      'paused',
      '10',
      'closed',
      '0',
      t.gw.replicaId,
      'watch-tty',
      'refit 1/1 update_weights_from_disk',
    ]);
    const last = all.at(-1)!.split('\n');
    expect(last[0]).toMatch(/^rlgate watch · nats:\/\/127\.0\.0\.1:\d+ · 1 engine · 0 refits running · NATS connected/);
    expect(last[1]!.split(/\s{2,}/)).toEqual(['ENGINE', 'STATE', 'CONTROL', 'VERSION', 'BREAKER', 'IN-FLIGHT', 'OWNER', 'REFIT', 'STEP']);
    expect(row(all.at(-1)!).split(/\s{2,}/)).toEqual([sim.url, 'serving', 'active', '11', 'closed', '0', t.gw.replicaId, '-', '-']);
  });
});
