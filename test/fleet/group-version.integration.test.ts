// GRPO groups keep one version during a rolling refit (docs/refit-strategies.md): with four
// engines, one of them on the new version and another draining, the siblings of each group (the
// same prompt) are routed to engines of the version the group's first sample got, though the
// policy (round_robin, which reads no prompt: the group is known by its prompt all the same)
// spreads them over the engines. Outside a rolling refit a fleet of mixed versions is routed as
// SMG routes it: the same prompt reaches both versions.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestGateway } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import type { SimProcess } from '../fixtures/sglang-sim.ts';
import { startVersionedFleet, type VersionedFleet } from '../fixtures/versioned-fleet.ts';
import { parseVersionPolicy } from '../../src/fleet/version-policy.ts';
import type { PickOptions } from '../../src/fleet/router.ts';
import { defaultConfig } from '../../src/gateway/config.ts';

const any = parseVersionPolicy('any');
const prompt = (g: number) => Array.from({ length: 200 }, (_, i) => g * 1000 + i);

describe('one version per GRPO group', () => {
  let sims: SimProcess[];
  let t: TestGateway;

  let fleet: VersionedFleet;
  beforeAll(async () => {
    fleet = await startVersionedFleet({
      sims: 4,
      simArgs: ['--token-rate', '0'],
      gateway: { probeIntervalSecs: 0, routing: { ...defaultConfig().routing, policy: 'round_robin' } },
    });
    ({ t, sims } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  /**
   * n siblings of group g, picked as the data plane picks; the first kept off `firstNot` (so that
   * the test knows which version the group is pinned to).
   */
  const siblings = (g: number, n: number, firstNot: string[] = []) => {
    const router = t.gw.services.router;
    return Array.from({ length: n }, (_, i) => {
      const opts: PickOptions = { policy: any, tokens: prompt(g), expectedOutputTokens: 4000, ...(i === 0 ? { exclude: new Set(firstNot) } : {}) };
      const w = router.pick(opts)!;
      return { w, opts, version: t.gw.services.view.engine(w).version };
    });
  };

  it('during a rolling refit the siblings of a group stay on their version, over several engines', async () => {
    // Waves go in the rows' order: the first engine refit, the second's pause held for a while,
    // so the fleet stays between versions: one engine on 2, one draining, two on 1.
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string }>;
    const simOf = (url: string) => sims.find((s) => s.url === url)!;
    await simOf(rows[1]!.url).setFaults({ route: 'pause_generation', delayMs: 3_000, times: 1 });
    const refit = t.http('POST', '/v1/rl/refits', {
      body: { weight_version: '2', source: { kind: 'disk', model_path: '/m/2' }, strategy: { kind: 'rolling' } },
    });
    const model = t.gw.services.registry.all()[0]!.modelId;
    await until('the first wave done, the second held in its pause', 10_000, async () =>
      t.gw.services.view.fleetMax(model) === '2' && (await simOf(rows[1]!.url).requests()).some((q) => q.path === '/pause_generation') ? true : undefined,
    );
    const router = t.gw.services.router;
    // The drain mark reaches this replica's router through the journal's watch.
    await until('the second engine out of routing', 5_000, async () =>
      router.eligible({ policy: any }).some((w) => w.url === rows[1]!.url) ? undefined : true,
    );
    expect(router.needsPrompt).toBe(true);
    const idOf = (url: string) => t.gw.services.registry.all().find((w) => w.url === url)!.id;
    const oldIds = [rows[2]!.url, rows[3]!.url].map(idOf);
    // Groups 1-3 start on the new engine, 4-6 on an old one.
    const picked = [1, 2, 3, 4, 5, 6].map((g) => siblings(g, 12, g <= 3 ? oldIds : [idOf(rows[0]!.url)]));
    for (const group of picked) for (const p of group) router.finished(p.w.id, p.opts, { answered: true });
    const r = await refit;
    expect(r.status, r.text).toBe(200);
    for (const group of picked) expect(new Set(group.map((p) => p.version)), JSON.stringify(group.map((p) => p.w.url))).toEqual(new Set([group[0]!.version]));
    // Round robin spreads a group over every eligible engine of its version: the two old ones
    // (never the draining one), or the new one alone. Without the pin each would reach all three.
    const old = new Set([rows[2]!.url, rows[3]!.url]);
    for (const group of picked) {
      const urls = new Set(group.map((p) => p.w.url));
      if (group[0]!.version === '1') expect(urls).toEqual(old);
      else expect(urls).toEqual(new Set([rows[0]!.url]));
    }
    expect(picked.map((group) => group[0]!.version)).toEqual(['2', '2', '2', '1', '1', '1']);
    for (const s of sims) await s.clearFaults();
  }, 60_000);

  it('outside a rolling refit, the same prompt reaches both versions of a mixed fleet (SMG routing)', async () => {
    const ids = (await t.http('GET', '/v1/rl/workers')).json.workers.map((w: { id: string }) => w.id);
    expect((await t.http('POST', `/v1/rl/workers/${ids[0]}/version`, { body: { weight_version: '1' } })).status).toBe(200);
    const group = siblings(9, 16);
    for (const p of group) t.gw.services.router.finished(p.w.id, p.opts, { answered: true });
    expect(new Set(group.map((p) => p.version))).toEqual(new Set(['1', '2']));
    // No rolling refit: round_robin reads no prompt, and the data plane extracts none.
    expect(t.gw.services.router.needsPrompt).toBe(false);
  });
});
