// Chaos scenario `engine-hang` (issue 11, item 8): one engine hangs on one call of the refit, in
// each phase and step the transaction has, while the others behave. What must hold, judged on the
// simulators' own state (/_sim/state) and their own record of the calls they got:
//   - the report names the hung engine, failed in that phase with a deadline error;
//   - it arrives within the deadline + 1 s of the moment the hang began;
//   - no other engine is left paused; and once the hung call is released, the next refit leaves
//     no engine paused.
// The calls (src/refit/plan.ts): pause_generation, then the refit steps, update_weights_from_disk
// for a disk source, or init_weights_update_group, update_weights_from_distributed per chunk,
// get_weights_by_name per `verify_weights` entry and destroy_weights_update_group for a
// distributed one (the trainer simulator moves real bytes), then model_info (the version check)
// and continue_generation. A real gateway (in-process, its own nats-server), three SGLang
// simulators in child processes.
//
// The deadline: the request's `deadlines_ms` sets every phase's to DEADLINE_MS (the refit phase's
// covers all of its steps; the pause's grace period is capped by it). Each call's own timeout,
// --rl-control-timeout-secs, is longer, so the phase deadline is what cuts the hung call.
// "The moment the hang began" is when the hung engine received the call it never answered, by its
// own request record (the call carrying the refit's x-request-id); the report must reach this test
// at most DEADLINE_MS + 1 s later. A phase's deadline runs from the phase's start, which is no later
// than that moment, so an honest gateway answers within the deadline plus the resume (and, after a
// refit step, the group's teardown) of engines that answer at once: the second is for those calls,
// the journal writes and a loaded machine.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chaosRandom, chaosSize, chaosTimeout, percentile, reportFigures } from '../fixtures/chaos.ts';
import { startTestGateway, type HttpAnswer, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimFault, type SimProcess } from '../fixtures/sglang-sim.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runRefit } from '../../src/cli/trainer/refit.ts';

const SCENARIO = 'engine-hang';
const ROUNDS = chaosSize(1, 10);
const DEADLINE_MS = 2_000;
const SLACK_MS = 1_000;
/** What a report may call an engine a phase deadline cut off (the pause's grace period is one). */
const DEADLINE_ERRORS = new Set(['phase_deadline_exceeded', 'cut_after_grace', 'upstream_timeout']);

interface Case {
  route: string;
  method: 'GET' | 'POST';
  source: 'disk' | 'distributed';
  /** The report's `failed_phase` for an engine cut there. */
  phase: 'pause' | 'refit' | 'verify' | 'resume';
}

const CASES: Case[] = [
  { route: 'pause_generation', method: 'POST', source: 'disk', phase: 'pause' },
  { route: 'update_weights_from_disk', method: 'POST', source: 'disk', phase: 'refit' },
  { route: 'model_info', method: 'GET', source: 'disk', phase: 'verify' },
  { route: 'continue_generation', method: 'POST', source: 'disk', phase: 'resume' },
  { route: 'init_weights_update_group', method: 'POST', source: 'distributed', phase: 'refit' },
  { route: 'update_weights_from_distributed', method: 'POST', source: 'distributed', phase: 'refit' },
  { route: 'get_weights_by_name', method: 'GET', source: 'distributed', phase: 'refit' },
  { route: 'destroy_weights_update_group', method: 'POST', source: 'distributed', phase: 'refit' },
];

const DEADLINES = { pause: DEADLINE_MS, refit: DEADLINE_MS, verify: DEADLINE_MS, resume: DEADLINE_MS };

interface Engine {
  url: string;
  outcome: string;
  failed_phase?: string;
  failed_step?: string;
  error?: string;
}

interface Tally {
  rounds: number;
  named: number;
  errors: Record<string, number>;
  elapsed: number[];
  fromHang: number[];
  othersPaused: number;
  pausedAfterNext: number;
}

