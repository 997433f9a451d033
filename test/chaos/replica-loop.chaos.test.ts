// Chaos scenario `replica-loop` (issue 11, item 8): gateway replicas (child processes) are
// SIGKILLed in a loop while a trainer runs refits one after another, and each is replaced by a new
// replica. The seeded random generator picks when each kill comes and which replica dies: the one
// running the current refit, one owning engines, or any.
//
// The trainer behaves as a real one: it sends each refit to a live replica; when that replica dies
// under it, it asks another for the refit by id (GET /v1/rl/refits/{id}: its progress, then its
// report) and sends the same request again (same refit_id, so the same refit) only if no replica
// knows it. Each kill comes while a refit is under way. Asserted:
// - every refit accepted ends with a final report, none stuck running, read afresh after the loop
//   on every live replica; each report names its refit and version, accounts for every engine and
//   has the status its engines' outcomes give (succeeded: all ok; failed: none ok, or aborted;
//   partial otherwise);
// - an engine a report calls ok holds that refit's version (the simulator's own state);
// - every kill came inside a refit, and that refit ended with its report;
// - after one last refit, every simulator holds its version and none is paused (/_sim/state).
// Short form: 2 kills; `npm run chaos`: 30.
//
// The replicas run bin/rlgate.mjs, the compiled gateway in dist/ (`npm test` builds it first; run
// `npm run build` after editing src/ before `npx vitest run` of this file): a replica starts in
// about half the time it takes through tsx, and starting replicas is most of this file's cost.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { chaosRandom, chaosSize, chaosTimeout, percentile, reportFigures } from '../fixtures/chaos.ts';
import { until } from '../fixtures/gateway-process.ts';
import { jsonOrUndefined, type JsonAnswer } from '../fixtures/http-json.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const SCENARIO = 'replica-loop';
const KILLS = chaosSize(2, 30);
const LEASE_SECS = 2;
/** Every load is slowed this much, so that a refit spans a second or so and kills land inside refits. */
const LOAD_DELAY_MS = 800;
/** A kill comes at a random moment within this long after the previous replacement is up. */
const KILL_SPAN_MS = 2_500;
/**
 * How long one refit may take to end, however many replicas died under it. A takeover waits one
 * ack wait (5 s with this lease) and the dead owner's lease (2 s); this is a liveness bound,
 * several times that, so that a loaded CI machine cannot fail it.
 */
const REFIT_BOUND_MS = 90_000;
/**
 * The replicas' control timeout, which is also each refit phase's deadline: the default. A call in
 * flight to a replica that is SIGKILLed fails once that replica's lease runs out, not at this
 * deadline, so a refit whose owner dies under it still ends within REFIT_BOUND_MS.
 */
const CONTROL_TIMEOUT_SECS = 600;
/** The trainer's pause after a refit that refitted no engine. */
const BACKOFF_MS = 250;

type Report = {
  id: string;
  status: string;
  weight_version: string;
  total: number;
  succeeded: number;
  aborted?: string;
  skipped: unknown[];
  engines: Array<{ url: string; outcome: string; error?: string; failed_phase?: string; message?: string; weight_version: string | null }>;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stats = (xs: number[]) => ({ p50: percentile(xs, 50), max: xs.length ? Math.max(...xs) : Number.NaN });
const bump = (m: Record<string, number>, k: string) => void (m[k] = (m[k] ?? 0) + 1);

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const START_TIMEOUT_MS = 60_000;

interface Replica {
  replicaId: string;
  url: string;
  proc: ChildProcess;
  exited: Promise<unknown>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

/** One replica of the fleet: the compiled gateway, RL on, a short lease, quiet logs. */
async function startReplica(natsUrl: string, replicaId: string): Promise<Replica> {
  const proc = spawn(
    process.execPath,
    [
      'bin/rlgate.mjs',
      'gateway',
      '--port',
      '0',
      '--enable-rl',
      '--log-level',
      'warn',
      '--nats-url',
      natsUrl,
      '--replica-id',
      replicaId,
      '--lease-secs',
      String(LEASE_SECS),
      '--health-check-interval-secs',
      '2',
      '--retry-interval-secs',
      '1',
      '--rl-control-timeout-secs',
      String(CONTROL_TIMEOUT_SECS),
    ],
    { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  running.add(proc);
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
    if (process.env.RLGATE_TEST_GATEWAY_LOG) process.stderr.write(`[gateway ${replicaId}] ${c}`);
  });
  const exited = new Promise((res) => proc.once('exit', (code, signal) => (running.delete(proc), res(code ?? signal))));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`replica ${replicaId} did not start in ${START_TIMEOUT_MS} ms: ${stderr}`)), START_TIMEOUT_MS);
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      const ev = jsonOrUndefined(line) as { event?: string; url?: string } | undefined;
      if (ev?.event === 'listening') clearTimeout(timer), res(ev.url!);
    });
    void exited.then((code) => (clearTimeout(timer), rej(new Error(`replica ${replicaId} exited (${String(code)}) before listening: ${stderr}`))));
  }).catch((err) => {
    proc.kill('SIGKILL');
    throw err;
  });
  return { replicaId, url, proc, exited };
}

