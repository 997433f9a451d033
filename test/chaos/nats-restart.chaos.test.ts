// Chaos scenario `nats-restart` (issue 11, item 8): nats-server is stopped and started again on the
// same port and JetStream store, between refits and during one, under two layouts: one gateway
// that owns the engines and runs the refits, and two replicas where one owns the engines (RL off)
// and the other runs the refits, so that every refit call crosses the bus.
//
// - Between refits: once every gateway says it is back on the bus (GET /health 200), the next
//   refit succeeds, and every engine holds its version and is not paused.
// - During one: the refit's calls are slowed by simulator faults, the server is stopped at a random
//   moment of the refit and started again after a short outage. The stop must come before the
//   refit's last engine call was answered (the engines' own records say when it arrived, its
//   fault how long it was held), so a stop after the refit's end fails the trial instead of being
//   counted. The refit's HTTP answer still arrives, each engine's outcome in it is what the engine
//   really did (ok exactly when the engine holds the new version), no engine is paused once it has
//   ended, and the next refit succeeds.
//
// Everything is judged on the simulators' own state (/_sim/state, /_sim/requests), never the
// gateway's view; the figures are counted from it.
// Short form: one trial of each per layout; `npm run chaos`: 20 of each per layout.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { createLogger, silentLogger } from '../../src/obs/logger.ts';
import { chaosRandom, chaosSize, chaosTimeout, percentile, reportFigures } from '../fixtures/chaos.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { httpJson, type JsonAnswer } from '../fixtures/http-json.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const SCENARIO = 'nats-restart';
const TRIALS = chaosSize(1, 20);
/**
 * The refit the server is stopped in is slowed in its pause, load and resume (simulator faults), so
 * that a random moment within MOMENT_SPAN_MS of its start lands in any phase, before it ends: the
 * slowed calls add up to 400 ms more than the span, room for the moment to be read late.
 */
const SLOW: Array<{ route: string; delayMs: number }> = [
  { route: 'pause_generation', delayMs: 300 },
  { route: 'update_weights_from_disk', delayMs: 1_500 },
  { route: 'continue_generation', delayMs: 600 },
];
const MOMENT_SPAN_MS = 2_000;
const OUTAGE_MIN_MS = 300;
const OUTAGE_SPAN_MS = 2_200;
/**
 * How long after the server is ready again the gateways may take to say they are back, and the
 * refit to answer. The gateway reconnects within about a second and a refit cut by the outage
 * ends within 2 s of it (bus-outage.integration.test.ts); these bounds are liveness bounds, many
 * times that, so that a loaded CI machine cannot fail them.
 */
const BACK_BOUND_MS = 20_000;
const ANSWER_BOUND_MS = 30_000;

type Layout = { name: string; tag: string; twoReplicas: boolean };
const LAYOUTS: Layout[] = [
  { name: 'one gateway', tag: 'one', twoReplicas: false },
  { name: 'an owner and a runner replica', tag: 'two', twoReplicas: true },
];

const random = chaosRandom(SCENARIO);
const figures: Record<string, unknown> = {};
const stats = (xs: number[]) => ({ p50: percentile(xs, 50), max: xs.length ? Math.max(...xs) : Number.NaN });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const logFor = (replicaId: string) => (process.env.RLGATE_TEST_GATEWAY_LOG ? createLogger({ level: 'debug', name: replicaId }) : silentLogger());

