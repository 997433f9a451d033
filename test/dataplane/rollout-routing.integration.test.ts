// rlgate's default policy (bounded_affinity) on engines that model their cost (the SGLang
// simulator's realistic cost model, run fast), judged by the engines' own caches:
// - 32 GRPO groups of 8 over 4 engines keep a prefix hit rate of at least 0.8 of what one engine
//   with an unbounded cache gets for the same requests in the same order, and every answer's
//   `cached_tokens` adds up to what the engines' caches say they served;
// - 16 multi-turn sessions of 8 turns over 4 engines, one of them ten times slower: the slow
//   engine ends with less than a quarter of the work while the hit rate stays at 0.7 or more.
// Samples of a group are sent a few milliseconds apart, as a trainer's loop submits them, so a
// sibling can reuse the prompt its first sibling prefilled (SGLang caches a prompt once prefilled).

import { afterAll, describe, expect, it } from 'vitest';
import { grpoShort, prng } from '../../bench/rollout/workload.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

/** The realistic model at about a hundred times its speed: the same shape, a test's duration. */
const FAST = ['--cost-model', 'realistic', '--prefill-tokens-per-s', '400000', '--decode-step-ms', '0.5', '--decode-ms-per-request', '0.02'];
/** Ten times slower in every term. */
const SLOW = ['--cost-model', 'realistic', '--prefill-tokens-per-s', '40000', '--decode-step-ms', '5', '--decode-ms-per-request', '0.2'];

interface Answer {
  prompt: number;
  cached: number;
  outputIds: number[];
}

async function generate(url: string, inputIds: number[], maxNewTokens: number): Promise<Answer> {
  const res = await fetch(`${url}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_ids: inputIds, sampling_params: { max_new_tokens: maxNewTokens, ignore_eos: true } }),
  });
  const body = (await res.json()) as { output_ids: number[]; meta_info: { prompt_tokens: number; cached_tokens: number } };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return { prompt: body.meta_info.prompt_tokens, cached: body.meta_info.cached_tokens, outputIds: body.output_ids };
}

interface CacheFigures {
  hitTokens: number;
  promptTokens: number;
  prefilledTokens: number;
  decodedTokens: number;
}

async function cacheOf(sim: SimProcess): Promise<CacheFigures> {
  return (await sim.state()).cache as CacheFigures;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sends the batch, each request `gapMs` after the previous, all in flight together; the answers in order. */
async function sendBatch(url: string, batch: Array<{ inputIds: number[]; maxNewTokens: number }>, gapMs: number): Promise<Answer[]> {
  const pending: Array<Promise<Answer>> = [];
  for (const r of batch) {
    pending.push(generate(url, r.inputIds, r.maxNewTokens));
    await pause(gapMs);
  }
  return Promise.all(pending);
}

const hitRate = (as: Answer[]) => as.reduce((n, a) => n + a.cached, 0) / as.reduce((n, a) => n + a.prompt, 0);

describe('bounded_affinity on cost-model engines', () => {
  const sims: SimProcess[] = [];
  let t: TestGateway | undefined;
  afterAll(async () => {
    await t?.close();
    await Promise.all(sims.map((s) => s.stop()));
  });

  it('32 GRPO groups of 8 on 4 engines: a hit rate of at least 0.8 of one unbounded engine, and cached_tokens as the engines count them', async () => {
    // Outputs capped at 128 tokens: the test is about prompts, not the output tail.
    const batch = grpoShort(7).requests.map((r) => ({ inputIds: r.inputIds, maxNewTokens: Math.min(r.maxNewTokens, 128) }));
    const one = await spawnSglangSim([...FAST, '--kv-cache-tokens', String(1 << 24)]);
    sims.push(one);
    const alone = hitRate(await sendBatch(one.url, batch, 2));

    const fleet = await Promise.all([0, 1, 2, 3].map(() => spawnSglangSim(FAST)));
    sims.push(...fleet);
    t = await startTestGateway();
    await t.register(fleet.map((s) => s.url));
    const answers = await sendBatch(t.url, batch, 2);
    const routed = hitRate(answers);
    expect(alone, 'one unbounded engine reuses the siblings’ prompts').toBeGreaterThan(0.5);
    expect(routed, `hit rate through the gateway ${routed.toFixed(3)} vs one engine ${alone.toFixed(3)}`).toBeGreaterThanOrEqual(0.8 * alone);

    const caches = await Promise.all(fleet.map(cacheOf));
    expect(answers.reduce((n, a) => n + a.cached, 0)).toBe(caches.reduce((n, c) => n + c.hitTokens, 0));
    expect(answers.reduce((n, a) => n + a.prompt, 0)).toBe(caches.reduce((n, c) => n + c.promptTokens, 0));
    await t.close();
    t = undefined;
  }, 120_000);

  it('16 sessions of 8 turns, one engine ten times slower: it ends with under a quarter of the work, the hit rate at 0.7 or more', async () => {
    const fast = await Promise.all([0, 1, 2].map(() => spawnSglangSim(FAST)));
    const slow = await spawnSglangSim(SLOW);
    const fleet = [slow, ...fast];
    sims.push(...fleet);
    t = await startTestGateway();
    await t.register(fleet.map((s) => s.url));
    const rand = prng(11);
    const tokens = (n: number) => Array.from({ length: n }, () => 32 + Math.floor(rand() * 95));
    const answers: Answer[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async (_, s) => {
        let context = tokens(300 + 20 * s);
        for (let turn = 0; turn < 8; turn++) {
          const a = await generate(t!.url, context, 32);
          answers.push(a);
          context = [...context, ...a.outputIds, ...tokens(100)];
        }
      }),
    );
    const work = await Promise.all(fleet.map(async (sim) => ((c) => c.prefilledTokens + c.decodedTokens)(await cacheOf(sim))));
    const share = work[0]! / work.reduce((n, w) => n + w, 0);
    const rate = hitRate(answers);
    expect(share, `the slow engine's share of the work (engines' own counts: ${work.join(', ')})`).toBeLessThan(0.25);
    expect(rate, 'prefix hit rate over every turn').toBeGreaterThanOrEqual(0.7);
  }, 120_000);
});
