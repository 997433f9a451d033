// The refit transaction on TokenSpeed workers (fixture G): TokenSpeed engines advertise the
// sources they load from (`rl.update_from`, no disk), so a disk refit leaves them out before
// anything is paused and reports them under `skipped`, as it does a worker without a control
// endpoint; the engines it skips see no call and keep serving.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFixtureG, type FixtureG } from '../fixtures/fixture-g.ts';
import type { TestGateway } from '../fixtures/gateway.ts';
import type { SimProcess } from '../fixtures/sglang-sim.ts';
import type { TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const disk = (v: string, selector?: string) => ({
  weight_version: v,
  ...(selector ? { selector } : {}),
  source: { kind: 'disk', model_path: `/models/step-${v}` },
});

describe('disk refits on a fixture-G fleet (ts-adv, ts-silent, sg)', () => {
  let t: TestGateway;
  let tsAdv: TokenspeedSimProcess;
  let tsSilent: TokenspeedSimProcess;
  let sg: SimProcess;
  let g: FixtureG | undefined;
  const id = { adv: '', silent: '', sg: '' };

  async function row(workerId: string): Promise<Record<string, any>> {
    const res = await t.http('GET', `/v1/rl/workers/${workerId}`);
    expect(res.status).toBe(200);
    return res.json;
  }

  /** Round robin visits every eligible engine within as many picks as there are engines. */
  async function generateOn(url: string): Promise<Record<string, any>> {
    for (let i = 0; i < 6; i++) {
      const gen = await t.http('POST', '/generate', { body: { model: 'MODEL', input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } } });
      expect(gen.status).toBe(200);
      if (gen.headers['x-smg-routed-worker-id'] === url) return gen.json;
    }
    throw new Error(`no /generate was routed to ${url}`);
  }

  async function expectServingAndResumed(): Promise<void> {
    for (const sim of [tsAdv, tsSilent]) {
      const s = await sim.state();
      expect(s.paused, sim.url).toBeNull();
      expect(s.gateOpen, sim.url).toBe(true);
    }
    expect((await sg.state()).paused).toBeNull();
    for (const wid of [id.adv, id.silent, id.sg]) {
      expect(await row(wid), wid).toMatchObject({ control: 'active', state: 'serving', health: 'ready', breaker: 'closed', load: 0 });
    }
  }

  beforeAll(async () => {
    g = await startFixtureG();
    ({ t, tsAdv, tsSilent, sg } = g);
    Object.assign(id, g.id);
  });
  afterAll(() => g?.close());

  it('a disk refit selecting only ts-adv is refused before anything is paused: it cannot load from disk', async () => {
    await tsAdv.clearRecords();
    const res = await t.http('POST', '/v1/rl/refits', { body: disk('11', `id=${id.adv}`) });
    expect(res.status).toBe(409);
    expect(res.json.error).toBe('no_eligible_targets');
    expect(res.json.skipped).toEqual([{ worker_id: id.adv, url: tsAdv.url, reason: 'source_unsupported', message: expect.stringContaining('distributed') }]);
    // The engine saw no call at all, and still serves.
    expect(await tsAdv.requests()).toEqual([]);
    const s = await tsAdv.state();
    expect(s.paused).toBeNull();
    expect(s.weightVersion).not.toBe('11');
    const gen = await generateOn(tsAdv.url);
    expect(gen.meta_info.weight_version).toBe('v7');
  });

  it('a fleet-wide disk refit refits sg and skips ts-adv (source) and ts-silent (no endpoint); 200, nothing is left paused', async () => {
    await tsAdv.clearRecords();
    await tsSilent.clearRecords();
    const res = await t.http('POST', '/v1/rl/refits', { body: disk('12') });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ status: 'succeeded', total: 1, succeeded: 1 });
    expect(res.json.engines.map((e: Record<string, any>) => e.worker_id)).toEqual([id.sg]);
    const skipped = new Map<string, Record<string, any>>(res.json.skipped.map((e: Record<string, any>) => [e.worker_id, e]));
    expect(skipped.get(id.adv)).toMatchObject({ url: tsAdv.url, reason: 'source_unsupported' });
    expect(skipped.get(id.silent)).toMatchObject({ url: tsSilent.url, reason: 'no_control_endpoint' });
    expect(await tsAdv.requests()).toEqual([]);

    await expectServingAndResumed();
    expect((await sg.state()).weightVersion).toBe('12');
    expect((await row(id.sg)).weight_version).toBe('12');
    expect((await row(id.adv)).weight_version).toBe('registered');
    expect((await generateOn(sg.url)).meta_info.weight_version).toBe('12');
    expect((await generateOn(tsAdv.url)).meta_info.weight_version).toBe('v7');
  });
});