async function endReplica(r: Replica, signal: NodeJS.Signals): Promise<void> {
  if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill(signal);
  await r.exited;
}

/** One JSON call that gives up after `timeoutMs` (the trainer then asks another replica). */
async function call(g: Replica, method: string, path: string, body: unknown, timeoutMs: number): Promise<JsonAnswer> {
  const res = await request(`${g.url}${path}`, {
    method: method as 'GET',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: jsonOrUndefined(text), text };
}

describe(`chaos: ${SCENARIO}`, () => {
  let nats: TestNats;
  let bus: Bus;
  let sims: SimProcess[] = [];
  const replicas: Replica[] = [];
  const dead = new Set<Replica>();
  let n = 0;
  const launch = async () => {
    const r = await startReplica(nats.url, `loop${n++}`);
    replicas.push(r);
    return r;
  };
  const live = () => replicas.filter((r) => !dead.has(r));

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await connectBus({ url: nats.url, name: 'test-trainer' });
    // Everything that takes seconds starts at once.
    [sims] = await Promise.all([Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0']))), launch(), launch()]);
    for (const s of sims) {
      await s.setFaults({ route: 'update_weights_from_disk', delayMs: LOAD_DELAY_MS });
      const r = await call(replicas[0]!, 'POST', '/workers', { url: s.url }, 10_000);
      expect(r.status, r.text).toBe(202);
    }
    await until(`${sims.length} engines ready on both replicas`, 30_000, async () => {
      for (const g of replicas) {
        const rows = (await call(g, 'GET', '/v1/rl/workers', undefined, 5_000)).json.workers as Array<{ health: string }>;
        if (rows.length !== sims.length || rows.some((w) => w.health !== 'ready')) return false;
      }
      return true;
    });
  }, 120_000);
  afterAll(async () => {
    await bus?.close();
    await Promise.all(replicas.map((r) => endReplica(r, 'SIGTERM')));
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
  });

  it(
    `${KILLS} replicas SIGKILLed and replaced while refits run: every refit ends with a report, none left paused`,
    async () => {
      const random = chaosRandom(SCENARIO);
      const takeovers: Array<{ from: string; to: string; phase: string | null }> = [];
      const sub = bus.subscribe(subjects('rl').allRefitEvents(), (e) => {
        const ev = e as { type?: string; from: string; to: string; phase: string | null };
        if (ev.type === 'takeover') takeovers.push({ from: ev.from, to: ev.to, phase: ev.phase });
      });

      // The trainer.
      const accepted = new Map<string, string>(); // refit id -> version
      const outcomes: Record<string, number> = {};
      const engineOutcomes: Record<string, number> = {};
      /** One message per kind of engine failure, for the figures. */
      const errorSamples: Record<string, string> = {};
      let followedById = 0;
      let resent = 0;
      let refusedRediscovering = 0;
      let skippedEngines = 0;
      let stopTrainer = false;

      /** A live replica, rotating so that the trainer does not always lean on the same one. */
      let turn = 0;
      const someLive = async (): Promise<Replica> => {
        for (;;) {
          const alive = live();
          if (alive.length > 0) return alive[turn++ % alive.length]!;
          await sleep(50);
        }
      };

      /** The refit's report as any live replica has it, waiting while it runs; null if none knows the id. */
      const reportById = async (id: string, deadline: number): Promise<Report | null> => {
        let unknown = 0;
        for (;;) {
          if (Date.now() > deadline) throw new Error(`refit ${id} still running after ${REFIT_BOUND_MS} ms`);
          const g = await someLive();
          const r = await call(g, 'GET', `/v1/rl/refits/${id}`, undefined, 5_000).catch(() => null);
          if (r?.status === 200 && r.json.status !== 'running') return r.json as Report;
          if (r?.status === 404 && ++unknown >= 2) return null; // asked twice: it was never queued
          if (r?.status === 200) unknown = 0;
          await sleep(100);
        }
      };

      const runRefit = async (i: number): Promise<Report> => {
        const id = `loop-${i}`;
        const v = `v${i}`;
        const body = { refit_id: id, weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` } };
        const deadline = Date.now() + REFIT_BOUND_MS;
        for (;;) {
          if (Date.now() > deadline) throw new Error(`refit ${id} not answered after ${REFIT_BOUND_MS} ms`);
          const g = await someLive();
          const r = await call(g, 'POST', '/v1/rl/refits', body, REFIT_BOUND_MS).catch(() => null);
          if (r && (r.status === 200 || r.status === 207)) {
            accepted.set(id, v);
            return r.json as Report;
          }
          // Engines whose owner died are rediscovered by their new owner (they are `registering` a
          // moment): a refit meanwhile is refused with nothing paused, and a trainer sends it again.
          if (
            r?.status === 409 &&
            r.json?.error === 'no_eligible_targets' &&
            (r.json.skipped as Array<{ reason: string }>).every((x) => x.reason === 'not_discovered')
          ) {
            refusedRediscovering++;
            await sleep(200);
            continue;
          }
          // Anything else but a lost connection is an answer a trainer cannot act on: the test fails on it.
          if (r) throw new Error(`refit ${id} answered ${r.status} by ${g.replicaId}: ${r.text}`);
          followedById++;
          const report = await reportById(id, deadline);
          if (report) {
            accepted.set(id, v);
            return report;
          }
          resent++;
        }
      };

      const killToReport: Array<{ role: string; ms: number }> = [];
      const killsInRefit: Array<{ at: number; id: string; role: string }> = [];
      let current: string | null = null;
      let trainerDone = false;
      const trainer = (async () => {
        try {
          for (let i = 0; !stopTrainer; i++) {
            current = `loop-${i}`;
            const report = await runRefit(i);
            const endedAt = Date.now();
            current = null;
            for (let k = killsInRefit.length - 1; k >= 0; k--) {
              if (killsInRefit[k]!.id !== report.id) continue;
              killToReport.push({ role: killsInRefit[k]!.role, ms: endedAt - killsInRefit[k]!.at });
              killsInRefit.splice(k, 1);
            }
            bump(outcomes, report.aborted ? `${report.status} (${report.aborted})` : report.status);
            skippedEngines += report.skipped?.length ?? 0;
            // Final, about this refit, every engine accounted for, its status what its engines say.
            const ok = report.engines.filter((e) => e.outcome === 'ok').length;
            const n = report.engines.length;
            expect(
              {
                id: report.id,
                version: report.weight_version,
                status: report.status,
                total: report.total,
                succeeded: report.succeeded,
                engines: n + report.skipped.length,
              },
              `refit loop-${i}: ${JSON.stringify(report).slice(0, 500)}`,
            ).toEqual({
              id: `loop-${i}`,
              version: `v${i}`,
              status: ok === n ? 'succeeded' : ok === 0 || report.aborted ? 'failed' : 'partial',
              total: n,
              succeeded: ok,
              engines: sims.length,
            });
            const states = await Promise.all(sims.map(async (s) => ({ url: s.url, st: await s.state() })));
            for (const e of report.engines) {
              const key = e.outcome === 'ok' ? 'ok' : `${e.error} in ${e.failed_phase}`;
              bump(engineOutcomes, key);
              if (e.outcome !== 'ok') {
                errorSamples[key] ??= e.message ?? '';
                continue;
              }
              const held = states.find((x) => x.url === e.url)!.st.weightVersion;
              expect(held, `refit loop-${i}: ${e.url} reported ok`).toBe(`v${i}`);
            }
            // A refit that reached no engine (say every engine was cut by a phase deadline) is
            // followed by a short back-off, as a trainer would.
            if (!report.engines.some((e) => e.outcome === 'ok')) await sleep(BACKOFF_MS);
          }
        } finally {
          trainerDone = true;
        }
      })();

      // The killer: waits for the previous replacement, a random moment, then SIGKILLs a replica
      // chosen by role and starts a new one in its place.
      const victims: Record<string, number> = {};
      const startMs: number[] = [];
      let kills = 0;
      const killer = (async () => {
        let replacement: Promise<unknown> = Promise.resolve();
        for (let k = 0; k < KILLS && !trainerDone; k++) {
          await replacement;
          await sleep(Math.floor(random() * KILL_SPAN_MS));
          const alive = live();
          const asked = alive[0]!;
          // Inside a refit: between two refits (a moment, or the trainer's back-off) the kill waits
          // for the next one, and the roles are read again if that refit ended while they were read.
          let refitId: string | null = null;
          let runner: string | null = null;
          let rows: JsonAnswer | null = null;
          while (!trainerDone && (refitId === null || current !== refitId)) {
            while (current === null && !trainerDone) await sleep(10);
            refitId = current;
            runner = null;
            if (refitId) {
              const r = await call(asked, 'GET', `/v1/rl/refits/${refitId}`, undefined, 5_000).catch(() => null);
              if (r?.status === 200 && r.json.status === 'running') runner = r.json.replica as string;
            }
            rows = await call(asked, 'GET', '/v1/rl/workers', undefined, 5_000).catch(() => null);
          }
          const owners = new Set<string>(((rows?.json?.workers ?? []) as Array<{ owner: string | null }>).flatMap((w) => (w.owner ? [w.owner] : [])));
          const byId = (id: string | null) => alive.find((g) => g.replicaId === id);
          const liveOwners = alive.filter((g) => owners.has(g.replicaId));
          const pick = random();
          const victim =
            pick < 1 / 3 && byId(runner)
              ? byId(runner)!
              : pick < 2 / 3 && liveOwners.length > 0
                ? liveOwners[Math.floor(random() * liveOwners.length)]!
                : alive[Math.floor(random() * alive.length)]!;
          const roles = [victim.replicaId === runner ? 'runner' : '', owners.has(victim.replicaId) ? 'owner' : ''].filter(Boolean);
          const role = roles.length ? roles.join('+') : 'idle';
          bump(victims, role);
          // Recorded before the kill's first await, so the trainer cannot take that refit's report first.
          const inRefit = current;
          const at = Date.now();
          if (inRefit) killsInRefit.push({ at, id: inRefit, role });
          dead.add(victim);
          await endReplica(victim, 'SIGKILL');
          kills++;
          const t0 = Date.now();
          replacement = launch().then(() => void startMs.push(Date.now() - t0));
        }
        await replacement;
      })();

      await Promise.all([killer.finally(() => (stopTrainer = true)), trainer]);
      sub.unsubscribe();
      expect(kills, 'kills').toBe(KILLS);
      // Each came inside a refit, and that refit ended with its report (taken off the list then).
      expect(killToReport.length, 'kills that came inside a refit and were followed by its report').toBe(KILLS);
      expect(killsInRefit, 'kills inside a refit whose report never came').toEqual([]);

      // Every refit accepted has its final report, on every live replica; none is listed running.
      for (const g of live()) {
        for (const id of accepted.keys()) {
          const r = await call(g, 'GET', `/v1/rl/refits/${id}`, undefined, 10_000);
          expect(r.status, `${g.replicaId}: ${id}: ${r.text}`).toBe(200);
          expect(r.json.status, `${g.replicaId}: ${id}`).not.toBe('running');
        }
        const list = await call(g, 'GET', '/v1/rl/refits', undefined, 10_000);
        expect(
          (list.json.refits as Array<{ id: string; status: string }>).filter((x) => x.status === 'running'),
          `${g.replicaId}: refits listed running`,
        ).toEqual([]);
      }

      // One last refit, once every engine is owned by a live replica and ready.
      const liveIds = () => new Set(live().map((g) => g.replicaId));
      await until('every engine ready and owned by a live replica, on every replica', 30_000, async () => {
        for (const g of live()) {
          const rows = (await call(g, 'GET', '/v1/rl/workers', undefined, 5_000)).json.workers as Array<{ health: string; owner: string | null }>;
          if (rows.length !== sims.length || rows.some((w) => w.health !== 'ready' || !liveIds().has(w.owner ?? ''))) return false;
        }
        return true;
      });
      for (const s of sims) await s.clearFaults();
      const last = await call(
        live()[0]!,
        'POST',
        '/v1/rl/refits',
        { refit_id: 'loop-last', weight_version: 'last', source: { kind: 'disk', model_path: '/m/last' } },
        REFIT_BOUND_MS,
      );
      expect(last.status, last.text).toBe(200);
      expect(last.json.status).toBe('succeeded');
      let leftPaused = 0;
      for (const s of sims) {
        const st = await s.state();
        if (st.paused !== null) leftPaused++;
        expect(st.paused, `${s.url} paused`).toBeNull();
        expect(st.weightVersion, `${s.url} version`).toBe('last');
      }

      reportFigures(SCENARIO, {
        kills,
        victims,
        kills_during_a_refit: killToReport.length,
        refits_run: accepted.size,
        outcomes,
        engine_outcomes: engineOutcomes,
        engine_failure_messages: errorSamples,
        takeovers_seen: takeovers.length,
        takeovers_in_phase: takeovers.reduce<Record<string, number>>((m, t) => {
          bump(m, String(t.phase));
          return m;
        }, {}),
        kill_to_report_ms: stats(killToReport.map((k) => k.ms)),
        kill_to_report_ms_by_victim: Object.fromEntries(
          [...new Set(killToReport.map((k) => k.role))].sort().map((role) => [role, stats(killToReport.filter((k) => k.role === role).map((k) => k.ms))]),
        ),
        trainer_followed_by_id: followedById,
        trainer_resent: resent,
        refused_while_rediscovering: refusedRediscovering,
        engines_skipped: skippedEngines,
        replica_start_ms: stats(startMs),
        load_delay_ms: LOAD_DELAY_MS,
        control_timeout_secs: CONTROL_TIMEOUT_SECS,
        lease_secs: LEASE_SECS,
        trainer_backoff_ms: BACKOFF_MS,
        engines_left_paused: leftPaused,
      });
    },
    chaosTimeout(150_000),
  );
});
