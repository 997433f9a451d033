// SIGKILL of the replica running a refit, in each phase, several times: another replica takes the
// refit over from its journal and finishes it. The trainer gets exactly one report; no engine is
// left paused and no pause or weight load reaches an engine twice — judged by the simulators' own
// state and request records, never by the gateway's view.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';

const LEASE_SECS = 2;
const SLOW_MS = 1_500;

type Phase = 'pause' | 'refit' | 'verify' | 'resume';
const ROUTE: Record<Phase, { route: string; method?: string }> = {
  pause: { route: 'pause_generation' },
  refit: { route: 'update_weights_from_disk' },
  verify: { route: 'model_info', method: 'GET' },
  resume: { route: 'continue_generation' },
};

describe('SIGKILL of the replica running a refit', () => {
  let nats: TestNats;
  let bus: Bus;
  let sims: SimProcess[] = [];
  const replicas: GatewayProcess[] = [];
  let n = 0;
  const launch = async () => {
    const g = await startGatewayProcess(['--nats-url', nats.url, '--replica-id', `r${n++}`, '--lease-secs', String(LEASE_SECS), '--health-check-interval-secs', '2', '--retry-interval-secs', '1', '--rl-control-timeout-secs', '20']);
    replicas.push(g);
    return g;
  };
  const live = () => replicas.filter((g) => g.pid && !killed.has(g));
  const killed = new Set<GatewayProcess>();

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await connectBus({ url: nats.url, name: 'test-trainer' });
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    await Promise.all([launch(), launch()]);
    for (const s of sims) expect((await replicas[0]!.http('POST', '/workers', { url: s.url })).status).toBe(202);
    await until('three engines ready on both replicas', 20_000, async () => {
      for (const g of replicas) {
        const rows = (await g.http('GET', '/v1/rl/workers')).json.workers as Array<{ health: string }>;
        if (rows.length !== 3 || rows.some((r) => r.health !== 'ready')) return false;
      }
      return true;
    });
  }, 60_000);
  afterAll(async () => {
    await bus?.close();
    await Promise.all(replicas.map((g) => g.stop()));
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
  });

  const trials: Array<[Phase, number]> = [];
  for (const phase of ['pause', 'refit', 'verify', 'resume'] as Phase[]) for (let i = 0; i < 2; i++) trials.push([phase, i]);

  it.each(trials)('in the %s phase (trial %i): one report, nothing paused, no step twice', async (phase, trial) => {
    const version = `${phase}-${trial}`;
    const refitId = `kill-${version}`;
    for (const s of sims) {
      await s.clearRequests();
      await s.setFaults({ ...ROUTE[phase], delayMs: SLOW_MS, times: 1 });
    }
    const reports: unknown[] = [];
    const sub = bus.subscribe(subjects('rl').refitReport(refitId), (data) => void reports.push(data));
    const [front] = live();
    // Sent to one replica; whichever replica's runner takes it is killed.
    const answer = front!.http('POST', '/v1/rl/refits', { refit_id: refitId, weight_version: version, source: { kind: 'disk', model_path: `/m/${version}` } }).catch(() => null);
    const holder = await until(`the refit reaching the ${phase} phase`, 15_000, async () => {
      const r = await front!.http('GET', `/v1/rl/refits/${refitId}`);
      return r.status === 200 && r.json.status === 'running' && r.json.phase === phase ? (r.json.replica as string) : null;
    });
    const victim = replicas.find((g) => g.replicaId === holder)!;
    await new Promise((r) => setTimeout(r, 300)); // the phase's calls are on their way
    killed.add(victim);
    await victim.kill();
    const survivor = live()[0]!;
    const report = await until('the report on the survivor', 30_000, async () => {
      const r = await survivor.http('GET', `/v1/rl/refits/${refitId}`);
      return r.status === 200 && r.json.status !== 'running' ? r.json : null;
    });
    await answer;
    await launch(); // two replicas again for the next trial
    await new Promise((r) => setTimeout(r, 500));
    sub.unsubscribe();
    expect(reports, 'reports on rl.refit.<id>.report').toHaveLength(1);
    expect((reports[0] as { id: string }).id).toBe(refitId);
    expect(report.id).toBe(refitId);
    for (const s of sims) {
      await s.clearFaults();
      expect((await s.state()).paused, `${s.url} paused`).toBeNull();
      const seen = (await s.requests()).map((q: { path: string }) => q.path);
      const count = (p: string) => seen.filter((x: string) => x === p).length;
      expect(count('/pause_generation'), `${s.url} pauses`).toBeLessThanOrEqual(1);
      expect(count('/update_weights_from_disk'), `${s.url} loads`).toBeLessThanOrEqual(1);
      expect(count('/continue_generation'), `${s.url} resumes`).toBeGreaterThanOrEqual(1);
    }
    if (phase === 'verify' || phase === 'resume') {
      // Every engine had its load before the kill: the new runner finished the refit.
      expect(report.status, JSON.stringify(report.failed)).toBe('succeeded');
      for (const s of sims) expect((await s.state()).weightVersion).toBe(version);
    } else if (phase === 'refit') {
      // A load in flight when its replica died is never sent again: the version check decides,
      // and the report says what each engine really holds.
      for (const s of sims) {
        const e = report.engines.find((x: { url: string }) => x.url === s.url);
        const loaded = (await s.state()).weightVersion === version;
        expect(e.outcome, `${s.url}: ${JSON.stringify(e)}`).toBe(loaded ? 'ok' : 'failed');
        if (!loaded) expect(e.error).toBe('verify_failed');
      }
    } else {
      expect(report.status).toBe('failed');
      for (const s of sims) expect((await s.state()).weightVersion).not.toBe(version);
    }
  }, 90_000);
});
