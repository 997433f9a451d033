// SIGKILL of the replica running a distributed refit, during each broadcast chunk: the replica
// that takes the refit over cannot go on with a collective the trainer already broadcast, so it
// abandons the transfer: the group is torn down, every engine is resumed and quarantined (it may
// hold part of the weights). One report; no engine left paused; no step sent to an engine twice —
// judged by the simulators' own state and request records.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjects } from '../../src/bus/subjects.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runDistributedRefit } from '../../src/cli/trainer/refit.ts';
import { until } from '../fixtures/gateway-process.ts';
import { startReplicaFleet, type ReplicaFleet } from '../fixtures/replica-fleet.ts';

const LEASE_SECS = 2;
const CHUNKS = 3;

describe('SIGKILL of the replica running a distributed refit', () => {
  let f: ReplicaFleet;
  beforeAll(async () => {
    f = await startReplicaFleet({ sims: [0, 1].map(() => ['--tp-size', '1', '--token-rate', '0']), prefix: 'd', leaseSecs: LEASE_SECS });
  }, 60_000);
  afterAll(() => f?.close());

  const trials: Array<[number, number]> = [];
  for (let chunk = 1; chunk <= CHUNKS; chunk++) for (let i = 0; i < 2; i++) trials.push([chunk, i]);

  it.each(trials)(
    'during chunk %i of 3 (trial %i): one report, the transfer abandoned, nothing paused, no step twice',
    async (chunk, trial) => {
      const refitId = `dist-kill-${chunk}-${trial}`;
      for (const s of f.sims) {
        await s.clearRequests();
        await s.setFaults({ route: 'update_weights_from_distributed', delayMs: 1_500, times: CHUNKS });
      }
      const reports: unknown[] = [];
      const sub = f.bus.subscribe(subjects('rl').refitReport(refitId), (data) => void reports.push(data));
      const [front] = f.live();
      const chunks = makeChunks({ params: 6, perChunk: 2, shape: [8, 8], dtype: 'bfloat16' });
      const trainer = runDistributedRefit({
        gateway: front!.url,
        version: `d${chunk}-${trial}`,
        chunks,
        refitId,
        rendezvousTimeoutMs: 10_000,
        chunkTimeoutMs: 5_000,
        settleMs: 200,
        httpTimeoutMs: 60_000,
      }).then(
        (r) => ({ answered: r }),
        (err: unknown) => ({ lost: err }),
      );
      // Step 0 joins the group; steps 1..3 are the chunks.
      const holder = await until(`the refit in chunk ${chunk}`, 20_000, async () => {
        const r = await front!.http('GET', `/v1/rl/refits/${refitId}`);
        return r.status === 200 && r.json.status === 'running' && r.json.phase === 'refit' && r.json.step_index === chunk ? (r.json.replica as string) : null;
      });
      const victim = f.replicas.find((g) => g.replicaId === holder)!;
      await new Promise((r) => setTimeout(r, 300));
      await f.kill(victim);
      const survivor = f.live()[0]!;
      const report = await until('the report on the survivor', 40_000, async () => {
        const r = await survivor.http('GET', `/v1/rl/refits/${refitId}`);
        return r.status === 200 && r.json.status !== 'running' ? r.json : null;
      });
      // The trainer's own answer: the failed report (207), from the replica it asked if that one
      // survived; the connection lost if it was the one killed.
      const got = await trainer;
      if (front === victim) expect(got, 'the killed replica answered').toMatchObject({ lost: expect.any(Error) });
      else {
        expect(got, 'no answer from the surviving replica').toHaveProperty('answered');
        const r = (got as { answered: Awaited<ReturnType<typeof runDistributedRefit>> }).answered;
        expect(r.status, JSON.stringify(r.report)).toBe(207);
        expect(r.report).toEqual(report);
      }
      await f.launch();
      await new Promise((r) => setTimeout(r, 500));
      sub.unsubscribe();
      expect(reports, 'reports on rl.refit.<id>.report').toHaveLength(1);
      // The transfer could not go on: no engine took the new version, all were failed.
      expect(report.status).toBe('failed');
      for (const e of report.engines) expect(e.outcome).toBe('failed');
      for (const s of f.sims) {
        await s.clearFaults();
        const st = await s.state();
        expect(st.paused, `${s.url} paused`).toBeNull();
        expect(st.weights.groups, `${s.url} groups`).toEqual([]);
        // Before the last chunk no engine can hold the new version. In the last one, an engine whose
        // owner lived runs its chunk to the end and may take it: it is still failed and quarantined
        // below (the transfer was abandoned), as an engine that may hold anything is.
        if (chunk < CHUNKS) expect(st.weightVersion).not.toBe(`d${chunk}-${trial}`);
        // The report says what each engine holds, read from it after the transfer was abandoned.
        const row = report.engines.find((e: { url: string }) => e.url === s.url);
        expect(row?.weight_version, `${s.url}: the report's weight_version`).toBe(st.weightVersion);
        const seen = await s.requests();
        const count = (p: string) => seen.filter((q) => q.path === p).length;
        expect(count('/pause_generation'), `${s.url} pauses`).toBeLessThanOrEqual(1);
        expect(count('/init_weights_update_group'), `${s.url} inits`).toBeLessThanOrEqual(1);
        const chunkNames = seen.filter((q) => q.path === '/update_weights_from_distributed').map((q) => JSON.parse(q.body).names.join(','));
        expect(new Set(chunkNames).size, `${s.url} chunks sent twice: ${chunkNames}`).toBe(chunkNames.length);
        expect(count('/continue_generation'), `${s.url} resumes`).toBeGreaterThanOrEqual(1);
      }
      const rows = (await survivor.http('GET', '/v1/rl/workers')).json.workers as Array<{ quarantined: boolean }>;
      expect(rows.every((r) => r.quarantined)).toBe(true);
    },
    120_000,
  );
});
