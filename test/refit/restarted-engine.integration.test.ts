// An engine killed at a random moment of a refit and restarted: the refit answers 207 naming it,
// and after the next refit no engine is paused — judged by each simulator's own state, never by
// the gateway's. (Before resumes owed were recorded, the gateway kept the failed refit's `paused`
// as if an operator had paused the engine, paused the restarted engine in the next refit and
// never resumed it.)

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const TRIALS = 30;

describe('an engine restarted during a refit', () => {
  let t: TestGateway;
  let sims: SimProcess[] = [];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 3 }, retryIntervalSecs: 1, probeIntervalSecs: 1, probeFailureThreshold: 1 });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all(sims.map((s) => s.stop()));
  });

  const refit = (v: number) => t.http('POST', '/v1/rl/refits', { body: { weight_version: String(v), source: { kind: 'disk', model_path: `/m/${v}` } } });

  const nonePaused = async () => {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const paused = (await Promise.all(sims.map(async (s) => ((await s.state()).paused === null ? null : s.url)))).filter(Boolean);
      if (paused.length === 0) return [];
      if (Date.now() > deadline) return paused;
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it(`${TRIALS} trials: the first refit names the killed engine, and after the second none is paused`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const victim = sims[trial % sims.length]!;
      // The victim's calls are slowed so that a kill anywhere in [0, 400) ms lands before its resume ends.
      await victim.setFaults([
        { route: 'pause_generation', delayMs: 50, times: 1 },
        { route: 'update_weights_from_disk', delayMs: 100, times: 1 },
        { route: 'continue_generation', delayMs: 300, times: 1 },
      ]);
      const first = refit(2 * trial + 1);
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 400)));
      await victim.kill();
      const r1 = await first;
      expect(r1.status, `trial ${trial}: ${r1.text}`).toBe(207);
      expect(
        r1.json.failed.map((f: { url: string }) => f.url),
        `trial ${trial}`,
      ).toContain(victim.url);

      await victim.restart();
      const r2 = await refit(2 * trial + 2);
      expect([200, 207], `trial ${trial}: ${r2.text}`).toContain(r2.status);
      expect(await nonePaused(), `trial ${trial}: engines left paused`).toEqual([]);
      // The next trial starts from a fleet that serves again.
      await t.waitReady(sims.length, 10_000);
    }
  }, 300_000);
});
