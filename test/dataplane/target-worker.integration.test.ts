// `--policy consistent_hashing` through the gateway (docs/routing.md): X-SMG-Target-Worker sends a
// request to the engine it names (by index among the eligible engines, id or URL), judged by the
// simulators' own records, and one naming no eligible engine is a retryable 503 that reaches no
// engine; X-SMG-Routing-Key keeps a session on one engine.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultRouting } from '../../src/gateway/config.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const QUICK = { text: 'hi', sampling_params: { max_new_tokens: 1 } };

async function generates(s: SimProcess): Promise<number> {
  return (await s.requests()).filter((r) => r.path === '/generate').length;
}

describe('consistent_hashing: X-SMG-Target-Worker and X-SMG-Routing-Key', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ routing: { ...defaultRouting(), policy: 'consistent_hashing' } });
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('the named engine gets the request: by URL, by id, by index in registry order', async () => {
    const order = t.gw.services.registry.all().map((w) => w.url);
    const byUrl = (url: string) => sims.find((s) => s.url === url)!;
    for (const [target, url] of [
      [sims[2]!.url, sims[2]!.url],
      [ids[1]!, sims[1]!.url],
      ['0', order[0]!],
    ] as const) {
      await Promise.all(sims.map((s) => s.clearRequests()));
      for (let i = 0; i < 3; i++) {
        const r = await t.http('POST', '/generate', { body: QUICK, headers: { 'x-smg-target-worker': target } });
        expect(r.status, r.text).toBe(200);
      }
      expect(await generates(byUrl(url)), target).toBe(3);
      expect((await Promise.all(sims.map(generates))).reduce((a, b) => a + b, 0)).toBe(3);
    }
  });

  it('a target naming no eligible engine is 503 no_available_workers, and no engine is called', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    for (const target of ['3', 'http://127.0.0.1:1']) {
      const r = await t.http('POST', '/generate', { body: QUICK, headers: { 'x-smg-target-worker': target } });
      expect(r.status).toBe(503);
      expect(r.json.error).toBe('no_available_workers');
      expect(r.json.message).toContain('X-SMG-Target-Worker names no eligible engine');
    }
    expect(await Promise.all(sims.map(generates))).toEqual([0, 0, 0]);
  });

  it('a routing key keeps its session on one engine', async () => {
    for (const key of ['session-a', 'session-b', 'session-c']) {
      const seen = new Set<string>();
      for (let i = 0; i < 4; i++) {
        const r = await t.http('POST', '/generate', { body: QUICK, headers: { 'x-smg-routing-key': key } });
        expect(r.status).toBe(200);
        seen.add(String(r.headers['x-smg-routed-worker-id']));
      }
      expect(seen.size, key).toBe(1);
    }
  });
});
