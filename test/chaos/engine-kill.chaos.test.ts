// Chaos scenario `engine-kill` (issue 11, item 8): an engine SIGKILLed at a random moment of a
// refit, then restarted on its port, trial after trial. What must hold, judged on the simulators'
// own state (/_sim/state), never on the gateway's belief:
//   - the refit's report names the killed engine among its failed engines (a 207);
//   - when that report arrives, no surviving engine is paused;
//   - once the engine is back and the gateway has seen it, the next refit answers 200 `succeeded`,
//     reports every engine ok, leaves none paused, and every engine holds the new weight version.
// A real gateway (in-process, its own nats-server) and three SGLang simulators in child processes.
//
// How the kill moment is drawn: every engine delays each call of the refit by a fixed time
// (simulator faults given on the command line, so they survive a restart): the pause, the load and
// the version check by STEP_MS, the resume by 2 × STEP_MS (the phase where a kill can leave an
// engine paused gets its share of the window: the gateway's own work between phases moves the later
// phases past the sum of the delays). A phase ends only when every engine has answered, so the
// victim's resume, its last call, answers no earlier than SPAN_MS (the sum of the delays) after the
// refit's `started` event. The kill comes at `started` + u, u uniform in [0, SPAN_MS) from the
// scenario's seeded generator: always inside the refit and before the victim's last call finished
// (the event reaches this test a moment after it is published, far less than the gateway's own work
// between phases; a kill that came too late would leave the victim unnamed, failing the trial).
// Where it fell (the phase) is read from the refit's own `phase` events on NATS (the last one seen
// before the kill).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Bus } from '../../src/bus/connection.ts';
import { chaosRandom, chaosSize, chaosTimeout, percentile, reportFigures } from '../fixtures/chaos.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const SCENARIO = 'engine-kill';
const TRIALS = chaosSize(4, 100);
/** Delay of the refit's calls on every engine, so that the refit's span is known. */
const STEP_MS = 100;
const STEP_FAULTS = [
  { route: 'pause_generation', method: 'POST', delayMs: STEP_MS },
  { route: 'update_weights_from_disk', method: 'POST', delayMs: STEP_MS },
  // The version check; discovery and the quiet probe of a paused engine read it too (harmless).
  { route: 'model_info', method: 'GET', delayMs: STEP_MS },
  { route: 'continue_generation', method: 'POST', delayMs: 2 * STEP_MS },
];
/** No engine's resume answers sooner than this after the refit started: the kill window. */
const SPAN_MS = STEP_FAULTS.reduce((sum, f) => sum + f.delayMs, 0);

interface RefitEvent {
  type: string;
  refit_id: string;
  phase?: string;
}
interface Engine {
  url: string;
  worker_id: string;
  outcome: string;
  failed_phase?: string;
  error?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

describe(`chaos: ${SCENARIO}`, () => {
  let t: TestGateway;
  let bus: Bus;
  let sims: SimProcess[] = [];
  /** Every refit event seen on NATS, by refit id, with the moment this process received it. */
  const events = new Map<string, Array<RefitEvent & { at: number }>>();

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0', '--fault', JSON.stringify(STEP_FAULTS)])));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 5 } });
    await t.register(sims.map((s) => s.url));
    bus = await t.bus();
    bus.subscribe('rl.refit.*.events', (data) => {
      const e = data as RefitEvent;
      const list = events.get(e.refit_id) ?? [];
      list.push({ ...e, at: Date.now() });
      events.set(e.refit_id, list);
    });
    await bus.nc.flush();
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all(sims.map((s) => s.stop()));
  });

