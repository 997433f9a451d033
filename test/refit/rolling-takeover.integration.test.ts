// SIGKILL of the replica running a rolling refit, while its second wave loads: another replica
// takes the refit over from its journal and finishes the waves. The trainer gets one report for
// the refit; no engine is refit twice (each applies one load, by its own count) or left paused;
// every engine ends on the new version; never two engines paused at once (their own records).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjects } from '../../src/bus/subjects.ts';
import { until } from '../fixtures/gateway-process.ts';
import { startReplicaFleet, type ReplicaFleet } from '../fixtures/replica-fleet.ts';

const LEASE_SECS = 2;
const SLOW_MS = 1_500;

describe('SIGKILL of the replica running a rolling refit', () => {
  let f: ReplicaFleet;
  beforeAll(async () => {
    f = await startReplicaFleet({ sims: [0, 1, 2].map(() => ['--token-rate', '0']), prefix: 'rr', leaseSecs: LEASE_SECS });
  }, 60_000);
  afterAll(() => f?.close());

  it('in the second wave: another replica finishes the waves, one report, no engine refit twice or left paused', async () => {
    const id = 'rolling-kill';
    const loadsBefore = new Map<string, number>();
    for (const s of f.sims) {
      await s.clearRequests();
      await s.setFaults({ route: 'update_weights_from_disk', delayMs: SLOW_MS, times: 1 });
      loadsBefore.set(s.url, (await s.state()).weights.loads);
    }
    const reports: Array<{ id: string }> = [];
    const sub = f.bus.subscribe(subjects('rl').refitReport(id), (data) => void reports.push(data as { id: string }));
    const [front] = f.live();
    const answer = front!
      .http('POST', '/v1/rl/refits', { refit_id: id, weight_version: '7', source: { kind: 'disk', model_path: '/m/7' }, strategy: { kind: 'rolling' } })
      .catch((err: Error) => ({ status: 0, text: err.message, json: null }));
    // The second wave's refit runs its load: its replica is the parent's (waves run where the parent does).
    const holder = await until('the second wave loading', 20_000, async () => {
      const r = await front!.http('GET', `/v1/rl/refits/${id}-w2`);
      return r.status === 200 && r.json.status === 'running' && r.json.phase === 'refit' ? (r.json.replica as string) : null;
    });
    const parent = await front!.http('GET', `/v1/rl/refits/${id}`);
    expect(parent.json.replica).toBe(holder);
    const victim = f.replicas.find((g) => g.replicaId === holder)!;
    await new Promise((r) => setTimeout(r, 300)); // the load is on its way
    await f.kill(victim);
    const survivor = f.live()[0]!;
    const report = await until('the report on the survivor', 40_000, async () => {
      const r = await survivor.http('GET', `/v1/rl/refits/${id}`);
      return r.status === 200 && r.json.status !== 'running' ? r.json : null;
    });
    // The caller's replica may have been the one killed; if not, it answers with the same report.
    const answered = await answer;
    if (victim !== front) expect(answered.json?.id).toBe(id);
    await new Promise((r) => setTimeout(r, 500));
    sub.unsubscribe();

    expect(reports.map((r) => r.id)).toEqual([id]);
    expect(report).toMatchObject({ id, status: 'succeeded', strategy: 'rolling', total: 3, succeeded: 3 });
    expect(report.waves.map((w: { refit_id: string }) => w.refit_id)).toEqual([`${id}-w1`, `${id}-w2`, `${id}-w3`]);
    const windows: Array<[number, number, string]> = [];
    for (const s of f.sims) {
      await s.clearFaults();
      const st = await s.state();
      expect(st.paused, `${s.url} paused`).toBeNull();
      expect(st.weightVersion, s.url).toBe('7');
      expect(st.weights.loads - loadsBefore.get(s.url)!, `${s.url} loads applied`).toBe(1);
      const seen = await s.requests();
      const pauses = seen.filter((q) => q.path === '/pause_generation').map((q) => Date.parse(q.time));
      const resumes = seen.filter((q) => q.path === '/continue_generation').map((q) => Date.parse(q.time));
      expect(pauses, `${s.url} pauses`).toHaveLength(1);
      expect(resumes.length, `${s.url} resumes`).toBeGreaterThanOrEqual(1);
      windows.push([pauses[0]!, Math.max(...resumes), s.url]);
    }
    windows.sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < windows.length; i++)
      expect(windows[i]![0], `${windows[i]![2]} paused while ${windows[i - 1]![2]} was`).toBeGreaterThanOrEqual(windows[i - 1]![1]);
  }, 90_000);
});
