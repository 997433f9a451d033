// The replica that owns the engines dies (SIGKILL) while another replica's refit waits on its
// load calls: the refit does not wait out the calls' timeout (minutes for a load), it learns the
// answers are lost once the owner's lease runs out (the calls may have run), reads each engine
// once it has a new owner, and sends the load again where it had not landed (here it died with
// the owner), so every engine ends on the new version, applied once; the resumes that follow go
// to the engines' new owner, so no engine is left paused. The same death during the pause: the
// pauses whose answers were lost are sent again to the new owner and the refit goes on. Judged on
// the simulators' own state. The owner runs with RL off, so it never runs a refit itself; the
// runner is in-process.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { silentLogger } from '../../src/obs/logger.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { httpJson } from '../fixtures/http-json.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const LEASE_SECS = 2;
/** Far longer than the test may wait: a refit that waits out its calls' timeout fails the test. */
const CONTROL_TIMEOUT_SECS = 300;

/**
 * One fleet per describe: nats-server, two simulators registered through the owner (a process, RL
 * off, so it never runs a refit) and the in-process runner, which sees both engines owned by it.
 */
function ownerAndRunner(): { sims: SimProcess[]; owner: GatewayProcess; runner: Gateway } {
  let nats: TestNats | undefined;
  const f = { sims: [] as SimProcess[] } as { sims: SimProcess[]; owner: GatewayProcess; runner: Gateway };
  beforeAll(async () => {
    nats = await startTestNats();
    f.sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    f.owner = await startGatewayProcess([
      '--nats-url',
      nats.url,
      '--replica-id',
      'owner',
      '--enable-rl=false',
      '--lease-secs',
      String(LEASE_SECS),
      '--health-check-interval-secs',
      '1',
    ]);
    for (const s of f.sims) expect((await f.owner.http('POST', '/workers', { url: s.url })).status).toBe(202);
    f.runner = await startGateway(
      { ...testConfig({ leaseSecs: LEASE_SECS, rl: { controlTimeoutSecs: CONTROL_TIMEOUT_SECS } }), natsUrl: nats.url, replicaId: 'runner' },
      { log: silentLogger() },
    );
    await until('both engines ready on the runner, owned by the owner', 20_000, async () => {
      const rows = (await httpJson(f.runner.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ health: string; owner: string }>;
      return rows.length === 2 && rows.every((r) => r.health === 'ready' && r.owner === 'owner');
    });
  }, 90_000);
  afterAll(async () => {
    await f.runner?.close();
    await f.owner?.kill();
    await Promise.all(f.sims.map((s) => s.stop()));
    await nats?.stop();
  });
  return f;
}

describe("the engines' owner dies while a refit waits on its calls", () => {
  const f = ownerAndRunner();

  it('ends within a lease and a few seconds of the death, loads again what died with the owner, and leaves no engine paused', async () => {
    const loadsBefore = new Map<string, number>();
    for (const s of f.sims) {
      await s.setFaults({ route: 'update_weights_from_disk', delayMs: 3_000, times: 1 });
      loadsBefore.set(s.url, (await s.state()).weights.loads);
    }
    const answer = httpJson(f.runner.url, 'POST', '/v1/rl/refits', {
      refit_id: 'owner-death-1',
      weight_version: '31',
      source: { kind: 'disk', model_path: '/m/31' },
    });
    await until('both engines received the load', 10_000, async () => {
      for (const s of f.sims) if (!(await s.requests()).some((r) => r.path === '/update_weights_from_disk')) return false;
      return true;
    });
    await f.owner.kill();
    const killedAt = Date.now();
    const r = await answer;
    const tookMs = Date.now() - killedAt;
    expect(r.status, r.text).toBe(200);
    // The lease (2 s), the runner's check (every 0.5 s), the takeover, the second load and the resumes, on a busy machine.
    expect(tookMs, "ms from the owner's death to the report").toBeLessThan(LEASE_SECS * 1000 + 10_000);
    expect(r.json.succeeded).toBe(2);
    for (const s of f.sims) {
      const st = await s.state();
      expect(st.paused, s.url).toBeNull();
      expect(st.weightVersion, s.url).toBe('31');
      // Sent twice (the first died with its owner before the engine applied it), applied once.
      expect((await s.requests()).filter((q) => q.path === '/update_weights_from_disk').length, s.url).toBe(2);
      expect(st.weights.loads - loadsBefore.get(s.url)!, s.url).toBe(1);
    }

    // The runner now owns the engines: the next refit brings them up at the new version.
    for (const s of f.sims) await s.clearFaults();
    const next = await httpJson(f.runner.url, 'POST', '/v1/rl/refits', {
      refit_id: 'owner-death-2',
      weight_version: '32',
      source: { kind: 'disk', model_path: '/m/32' },
    });
    expect(next.status, next.text).toBe(200);
    for (const s of f.sims) {
      const st = await s.state();
      expect(st.paused, s.url).toBeNull();
      expect(st.weightVersion, s.url).toBe('32');
    }
  }, 60_000);
});

describe("the engines' owner dies while a refit waits on its pauses", () => {
  const f = ownerAndRunner();

  it('sends the lost pauses again to the new owner and finishes the refit: every engine on the new version, none paused', async () => {
    // The held pause dies with its caller (the simulator drops an abandoned call).
    for (const s of f.sims) await s.setFaults({ route: 'pause_generation', delayMs: 3_000, times: 1 });
    const answer = httpJson(f.runner.url, 'POST', '/v1/rl/refits', {
      refit_id: 'owner-death-pause',
      weight_version: '41',
      source: { kind: 'disk', model_path: '/m/41' },
    });
    await until('both engines received the pause', 10_000, async () => {
      for (const s of f.sims) if (!(await s.requests()).some((r) => r.path === '/pause_generation')) return false;
      return true;
    });
    await f.owner.kill();
    const r = await answer;
    expect(r.status, r.text).toBe(200);
    expect(r.json.succeeded).toBe(2);
    for (const s of f.sims) {
      const st = await s.state();
      expect(st.paused, s.url).toBeNull();
      expect(st.weightVersion, s.url).toBe('41');
      // The first pause died with its owner; the second came from the new owner.
      expect((await s.requests()).filter((q) => q.path === '/pause_generation').length, s.url).toBe(2);
    }
  }, 60_000);
});