/** `p`, or a rejection naming `what` once `ms` have passed. */
function within<T>(what: string, ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: nothing after ${ms} ms`)), ms)));
  return Promise.race([p, bound]).finally(() => clearTimeout(timer));
}

describe(`chaos: ${SCENARIO}`, () => {
  let sims: SimProcess[] = [];
  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
  }, 60_000);
  afterAll(async () => {
    await Promise.all(sims.map((s) => s.stop()));
    // Figures only from a whole run: each test adds its part.
    if (Object.keys(figures).length === LAYOUTS.length * 2) reportFigures(SCENARIO, figures);
  });

  type SimState = { url: string; paused: string | null; weightVersion: string };
  const simStates = () =>
    Promise.all(
      sims.map(async (s): Promise<SimState> => {
        const st = await s.state();
        return { url: s.url, paused: st.paused, weightVersion: st.weightVersion };
      }),
    );

  describe.each(LAYOUTS)('$name', (layout) => {
    const storeDir = mkdtempSync(join(tmpdir(), 'rlgate-chaos-nats-'));
    let nats: EmbeddedNats;
    const gateways: Gateway[] = [];
    let front: Gateway;
    let n = 0;

    beforeAll(async () => {
      nats = await startEmbeddedNats({ storeDir, restart: false });
      const cfg = { ...testConfig({ rl: { controlTimeoutSecs: 60 } }), natsUrl: nats.url };
      if (layout.twoReplicas) {
        const owner = await startGateway({ ...cfg, rl: { ...cfg.rl, enabled: false }, replicaId: 'owner' }, { log: logFor('owner') });
        gateways.push(owner);
        front = await startGateway({ ...cfg, replicaId: 'runner' }, { log: logFor('runner') });
        gateways.push(front);
      } else {
        front = await startGateway({ ...cfg, replicaId: 'solo' }, { log: logFor('solo') });
        gateways.push(front);
      }
      // The first gateway registers the engines, so it owns them.
      for (const s of sims) expect((await httpJson(gateways[0]!.url, 'POST', '/workers', { url: s.url })).status).toBe(202);
      await until(`${sims.length} engines ready on the front, owned by ${gateways[0]!.replicaId}`, 20_000, async () => {
        const rows = (await httpJson(front.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ health: string; owner: string }>;
        return rows.length === sims.length && rows.every((r) => r.health === 'ready' && r.owner === gateways[0]!.replicaId);
      });
    }, 60_000);
    afterAll(async () => {
      for (const g of [...gateways].reverse()) await g.close();
      for (const s of sims) await s.clearFaults();
      await nats?.stop();
      rmSync(storeDir, { recursive: true, force: true });
    });

    const version = () => `${layout.tag}-${++n}`;
    const refit = (refitId: string, v: string) =>
      httpJson(front.url, 'POST', '/v1/rl/refits', { refit_id: refitId, weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` } });

    /** Stops the server, keeps it down `outageMs`, starts it again; returns when it stopped and when it is ready. */
    const bounce = async (outageMs: number): Promise<{ stoppedAt: number; readyAt: number }> => {
      const stoppedAt = Date.now();
      await nats.stop();
      await sleep(outageMs);
      nats = await startEmbeddedNats({ port: nats.port, storeDir, restart: false });
      return { stoppedAt, readyAt: Date.now() };
    };
    const allBack = () =>
      until('GET /health 200 on every gateway', BACK_BOUND_MS, async () => {
        for (const g of gateways) if ((await httpJson(g.url, 'GET', '/health')).status !== 200) return false;
        return true;
      });

    /** What the figures count, from the simulators' state after each refit. */
    type Tally = { succeeded: number; paused: number };
    /** A refit with no fault: it must succeed, and every engine holds `v`, not paused (tallied first). */
    const refitMustSucceed = async (what: string, tally: Tally) => {
      const v = version();
      const r = await within(what, ANSWER_BOUND_MS, refit(`r-${v}`, v));
      const states = await simStates();
      const paused = states.filter((st) => st.paused !== null).length;
      tally.paused += paused;
      if (r.status === 200 && r.json?.status === 'succeeded' && paused === 0 && states.every((st) => st.weightVersion === v)) tally.succeeded++;
      expect(r.status, `${what}: ${r.text}`).toBe(200);
      expect(r.json.status).toBe('succeeded');
      for (const st of states) {
        expect(st.paused, `${what}: ${st.url} paused`).toBeNull();
        expect(st.weightVersion, `${what}: ${st.url} version`).toBe(v);
      }
    };

    it(
      `between refits (${TRIALS}x): once every gateway is back on the bus, the next refit succeeds, nothing paused`,
      async () => {
        const outages: number[] = [];
        const backMs: number[] = [];
        const next: Tally = { succeeded: 0, paused: 0 };
        await refitMustSucceed('the refit before the first restart', { succeeded: 0, paused: 0 });
        for (let trial = 0; trial < TRIALS; trial++) {
          const outage = Math.round(OUTAGE_MIN_MS + random() * OUTAGE_SPAN_MS);
          const { readyAt } = await bounce(outage);
          await allBack();
          outages.push(outage);
          backMs.push(Date.now() - readyAt);
          await refitMustSucceed(`trial ${trial}: the refit after the restart`, next);
        }
        figures[`${layout.tag}_replica${layout.twoReplicas ? 's' : ''}_between_refits`] = {
          layout: layout.name,
          trials: TRIALS,
          outage_ms: stats(outages),
          server_ready_to_gateways_healthy_ms: stats(backMs),
          next_refits_succeeded: next.succeeded,
          engines_left_paused: next.paused,
        };
      },
      chaosTimeout(60_000),
    );

    it(
      `during a refit (${TRIALS}x): the answer arrives with the engines' real outcomes, nothing left paused, the next refit succeeds`,
      async () => {
        const outages: number[] = [];
        const answerAfterBus: number[] = [];
        const stoppedIn: Record<string, number> = {};
        const answers: Record<string, number> = {};
        const outcomes: Record<string, number> = {};
        const stopBeforeLastCall: number[] = [];
        const next: Tally = { succeeded: 0, paused: 0 };
        let leftPaused = 0;
        for (let trial = 0; trial < TRIALS; trial++) {
          for (const s of sims) {
            await s.setFaults(SLOW.map((f) => ({ ...f, times: 1 })));
            await s.clearRequests();
          }
          const v = version();
          const refitId = `r-${v}`;
          let answeredAt = 0;
          const answer = refit(refitId, v)
            .catch((err: Error) => err)
            .finally(() => (answeredAt = Date.now()));
          await until(
            `trial ${trial}: the refit running`,
            10_000,
            async () => (await httpJson(front.url, 'GET', `/v1/rl/refits/${refitId}`)).json?.status === 'running',
          );
          await sleep(Math.floor(random() * MOMENT_SPAN_MS));
          const progress = await httpJson(front.url, 'GET', `/v1/rl/refits/${refitId}`);
          const phase = progress.json?.status === 'running' ? String(progress.json.phase) : 'ended';
          stoppedIn[phase] = (stoppedIn[phase] ?? 0) + 1;
          const outage = Math.round(OUTAGE_MIN_MS + random() * OUTAGE_SPAN_MS);
          const { stoppedAt, readyAt } = await bounce(outage);
          outages.push(outage);
          const r = await within(`trial ${trial} (stopped in ${phase}): the refit's answer`, ANSWER_BOUND_MS, answer);
          answerAfterBus.push(answeredAt - readyAt);
          if (r instanceof Error) throw r;
          // The stop came inside the refit, as the engines saw it: before its last call to an
          // engine was answered (arrival, plus the time its fault held it). None at all: the stop
          // cut the refit before any call reached an engine.
          const calls = (await Promise.all(sims.map((s) => s.requests()))).flatMap((records) => {
            const held = new Map(SLOW.map((f) => [`/${f.route}`, f.delayMs])); // each fault holds one call
            return records
              .filter((q) => q.headers['x-request-id'] === `refit-${refitId}` || String(q.headers['x-request-id']).startsWith(`refit-${refitId}-`))
              .map((q) => {
                const ms = held.get(q.path) ?? 0;
                held.delete(q.path);
                return Date.parse(q.time) + ms;
              });
          });
          if (calls.length > 0) {
            stopBeforeLastCall.push(Math.max(...calls) - stoppedAt);
            expect(Math.max(...calls), `trial ${trial}: the server stopped after the refit's last engine call was answered`).toBeGreaterThan(stoppedAt);
          }
          const a = r as JsonAnswer;
          answers[a.status] = (answers[a.status] ?? 0) + 1;
          expect([200, 207], `trial ${trial} (stopped in ${phase}): ${a.text}`).toContain(a.status);
          expect(a.json.id).toBe(refitId);
          // The engines' own truth: ok exactly for the engines that hold the new version.
          const states = await simStates();
          leftPaused += states.filter((st) => st.paused !== null).length;
          for (const st of states) {
            expect(st.paused, `trial ${trial} (stopped in ${phase}): ${st.url} left paused`).toBeNull();
            const e = (a.json.engines as Array<{ url: string; outcome: string; error?: string }>).find((x) => x.url === st.url);
            expect(e, `trial ${trial}: ${st.url} in the report`).toBeDefined();
            const key = e!.outcome === 'ok' ? 'ok' : `failed:${e!.error}`;
            outcomes[key] = (outcomes[key] ?? 0) + 1;
            expect(e!.outcome, `trial ${trial} (stopped in ${phase}): ${st.url} holds ${st.weightVersion}; reported ${JSON.stringify(e)}`).toBe(
              st.weightVersion === v ? 'ok' : 'failed',
            );
          }
          for (const s of sims) await s.clearFaults();
          await allBack();
          await refitMustSucceed(`trial ${trial}: the refit after`, next);
        }
        figures[`${layout.tag}_replica${layout.twoReplicas ? 's' : ''}_during_a_refit`] = {
          layout: layout.name,
          trials: TRIALS,
          slowed_ms: Object.fromEntries(SLOW.map((f) => [f.route, f.delayMs])),
          outage_ms: stats(outages),
          stopped_in_phase: stoppedIn,
          stop_to_last_engine_call_answered_ms: {
            min: stopBeforeLastCall.length ? Math.min(...stopBeforeLastCall) : Number.NaN,
            p50: percentile(stopBeforeLastCall, 50),
          },
          server_ready_to_refit_answer_ms: stats(answerAfterBus),
          answers,
          engine_outcomes: outcomes,
          engines_left_paused: leftPaused,
          next_refits_succeeded: next.succeeded,
        };
      },
      chaosTimeout(60_000),
    );
  });
});
