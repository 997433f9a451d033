// The refit transaction on TokenSpeed workers (issue 3; spec §18 fixture G, engines.md §3.4, §3.6):
// TokenSpeed's control app refuses disk loads with 501, so a disk refit reports the engine as
// `upstream_error` 501 and must still resume it: the engine is not left paused and keeps serving.

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

  it('a disk refit selecting ts-adv is 207 upstream_error 501; the engine is resumed and still generates', async () => {
    await tsAdv.clearRecords();
    const res = await t.http('POST', '/v1/rl/refits', { body: disk('11', `id=${id.adv}`) });
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ status: 'failed', source: 'disk', total: 1, succeeded: 0, weight_version: '11' });
    expect(res.json.engines).toHaveLength(1);
    const e = res.json.engines[0];
    expect(e).toMatchObject({
      worker_id: id.adv,
      url: tsAdv.url,
      outcome: 'failed',
      failed_phase: 'refit',
      failed_step: 'update_weights_from_disk',
      error: 'upstream_error',
      status: 501,
    });
    expect(e.message).toContain('HTTP 501');
    expect(e.message).toContain('supported sources: distributed,mooncake');
    expect(e.phases.pause).toEqual(expect.any(Number));
    expect(e.phases.resume).toEqual(expect.any(Number));
    expect(res.json.failed).toEqual([e]);

    // The engine saw pause, the refused load and the resume, in that order, each with its bearer.
    const calls = await tsAdv.requests();
    expect(calls.map((c) => `${c.method} ${c.path}`)).toEqual([
      'POST /pause_generation',
      'POST /update_weights_from_disk',
      'POST /continue_generation',
    ]);
    for (const c of calls) expect(c.headers.authorization).toBe('Bearer ts-secret');
    expect(JSON.parse(calls[1]!.body)).toMatchObject({ model_path: '/models/step-11', weight_version: '11' });

    // Not paused afterwards, on the engine or in the gateway; nothing recorded as a new version.
    const s = await tsAdv.state();
    expect(s.paused).toBeNull();
    expect(s.gateOpen).toBe(true);
    expect(s.weightVersion).not.toBe('11');
    expect(await row(id.adv)).toMatchObject({ control: 'active', state: 'serving', health: 'ready', breaker: 'closed', weight_version: 'registered' });

    const gen = await generateOn(tsAdv.url);
    expect(Array.isArray(gen)).toBe(false);
    expect(gen.output_ids).toHaveLength(3);
    expect(gen.meta_info.weight_version).toBe('v7');
    expect(gen.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
  });

  it('a fleet-wide disk refit refits sg and reports ts-adv (501) and ts-silent (no endpoint); nothing is left paused', async () => {
    const res = await t.http('POST', '/v1/rl/refits', { body: disk('12') });
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ status: 'partial', total: 3, succeeded: 1 });
    const byId = new Map<string, Record<string, any>>(res.json.engines.map((e: Record<string, any>) => [e.worker_id, e]));
    expect(byId.get(id.sg)).toMatchObject({ outcome: 'ok', weight_version: '12' });
    expect(byId.get(id.adv)).toMatchObject({ outcome: 'failed', failed_phase: 'refit', error: 'upstream_error', status: 501 });
    expect(byId.get(id.silent)).toMatchObject({ outcome: 'failed', failed_phase: 'pause', error: 'no_control_endpoint' });
    expect(res.json.failed.map((e: Record<string, any>) => e.worker_id).sort()).toEqual([id.adv, id.silent].sort());

    await expectServingAndResumed();
    expect((await sg.state()).weightVersion).toBe('12');
    expect((await row(id.sg)).weight_version).toBe('12');
    expect((await row(id.adv)).weight_version).toBe('registered');
    expect((await generateOn(sg.url)).meta_info.weight_version).toBe('12');
    expect((await generateOn(tsAdv.url)).meta_info.weight_version).toBe('v7');
  });
});
