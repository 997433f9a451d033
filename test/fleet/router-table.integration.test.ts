// The router keeps a routing table rebuilt only when the registry or an engine actor changed
// (router.ts). What it must never do is route on a table older than a change: every state,
// control, version and registration change is seen by the very next pick.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { parseVersionPolicy } from '../../src/fleet/version-policy.ts';
import type { PickOptions } from '../../src/fleet/router.ts';

describe('routing table: a change is seen by the next pick', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];
  // Each pick is a request that ends at once (told to the policy), as the data plane's do: a policy
  // that counts queued work would otherwise see an ever longer queue on the engines it picked.
  const picks = (n: number, policy = parseVersionPolicy('any')) =>
    new Set(
      Array.from({ length: n }, () => {
        const opts: PickOptions = { policy };
        const id = t.gw.services.router.pick(opts)?.id;
        if (id) t.gw.services.router.finished(id, opts, { answered: true });
        return id;
      }),
    );

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ probeIntervalSecs: 0 });
    ids = await t.register(sims.map((s) => s.url));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('a gateway-local pause leaves routing at once, and a resume brings the engine back at once', async () => {
    expect(picks(30)).toEqual(new Set(ids));
    const paused = await t.http('POST', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'paused' } });
    expect(paused.status, paused.text).toBe(200);
    expect(picks(30)).toEqual(new Set([ids[1], ids[2]]));
    const back = await t.http('POST', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'active' } });
    expect(back.status, back.text).toBe(200);
    expect(picks(30)).toEqual(new Set(ids));
  });

  it('a version write changes who is latest for the very next latest-only pick', async () => {
    for (const [i, v] of ['5', '5', '4'].entries()) {
      const r = await t.http('POST', `/v1/rl/workers/${ids[i]}/version`, { body: { weight_version: v } });
      expect(r.status, r.text).toBe(200);
    }
    const latest = parseVersionPolicy('latest-only');
    expect(picks(30, latest)).toEqual(new Set([ids[0], ids[1]]));
    await t.http('POST', `/v1/rl/workers/${ids[2]}/version`, { body: { weight_version: '6' } });
    expect(picks(30, latest)).toEqual(new Set([ids[2]]));
  });

  it('a removed worker is never picked again, and a registered one is picked as soon as it serves', async () => {
    const del = await t.http('DELETE', `/workers/${ids[2]}`);
    expect(del.status, del.text).toBeLessThan(300);
    expect(picks(30)).toEqual(new Set([ids[0], ids[1]]));
    const [again] = await t.register([sims[2]!.url]);
    expect(picks(60)).toEqual(new Set([ids[0], ids[1], again]));
  });
});
