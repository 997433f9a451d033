// A distributed (NCCL-style) refit run by the gateway's coordinator: the trainer simulator is
// rank 0 of a real TCP broadcast group, the engine simulators join with their rank offsets,
// bytes move, and the checksums the engines loaded equal the ones the trainer sent.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runDistributedRefit } from '../../src/cli/trainer/refit.ts';

describe('distributed refit through the coordinator', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--tp-size', '2', '--token-rate', '0']), spawnSglangSim(['--tp-size', '1', '--token-rate', '0'])]);
    // A fan-out concurrency of 1: the collective steps still go to every engine at once (an
    // engine alone in the group would wait for the others' ranks until its deadline).
    t = await startTestGateway({ rl: { controlTimeoutSecs: 20, fanoutConcurrency: 1 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('inits the group per engine, broadcasts every chunk, stamps the version last, destroys the group', async () => {
    const chunks = makeChunks({ params: 12, perChunk: 5, shape: [64, 64], dtype: 'bfloat16' });
    expect(chunks).toHaveLength(3);
    const res = await runDistributedRefit({ gateway: t.url, version: '1', chunks, rendezvousTimeoutMs: 15_000 });
    expect(res.transferError).toBeNull();
    expect(res.status).toBe(200);
    const report = res.report as { status: string; world_size: number; engines: Array<{ url: string; rank_offset: number; outcome: string }> };
    expect(report.status).toBe('succeeded');
    // world = trainer + 2 GPUs + 1 GPU; engine i starts after the GPUs of the engines before it
    expect(report.world_size).toBe(4);
    const gpus = new Map([
      [sims[0]!.url, 2],
      [sims[1]!.url, 1],
    ]);
    const ordered = [...report.engines].sort((a, b) => a.rank_offset - b.rank_offset);
    expect(ordered[0]!.rank_offset).toBe(1);
    expect(ordered[1]!.rank_offset).toBe(1 + gpus.get(ordered[0]!.url)!);

    // Every engine holds exactly the bytes the trainer sent.
    const sent = new Map(res.sent.map((x) => [x.name, x.checksum]));
    expect(sent.size).toBe(12);
    for (const s of sims) {
      const st = await s.state();
      expect(st.weightVersion).toBe('1');
      const loaded = new Map<string, string>((st.weights.tensors as Array<{ name: string; checksum: string }>).map((x) => [x.name, x.checksum]));
      for (const [name, sum] of sent) expect(loaded.get(name)).toBe(sum);
      expect(st.weights.groups).toEqual([]); // destroyed after the refit
    }

    // Only the last chunk carried the version (a partial refit never advertises it).
    const updates = (await sims[0]!.requests()).filter((r) => r.path === '/update_weights_from_distributed');
    expect(updates).toHaveLength(3);
    expect(updates.map((u) => 'weight_version' in JSON.parse(u.body))).toEqual([false, false, true]);

    const gen = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 2 } } });
    expect(gen.json.meta_info.weight_version).toBe('1');
  });
});

describe('a distributed refit one engine fails', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--tp-size', '1', '--token-rate', '0']), spawnSglangSim(['--tp-size', '1', '--token-rate', '0'])]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 60 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('abandons the transfer at once: the other engine is failed with it (not left waiting for the deadline), the group is torn down, both are resumed and quarantined', async () => {
    const [bad, good] = sims as [SimProcess, SimProcess];
    await bad.setFaults({ route: 'update_weights_from_distributed', status: 500, times: 1 });
    const chunks = makeChunks({ params: 6, perChunk: 2, shape: [8, 8], dtype: 'bfloat16' });
    const res = await runDistributedRefit({ gateway: t.url, version: '5', chunks, rendezvousTimeoutMs: 15_000, chunkTimeoutMs: 5_000, settleMs: 500 });
    expect(res.status).toBe(207);
    const report = res.report as { status: string; engines: Array<{ url: string; outcome: string; error?: string; failed_phase?: string }> };
    const byUrl = new Map(report.engines.map((e) => [e.url, e]));
    expect(byUrl.get(bad.url)).toMatchObject({ outcome: 'failed', failed_phase: 'refit', error: 'upstream_error' });
    expect(byUrl.get(good.url)).toMatchObject({ outcome: 'failed', failed_phase: 'refit', error: 'transfer_aborted' });
    // The refit phase ended long before the 60 s refit deadline.
    expect((res.report as { phases: { refit: number } }).phases.refit).toBeLessThan(30_000);
    for (const s of sims) {
      const st = await s.state();
      expect(st.paused).toBeNull();
      expect(st.weights.groups).toEqual([]);
      expect(st.weightVersion).not.toBe('5');
    }
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ quarantined: boolean }>;
    expect(rows.every((r) => r.quarantined)).toBe(true);
  }, 60_000);
});

