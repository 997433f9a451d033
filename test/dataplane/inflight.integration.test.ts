// Rollouts in flight at RL scale, the short form (the full 10,000 over 64 engines is the bench's
// inflight suite, bench/inflight.ts): 2,000 /generate requests sent at once, half streamed, through
// one gateway (its own process, its own file descriptors) to 8 SGLang simulators. Checked on the
// engines' own state and on every answer:
// - none fails: every answer 200, every stream ends `data: [DONE]` after all its tokens, every
//   buffered answer holds all its tokens;
// - none waits in a gateway queue: at one moment the engines together hold all 2,000 in flight
//   (the sum of their own `inFlight` counts), before the first has finished generating. A gateway
//   that held some back (a connection pool cap, an admission queue) never reaches the sum, since
//   each generation lasts 32 s and the ones held would only start as others end;
// - none stalls: every request is answered within its generation time and a stated slack, counted
//   from the moment all of them were at the engines (a loaded machine takes seconds to get there);
// - nothing is left: the engines hold nothing in flight afterwards.
// The generation is slow on purpose (a token every 4 s): the point is how many are in flight, not
// how many tokens the two cores can push, so the engines and the gateway stay mostly idle, and
// the 2,000 have half a minute to arrive on a machine that other test files keep busy (a full
// run of the suite on two cores took 14 s to bring 1,556 of them to the engines).

import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openFileLimit } from '../../src/gateway/fd-limit.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const IN_FLIGHT = 2_000;
const ENGINES = 8;
const TOKENS = 8;
const TOKEN_RATE = 0.25;
const GENERATION_MS = (TOKENS / TOKEN_RATE) * 1000;
/**
 * Time to send every request and for the engines to show them. Most of it is this process opening
 * 2,000 connections while other test files share the two cores: 4 s alone on a quiet machine,
 * more than 14 s in a full run of the suite (the time it took is printed).
 */
const ALL_IN_FLIGHT_WITHIN_MS = GENERATION_MS - 2_000;
/** A request answered later than its generation + this slack, after all were at the engines, has stalled somewhere. */
const STALL_SLACK_MS = 15_000;

describe('2,000 /generate in flight through one gateway', () => {
  let sims: SimProcess[] = [];
  let gw: GatewayProcess;

  beforeAll(async () => {
    // This process holds a client socket per request; the gateway a client and an upstream one.
    const soft = openFileLimit()?.soft;
    if (soft !== undefined && soft < IN_FLIGHT + 512)
      throw new Error(`open-file limit ${soft} is below ${IN_FLIGHT + 512}: raise it (ulimit -n) to run this test`);
    sims = await Promise.all(
      Array.from({ length: ENGINES }, () =>
        spawnSglangSim(['--token-rate', String(TOKEN_RATE), '--max-running-requests', String(IN_FLIGHT), '--record-limit', '0']),
      ),
    );
    gw = await startGatewayProcess([]);
    for (const s of sims) {
      const r = await gw.http('POST', '/workers', { url: s.url });
      expect(r.status).toBeLessThan(300);
    }
    await until('every engine serving', 20_000, async () => {
      const r = await gw.http('GET', '/v1/rl/workers');
      const ws = (r.json?.workers ?? []) as Array<{ state?: string }>;
      return ws.length === ENGINES && ws.every((w) => w.state === 'serving');
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await Promise.all(sims.map((s) => s.stop()));
  });

  it('answers every one, with all of them at the engines at once and none stalled', async () => {
    const agent = new Agent({ connections: IN_FLIGHT, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
    const failures: string[] = [];
    let finished = 0;
    const started = Date.now();
    const latest: number[] = [];
    const one = async (i: number) => {
      const stream = i % 2 === 0;
      const body = JSON.stringify({ input_ids: [1 + (i % 997), 2, 3], stream, sampling_params: { max_new_tokens: TOKENS, ignore_eos: true } });
      try {
        const res = await request(`${gw.url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, dispatcher: agent });
        const text = await res.body.text();
        latest.push(Date.now() - started);
        if (res.statusCode !== 200) return void failures.push(`#${i}: ${res.statusCode} ${text.slice(0, 200)}`);
        if (stream) {
          const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
          const last = events.at(-2);
          if (events.at(-1) !== 'data: [DONE]' || last === undefined) return void failures.push(`#${i}: stream did not end with [DONE]`);
          const tokens = (JSON.parse(last.slice(6)) as { meta_info: { completion_tokens: number } }).meta_info.completion_tokens;
          if (tokens !== TOKENS) failures.push(`#${i}: stream ended after ${tokens} tokens`);
        } else {
          const tokens = (JSON.parse(text) as { output_ids: number[] }).output_ids.length;
          if (tokens !== TOKENS) failures.push(`#${i}: ${tokens} tokens`);
        }
      } catch (err) {
        failures.push(`#${i}: ${(err as Error).message}`);
      } finally {
        finished++;
      }
    };
    const all = Promise.all(Array.from({ length: IN_FLIGHT }, (_, i) => one(i)));

    // The engines' own count, summed, until it holds every request or one has finished.
    let peak = 0;
    let peakAfterMs = -1;
    const seen: string[] = [];
    while (finished === 0 && Date.now() - started < ALL_IN_FLIGHT_WITHIN_MS) {
      const states = await Promise.all(sims.map((s) => s.state()));
      const sum = states.reduce((n, s) => n + (s.inFlight as number), 0);
      seen.push(`${Date.now() - started} ms: ${sum}`);
      if (sum > peak) {
        peak = sum;
        peakAfterMs = Date.now() - started;
      }
      if (peak === IN_FLIGHT) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await all;
    await agent.close();
    console.log(`[inflight] peak ${peak} of ${IN_FLIGHT} at the engines after ${peakAfterMs} ms (generation ${GENERATION_MS} ms)`);

    expect(failures.slice(0, 5)).toEqual([]);
    expect(failures).toHaveLength(0);
    expect({ peak, finishedBeforePeak: peakAfterMs < 0 }, `the engines' in-flight sum over time: ${seen.join(', ')}`).toEqual({
      peak: IN_FLIGHT,
      finishedBeforePeak: false,
    });
    expect(Math.max(...latest)).toBeLessThan(peakAfterMs + GENERATION_MS + STALL_SLACK_MS);
    const after = await Promise.all(sims.map((s) => s.state()));
    expect(after.map((s) => s.inFlight)).toEqual(sims.map(() => 0));
  }, 90_000);
});
