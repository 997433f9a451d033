// Who a refit reaches: a dry run answers the plan and touches no engine; an engine that is down
// when a refit starts is left out (`skipped`, reason `unreachable`), counts neither in the quorum
// nor in a distributed refit's world size, and the refit of the rest answers 200.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runDistributedRefit } from '../../src/cli/trainer/refit.ts';

describe('refit targets and plan', () => {
  let t: TestGateway;
  let sims: SimProcess[] = [];
  const ids: string[] = [];

  beforeAll(async () => {
    sims = await Promise.all([
      spawnSglangSim(['--tp-size', '2', '--token-rate', '0']),
      spawnSglangSim(['--tp-size', '1', '--token-rate', '0']),
      spawnSglangSim(['--tp-size', '1', '--token-rate', '0']),
    ]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 10 }, probeFailureThreshold: 1 });
    ids.push(...(await t.register(sims.map((s) => s.url))));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all(sims.map((s) => s.stop()));
  });

  const controlCalls = async (s: SimProcess) => (await s.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path));

  it('a dry run answers targets, world size, rank offsets and calls per phase, and calls no engine', async () => {
    for (const s of sims) await s.clearRequests();
    const chunks = makeChunks({ params: 4, perChunk: 2, shape: [8, 8] });
    const r = await t.http('POST', '/v1/rl/refits', {
      body: { dry_run: true, weight_version: '9', source: { kind: 'distributed', master_address: '127.0.0.1', master_port: 1, chunks } },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toMatchObject({ dry_run: true, weight_version: '9', source: 'distributed', world_size: 5, skipped: [], quorum: 3 });
    // Engine i starts after the trainer's rank and the GPUs of the engines before it.
    const gpus = new Map([
      [sims[0]!.url, 2],
      [sims[1]!.url, 1],
      [sims[2]!.url, 1],
    ]);
    let next = 1;
    for (const x of r.json.targets as Array<{ url: string; rank_offset: number }>) {
      expect(x.rank_offset, x.url).toBe(next);
      next += gpus.get(x.url)!;
    }
    expect(r.json.phases.map((p: { phase: string; step: string | null }) => `${p.phase}:${p.step ?? ''}`)).toEqual([
      'pause:',
      'refit:init_weights_update_group',
      'refit:update_weights_from_distributed 1/2',
      'refit:update_weights_from_distributed 2/2',
      'refit:destroy_weights_update_group',
      'verify:',
      'resume:',
    ]);
    expect(r.json.calls).toBe(7 * 3);
    for (const s of sims) expect(await controlCalls(s)).toEqual([]);
    // Nothing was journaled or kept either.
    expect((await t.http('GET', '/v1/rl/refits')).json.refits).toEqual([]);
  });

  it('an engine killed before a distributed refit is skipped, and the refit of the rest answers 200', async () => {
    const dead = sims[2]!;
    await dead.kill();
    const deadline = Date.now() + 10_000;
    while ((await t.http('GET', `/v1/rl/workers/${ids[2]}`)).json.state !== 'unreachable') {
      if (Date.now() > deadline) throw new Error('the killed engine never turned unreachable');
      await new Promise((r) => setTimeout(r, 50));
    }
    const chunks = makeChunks({ params: 4, perChunk: 2, shape: [8, 8] });
    const res = await runDistributedRefit({ gateway: t.url, version: '10', chunks, rendezvousTimeoutMs: 15_000 });
    expect(res.transferError).toBeNull();
    expect(res.status, JSON.stringify(res.report)).toBe(200);
    expect(res.worldSize).toBe(4); // trainer + 2 + 1: the dead engine's GPU is not counted
    const report = res.report as { status: string; total: number; skipped: Array<{ worker_id: string; reason: string }> };
    expect(report.status).toBe('succeeded');
    expect(report.total).toBe(2);
    expect(report.skipped).toEqual([expect.objectContaining({ worker_id: ids[2], url: dead.url, reason: 'unreachable' })]);
    for (const s of sims.slice(0, 2)) {
      const st = await s.state();
      expect(st.weightVersion).toBe('10');
      expect(st.paused).toBeNull();
    }
  });
});
