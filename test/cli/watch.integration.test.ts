// `rlgate watch` as an operator runs it: a child process that prints the fleet as the shared
// engines bucket holds it, then one line per engine transition (rl.engine.*.state) while a refit runs.

import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('rlgate watch', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let watch: ChildProcess;
  let out = '';

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    await t.register([sim.url]);
    watch = spawn(process.execPath, ['bin/rlgate.mjs', 'watch', '--nats-url', t.nats.url], { stdio: ['ignore', 'pipe', 'pipe'] });
    watch.stdout!.on('data', (d) => (out += d));
    // Subscribed once it has said so on stderr.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('watch did not start')), 15_000);
      watch.stderr!.on('data', (d: Buffer) => {
        if (d.toString().includes('watching')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  });
  afterAll(async () => {
    watch?.kill('SIGTERM');
    await t?.close();
    await sim?.stop();
  });

  it('starts from the fleet as it stands, then prints the engine transitions of a refit in order', async () => {
    const first = out.trim().split('\n').filter((l) => l.includes(sim.url));
    expect(first.map((l) => l.split(/\s+/)[2])).toEqual(['serving']);
    expect(first[0]).toContain(`owner=${t.gw.replicaId}`);
    const r = await t.http('POST', '/v1/rl/refits', { body: { weight_version: '9', source: { kind: 'disk', model_path: '/m' } } });
    expect(r.status).toBe(200);
    const deadline = Date.now() + 10_000;
    while (out.trim().split('\n').length < 6 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    const states = out
      .trim()
      .split('\n')
      .filter((l) => l.includes(sim.url))
      .map((l) => l.split(/\s+/)[2]);
    expect(states).toEqual(['serving', 'pausing', 'paused', 'refitting', 'paused', 'serving']);
    expect(out).toContain('version=9');
  });
});