describe('an engine that answers 200 to a chunk without loading it', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--tp-size', '1', '--token-rate', '0']), spawnSglangSim(['--tp-size', '1', '--token-rate', '0'])]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 20 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('passes the version check (SGLang stores the version anyway) but not the read-back of the weights: it is caught and quarantined, the honest one is refitted', async () => {
    const [liar, honest] = sims as [SimProcess, SimProcess];
    await liar.setFaults({ route: 'update_weights_from_distributed', claimSuccessWithoutApplying: true });
    const chunks = makeChunks({ params: 2, perChunk: 2, shape: [8, 8], dtype: 'bfloat16' });
    const res = await runDistributedRefit({
      gateway: t.url,
      version: '7',
      chunks,
      verifyValues: 8,
      rendezvousTimeoutMs: 10_000,
      chunkTimeoutMs: 2_000,
      settleMs: 200,
    });
    await liar.clearFaults();
    expect(res.status, JSON.stringify(res.report)).toBe(207);
    const report = res.report as { engines: Array<{ url: string; outcome: string; error?: string; failed_step?: string; weight_version: string | null }> };
    const byUrl = new Map(report.engines.map((e) => [e.url, e]));
    expect(byUrl.get(liar.url)).toMatchObject({ outcome: 'failed', error: 'verify_failed', failed_step: expect.stringContaining('get_weights_by_name') });
    expect(byUrl.get(honest.url)).toMatchObject({ outcome: 'ok', weight_version: '7' });
    // The liar advertises the version although it holds nothing of it: only the read-back tells.
    expect((await liar.state()).weightVersion).toBe('7');
    expect((await liar.state()).weights.claimedLoads).toBeGreaterThan(0);
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; quarantined: boolean; quarantine_reason: string | null }>;
    expect(rows.find((r) => r.url === liar.url)).toMatchObject({ quarantined: true, quarantine_reason: 'verify_failed' });
    expect(rows.find((r) => r.url === honest.url)).toMatchObject({ quarantined: false });
    for (const s of sims) expect((await s.state()).paused).toBeNull();
  }, 60_000);

  it("a later lie is caught by the values it shows (the previous version's), and an honest refit in between lets it out", async () => {
    const [liar, honest] = sims as [SimProcess, SimProcess];
    const chunks = makeChunks({ params: 2, perChunk: 2, shape: [8, 8], dtype: 'bfloat16' });
    const ok = await runDistributedRefit({
      gateway: t.url,
      version: '8',
      chunks,
      verifyValues: 8,
      rendezvousTimeoutMs: 10_000,
      chunkTimeoutMs: 2_000,
      settleMs: 200,
    });
    expect(ok.status, JSON.stringify(ok.report)).toBe(200);
    let rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; quarantined: boolean }>;
    expect(rows.every((r) => !r.quarantined)).toBe(true);

    await liar.setFaults({ route: 'update_weights_from_distributed', claimSuccessWithoutApplying: true });
    const res = await runDistributedRefit({
      gateway: t.url,
      version: '9',
      chunks,
      verifyValues: 8,
      rendezvousTimeoutMs: 10_000,
      chunkTimeoutMs: 2_000,
      settleMs: 200,
    });
    await liar.clearFaults();
    expect(res.status).toBe(207);
    const byUrl = new Map(
      (res.report as { engines: Array<{ url: string; outcome: string; error?: string; message?: string }> }).engines.map((e) => [e.url, e]),
    );
    expect(byUrl.get(liar.url)).toMatchObject({ outcome: 'failed', error: 'verify_failed', message: expect.stringContaining('other values') });
    expect(byUrl.get(honest.url)).toMatchObject({ outcome: 'ok' });
    rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; quarantined: boolean }>;
    expect(rows.find((r) => r.url === liar.url)?.quarantined).toBe(true);
  }, 60_000);
});