  const refit = (id: string, v: string) =>
    t.http('POST', '/v1/rl/refits', { body: { refit_id: id, weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` } } });

  const waitEvent = async (id: string, type: string, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const e = events.get(id)?.find((x) => x.type === type);
      if (e) return e;
      if (Date.now() > deadline) throw new Error(`no ${type} event for refit ${id} in ${timeoutMs} ms`);
      await sleep(2);
    }
  };

  /** The gateway has seen the restarted engine: it called the new process, and its row is ready. */
  const waitSeen = async (sim: SimProcess) => {
    const deadline = Date.now() + 20_000;
    while ((await sim.requests()).length === 0) {
      if (Date.now() > deadline) throw new Error(`the gateway never called the restarted engine ${sim.url}`);
      await sleep(20);
    }
    await t.waitReady(sims.length, 20_000);
  };

  it(
    `kills an engine at a random moment of ${TRIALS} refits: each report names it, no survivor is left paused, and after the next refit no engine is paused`,
    async () => {
      const random = chaosRandom(SCENARIO);
      const issues: string[] = [];
      const killPhase: Record<string, number> = {};
      const victimErrors: Record<string, number> = {};
      const nextOutcomes: Record<string, number> = {};
      const killToReport: number[] = [];
      const restartToSeen: number[] = [];
      let named = 0;
      let survivorsPaused = 0;
      let pausedAfterNext = 0;
      let wrongVersionAfterNext = 0;

      for (let trial = 0; trial < TRIALS; trial++) {
        const victim = sims[Math.floor(random() * sims.length)]!;
        const offset = random() * SPAN_MS;
        const id = `kill-${trial}`;
        const v = String(2 * trial + 1);

        const answer = refit(id, v).then((r) => ({ r, at: Date.now() }));
        const started = await waitEvent(id, 'started', 15_000);
        await sleep(started.at + offset - Date.now());
        const killAt = Date.now();
        await victim.kill();
        const { r, at } = await answer;
        killToReport.push(at - killAt);
        const phase = (events.get(id) ?? []).filter((e) => e.type === 'phase' && e.at <= killAt).at(-1)?.phase ?? 'pause';
        killPhase[phase] = (killPhase[phase] ?? 0) + 1;

        const failed = (r.json?.failed ?? []) as Engine[];
        const victimEntry = failed.find((e) => e.url === victim.url);
        if (r.status === 207 && victimEntry?.outcome === 'failed') {
          named++;
          const key = `${victimEntry.failed_phase}/${victimEntry.error}`;
          victimErrors[key] = (victimErrors[key] ?? 0) + 1;
        } else {
          issues.push(
            `trial ${trial}: killed ${victim.url} ${Math.round(offset)} ms after the start (${phase}), the report does not name it: ${r.status} ${r.text}`,
          );
        }
        // Right away: the report comes after the resume, so every survivor must already serve.
        for (const s of sims.filter((x) => x !== victim)) {
          if ((await s.state()).paused !== null) {
            survivorsPaused++;
            issues.push(`trial ${trial}: survivor ${s.url} paused after the failing refit's report`);
          }
        }

        const restartedAt = Date.now();
        await victim.restart();
        await waitSeen(victim);
        restartToSeen.push(Date.now() - restartedAt);

        // The whole fleet serves again: the next refit must succeed on every engine, the restarted one included.
        const next = String(2 * trial + 2);
        const r2 = await refit(`kill-${trial}-next`, next);
        nextOutcomes[`${r2.status} ${r2.json?.status}`] = (nextOutcomes[`${r2.status} ${r2.json?.status}`] ?? 0) + 1;
        if (r2.status !== 200 || r2.json?.status !== 'succeeded') issues.push(`trial ${trial}: the next refit answered ${r2.status} ${r2.text.slice(0, 500)}`);
        const okUrls = new Set(((r2.json?.engines ?? []) as Engine[]).filter((e) => e.outcome === 'ok').map((e) => e.url));
        for (const s of sims) {
          const st = await s.state();
          if (st.paused !== null) {
            pausedAfterNext++;
            issues.push(`trial ${trial}: ${s.url}${s === victim ? ' (restarted)' : ''} paused after the next refit: ${r2.status} ${r2.text}`);
          }
          if (!okUrls.has(s.url)) issues.push(`trial ${trial}: ${s.url}${s === victim ? ' (restarted)' : ''} not reported ok in the next refit`);
          else if (st.weightVersion !== next) {
            wrongVersionAfterNext++;
            issues.push(`trial ${trial}: ${s.url} reported ok in the next refit but holds ${st.weightVersion}, not ${next}`);
          }
        }
        // The next trial starts from a fleet that serves again.
        await t.waitReady(sims.length, 20_000);
      }

      reportFigures(SCENARIO, {
        trials: TRIALS,
        engines: sims.length,
        call_delays_ms: Object.fromEntries(STEP_FAULTS.map((f) => [f.route, f.delayMs])),
        kill_window_ms: SPAN_MS,
        reports_naming_victim: named,
        victim_failed_as: victimErrors,
        kill_phase: killPhase,
        kill_to_report_ms: { p50: percentile(killToReport, 50), p99: percentile(killToReport, 99), max: Math.max(...killToReport) },
        restart_to_seen_ms: { p50: percentile(restartToSeen, 50), max: Math.max(...restartToSeen) },
        survivors_paused_after_failing_refit: survivorsPaused,
        engines_paused_after_next_refit: pausedAfterNext,
        ok_engines_without_new_version_after_next_refit: wrongVersionAfterNext,
        next_refit_outcomes: nextOutcomes,
      });
      expect(issues).toEqual([]);
      expect(named).toBe(TRIALS);
    },
    chaosTimeout(120_000),
  );
});
