// Quarantine: an engine whose version check fails after its load answered 200 is held out of
// routing; so is an engine that joins below the fleet's version. A
// refit that brings it up and verifies it lets it back. And a hung engine in the pause holds the
// others paused no longer than the grace period once the quorum is met.
// Routing is judged by the simulators' own request records.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('quarantine and the grace period', () => {
  let t: TestGateway;
  let sims: SimProcess[] = [];
  let late: SimProcess | undefined;

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 20 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([...sims, ...(late ? [late] : [])].map((s) => s.stop()));
  });

  const refit = (v: string, extra: Record<string, unknown> = {}) =>
    t.http('POST', '/v1/rl/refits', { body: { weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` }, ...extra } });
  const row = async (url: string) => (await t.http('GET', '/v1/rl/workers')).json.workers.find((w: { url: string }) => w.url === url);
  /** How many of `n` /generate calls each simulator received. */
  const spread = async (fleet: SimProcess[], n: number) => {
    for (const s of fleet) await s.clearRequests();
    for (let i = 0; i < n; i++) {
      const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2], sampling_params: { max_new_tokens: 1 } } });
      expect(r.status, r.text).toBe(200);
    }
    return Promise.all(fleet.map(async (s) => (await s.requests()).filter((q) => q.path === '/generate').length));
  };

  it('an engine that reports another version after a load answered 200 is quarantined and gets no traffic; a verified refit lets it back', async () => {
    const liar = sims[0]!;
    // Its version check answers the old version (the next GET model_info calls: the version check
    // comes first; quiet probes of the paused engine may take the rest, which only read the status).
    await liar.setFaults({ route: 'model_info', method: 'GET', status: 200, body: { weight_version: 'default' }, times: 3 });
    const r = await refit('1');
    await liar.clearFaults();
    expect(r.status).toBe(207);
    const failed = r.json.failed.find((e: { url: string }) => e.url === liar.url);
    expect(failed).toMatchObject({ failed_phase: 'verify', error: 'verify_failed' });
    expect(await row(liar.url)).toMatchObject({ quarantined: true, quarantine_reason: 'verify_failed' });
    const counts = await spread(sims, 12);
    expect(counts[0], 'requests routed to the quarantined engine').toBe(0);
    expect(counts[1]! + counts[2]!).toBe(12);

    const ok = await refit('2');
    expect(ok.status, ok.text).toBe(200);
    expect(await row(liar.url)).toMatchObject({ quarantined: false, quarantine_reason: null, weight_version: '2' });
    expect((await spread(sims, 12))[0]).toBeGreaterThan(0);
  });

  it('an engine that joins below the fleet version is quarantined until a refit brings it up', async () => {
    late = await spawnSglangSim(['--token-rate', '0']);
    expect((await t.http('POST', '/workers', { body: { url: late.url } })).status).toBe(202);
    const deadline = Date.now() + 10_000;
    let r = await row(late.url);
    while (!(r?.health === 'ready' && r.quarantined) && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 50));
      r = await row(late.url);
    }
    expect(r).toMatchObject({ quarantined: true, quarantine_reason: 'behind_fleet' });
    const fleet = [...sims, late];
    expect((await spread(fleet, 12))[3]).toBe(0);
    const up = await refit('3');
    expect(up.status, up.text).toBe(200);
    expect(await row(late.url)).toMatchObject({ quarantined: false, weight_version: '3' });
    expect((await spread(fleet, 16))[3]).toBeGreaterThan(0);
  });

  it('an engine hung in the pause is cut after the grace period and quarantined; the others go on', async () => {
    const hung = sims[1]!;
    await hung.setFaults({ route: 'pause_generation', hang: true, times: 1 });
    const started = Date.now();
    const r = await refit('4', { grace_ms: 1_000, quorum: { min_engines: 2 } });
    const tookMs = Date.now() - started;
    expect(r.status).toBe(207);
    expect(r.json.failed.find((e: { url: string }) => e.url === hung.url)).toMatchObject({ failed_phase: 'pause', error: 'cut_after_grace' });
    for (const s of sims.filter((x) => x !== hung)) expect((await s.state()).weightVersion).toBe('4');
    // The others were not held for the 20 s pause deadline (the report comes after their resume).
    expect(tookMs).toBeLessThan(20_000);
    expect(await row(hung.url)).toMatchObject({ quarantined: true, quarantine_reason: 'cut_after_grace' });
    await hung.releaseHung();
    for (const s of sims) expect((await s.state()).paused).toBeNull();
  }, 40_000);
});