describe(`chaos: ${SCENARIO}`, () => {
  let t: TestGateway;
  let sims: SimProcess[] = [];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 5 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all(sims.map((s) => s.stop()));
  });

  /** One refit with every phase's deadline at DEADLINE_MS: its answer, when it was sent and when it came. */
  const hungRefit = async (c: Case, id: string, v: string): Promise<{ r: HttpAnswer; sentAt: number; at: number }> => {
    if (c.source === 'disk') {
      const sentAt = Date.now();
      const r = await t.http('POST', '/v1/rl/refits', {
        body: { refit_id: id, weight_version: v, source: { kind: 'disk', model_path: `/m/${v}` }, deadlines_ms: DEADLINES },
      });
      return { r, sentAt, at: Date.now() };
    }
    // The trainer simulator is rank 0 and broadcasts while the request is out; one chunk, read back
    // (so the refit has a get_weights_by_name step); a group name per refit, since an engine whose
    // destroy hung keeps its group. Its own timeouts are longer than the deadline, so the gateway's
    // deadline, not the trainer giving up, ends the refit.
    let answer: { r: HttpAnswer; sentAt: number; at: number } | undefined;
    await runRefit(
      {
        version: v,
        refitId: id,
        groupName: `g-${id}`,
        chunks: makeChunks({ params: 2, perChunk: 2, shape: [8, 8], dtype: 'bfloat16' }),
        verifyValues: 4,
        rendezvousTimeoutMs: DEADLINE_MS + 5_000,
        chunkTimeoutMs: DEADLINE_MS + 5_000,
        settleMs: 200,
      },
      {
        worldSize: async (plan) => {
          const r = await t.http('POST', '/v1/rl/refits', { body: plan });
          if (r.status !== 200) throw new Error(`dry run: ${r.status} ${r.text}`);
          return r.json.world_size as number;
        },
        refit: async (body) => {
          const sentAt = Date.now();
          const r = await t.http('POST', '/v1/rl/refits', { body: { ...body, deadlines_ms: DEADLINES } });
          answer = { r, sentAt, at: Date.now() };
          return { status: r.status, report: r.json, from: 'http' };
        },
      },
    );
    return answer!;
  };

  it(
    `hangs one engine in each phase and step (${ROUNDS} round(s) each): it is named within the deadline + 1 s, no other engine is left paused, and the next refit leaves none paused`,
    async () => {
      const random = chaosRandom(SCENARIO);
      const issues: string[] = [];
      const tallies = new Map<string, Tally>(
        CASES.map((c) => [c.route, { rounds: 0, named: 0, errors: {}, elapsed: [], fromHang: [], othersPaused: 0, pausedAfterNext: 0 }]),
      );
      let n = 0;

      for (let round = 0; round < ROUNDS; round++) {
        for (const c of CASES) {
          const tally = tallies.get(c.route)!;
          const hung = sims[Math.floor(random() * sims.length)]!;
          const id = `hang-${round}-${c.route}`;
          const v = String(++n);
          const where = `round ${round}, ${c.route} on ${hung.url}`;
          // model_info is also what the gateway's quiet probe of a paused engine reads: a one-shot
          // fault could be taken by a probe between the load and the check. Every model_info call
          // hangs until the report is in, and the call the refit sent is found by its request id.
          const fault: SimFault = { route: c.route, method: c.method, hang: true, ...(c.route === 'model_info' ? {} : { times: 1 }) };
          await hung.clearRequests();
          await hung.setFaults(fault);

          const { r, sentAt, at } = await hungRefit(c, id, v);
          await hung.clearFaults();
          tally.rounds++;
          tally.elapsed.push(at - sentAt);

          const call = (await hung.requests()).find((q) => q.path === `/${c.route}` && q.headers['x-request-id'] === `refit-${id}`);
          if (!call) issues.push(`${where}: the engine never got the refit's call`);
          else {
            const fromHang = at - Date.parse(call.time);
            tally.fromHang.push(fromHang);
            if (fromHang > DEADLINE_MS + SLACK_MS)
              issues.push(`${where}: the report came ${fromHang} ms after the hang began (deadline ${DEADLINE_MS} ms + ${SLACK_MS} ms)`);
          }

          const entry = ((r.json?.engines ?? []) as Engine[]).find((e) => e.url === hung.url);
          if (r.status === 207 && entry?.outcome === 'failed' && entry.failed_phase === c.phase && DEADLINE_ERRORS.has(entry.error ?? '')) {
            tally.named++;
            tally.errors[entry.error!] = (tally.errors[entry.error!] ?? 0) + 1;
          } else {
            issues.push(`${where}: the report does not name it as cut by the ${c.phase} deadline: ${r.status} ${JSON.stringify(entry ?? r.json)}`);
          }
          // Right away: the report comes after the resume. An engine whose resume hung is still
          // paused (its continue_generation never ran): the next refit must take care of it.
          for (const s of sims.filter((x) => x !== hung)) {
            if ((await s.state()).paused !== null) {
              tally.othersPaused++;
              issues.push(`${where}: ${s.url} (not hung) paused after the report`);
            }
          }

          await hung.releaseHung();
          await t.waitReady(sims.length, 20_000);
          const next = String(++n);
          const r2 = await t.http('POST', '/v1/rl/refits', {
            body: { refit_id: `${id}-next`, weight_version: next, source: { kind: 'disk', model_path: `/m/${next}` } },
          });
          for (const s of sims) {
            const st = await s.state();
            if (st.paused !== null) {
              tally.pausedAfterNext++;
              issues.push(`${where}: ${s.url}${s === hung ? ' (the hung one)' : ''} paused after the next refit: ${r2.status} ${r2.text}`);
            }
          }
          await t.waitReady(sims.length, 20_000);
        }
      }

      const phases: Record<string, unknown> = {};
      for (const c of CASES) {
        const x = tallies.get(c.route)!;
        phases[c.route] = {
          source: c.source,
          phase: c.phase,
          deadline_ms: DEADLINE_MS,
          rounds: x.rounds,
          named: x.named,
          named_as: x.errors,
          elapsed_ms: { p50: percentile(x.elapsed, 50), max: Math.max(...x.elapsed) },
          hang_to_report_ms: { p50: percentile(x.fromHang, 50), max: Math.max(...x.fromHang) },
          margin_over_deadline_ms: { p50: percentile(x.fromHang, 50) - DEADLINE_MS, max: Math.max(...x.fromHang) - DEADLINE_MS },
          others_paused_after_report: x.othersPaused,
          paused_after_next_refit: x.pausedAfterNext,
        };
      }
      reportFigures(SCENARIO, { engines: sims.length, rounds_per_phase: ROUNDS, deadline_ms: DEADLINE_MS, bound_ms: DEADLINE_MS + SLACK_MS, phases });
      expect(issues).toEqual([]);
    },
    chaosTimeout(120_000),
  );
});
