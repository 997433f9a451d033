// SIGKILL of the replica running a refit, in each phase, several times: another replica takes the
// refit over from its journal and finishes it. The trainer gets exactly one report; no engine is
// left paused and no engine applies a load twice; a pause in doubt is sent again (the pause starts
// over: nothing was loaded yet), and a load in doubt that did not land is sent again (a disk load
// to the same version is safe to repeat), so every engine ends on the new version whatever the
// phase — judged by the simulators' own state and request records, never by the gateway's view.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjects } from '../../src/bus/subjects.ts';
import { until } from '../fixtures/gateway-process.ts';
import { startReplicaFleet, type ReplicaFleet } from '../fixtures/replica-fleet.ts';

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
  let f: ReplicaFleet;
  beforeAll(async () => {
    f = await startReplicaFleet({ sims: [0, 1, 2].map(() => ['--token-rate', '0']), prefix: 'r', leaseSecs: LEASE_SECS });
  }, 60_000);
  afterAll(() => f?.close());

  const trials: Array<[Phase, number]> = [];
  for (const phase of ['pause', 'refit', 'verify', 'resume'] as Phase[]) for (let i = 0; i < 2; i++) trials.push([phase, i]);

  it.each(trials)(
    'in the %s phase (trial %i): one report, nothing paused, no load applied twice, every engine on the new version',
    async (phase, trial) => {
      const version = `${phase}-${trial}`;
      const refitId = `kill-${version}`;
      const loadsBefore = new Map<string, number>();
      for (const s of f.sims) {
        await s.clearRequests();
        await s.setFaults({ ...ROUTE[phase], delayMs: SLOW_MS, times: 1 });
        loadsBefore.set(s.url, (await s.state()).weights.loads);
      }
      const reports: unknown[] = [];
      const sub = f.bus.subscribe(subjects('rl').refitReport(refitId), (data) => void reports.push(data));
      const [front] = f.live();
      // Sent to one replica; whichever replica's runner takes it is killed.
      const body = { refit_id: refitId, weight_version: version, source: { kind: 'disk', model_path: `/m/${version}` } };
      const answer = front!.http('POST', '/v1/rl/refits', body).then(
        (r) => ({ answered: r }),
        (err: unknown) => ({ lost: err }),
      );
      const holder = await until(`the refit reaching the ${phase} phase`, 15_000, async () => {
        const r = await front!.http('GET', `/v1/rl/refits/${refitId}`);
        return r.status === 200 && r.json.status === 'running' && r.json.phase === phase ? (r.json.replica as string) : null;
      });
      const victim = f.replicas.find((g) => g.replicaId === holder)!;
      await new Promise((r) => setTimeout(r, 300)); // the phase's calls are on their way
      await f.kill(victim);
      const survivor = f.live()[0]!;
      const report = await until('the report on the survivor', 30_000, async () => {
        const r = await survivor.http('GET', `/v1/rl/refits/${refitId}`);
        return r.status === 200 && r.json.status !== 'running' ? r.json : null;
      });
      // The trainer's own answer: the report, from the replica it asked if that one survived. If it
      // was the one killed, its connection is lost, and the trainer sends the same request (same
      // refit_id) to the survivor, which answers the same report: the same refit, not a second one
      // (the loads counted below would show a second).
      const got = await answer;
      let r: { status: number; json: unknown; text: string };
      if (front === victim) {
        expect(got, 'the killed replica answered').toMatchObject({ lost: expect.any(Error) });
        r = await survivor.http('POST', '/v1/rl/refits', body);
      } else {
        expect(got, 'no answer from the surviving replica').toHaveProperty('answered');
        r = (got as { answered: typeof r }).answered;
      }
      expect(r.status, r.text).toBe(200);
      expect(r.json).toEqual(report);
      await f.launch(); // two replicas again for the next trial
      await new Promise((r) => setTimeout(r, 500));
      sub.unsubscribe();
      expect(reports, 'reports on rl.refit.<id>.report').toHaveLength(1);
      expect((reports[0] as { id: string }).id).toBe(refitId);
      expect(report.id).toBe(refitId);
      for (const s of f.sims) {
        await s.clearFaults();
        expect((await s.state()).paused, `${s.url} paused`).toBeNull();
        const seen = (await s.requests()).map((q: { path: string }) => q.path);
        const count = (p: string) => seen.filter((x: string) => x === p).length;
        // The pause phase starts over after a takeover in it: the dead runner's pause and the new one's.
        expect(count('/pause_generation'), `${s.url} pauses`).toBeLessThanOrEqual(phase === 'pause' ? 2 : 1);
        // Sent again only after the version check showed it had not landed: applied once at most.
        expect(count('/update_weights_from_disk'), `${s.url} loads sent`).toBeLessThanOrEqual(phase === 'refit' ? 2 : 1);
        expect((await s.state()).weights.loads - loadsBefore.get(s.url)!, `${s.url} loads applied`).toBeLessThanOrEqual(1);
        expect(count('/continue_generation'), `${s.url} resumes`).toBeGreaterThanOrEqual(1);
      }
      if (phase === 'verify' || phase === 'resume' || phase === 'pause') {
        // Every engine had its load before the kill, or none had been loaded and the pause started
        // over: the new runner finished the refit.
        expect(report.status, JSON.stringify(report.failed)).toBe('succeeded');
        for (const s of f.sims) expect((await s.state()).weightVersion).toBe(version);
      } else {
        // A load in flight when its replica died: the version check decides whether it landed, and
        // one that did not is sent again, so every live engine ends on the new version.
        expect(report.status, JSON.stringify(report.failed)).toBe('succeeded');
        for (const s of f.sims) {
          const e = report.engines.find((x: { url: string }) => x.url === s.url);
          expect((await s.state()).weightVersion, s.url).toBe(version);
          expect(e.outcome, `${s.url}: ${JSON.stringify(e)}`).toBe('ok');
        }
      }
    },
    90_000,
  );
});
