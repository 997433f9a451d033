// Routing made visible (docs/routing.md#watching-routing): two SGLang simulators on the realistic
// cost model behind a real gateway (the default policy, bounded_affinity). The same 400-token
// prompt, sent one request after another, stays on one engine (its first decision `min_load`, the
// rest `cache_hit`); that engine's `routing` in GET /v1/rl/workers and /workers/{id} sums the
// answers' own prompt, cached and completion tokens, its hit rate is cached ÷ prompt, its queued
// tokens are back to 0, and /metrics says the same per worker. Under a policy that counts no
// queue (least_inflight) queued_tokens is null and the gauge has no series. A removed engine's
// series go with it, and registered again it starts from zero.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { sample, samples } from '../fixtures/prometheus-text.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startTokenFleet, type TokenFleet } from '../fixtures/token-fleet.ts';

const PROMPT = Array.from({ length: 400 }, (_, i) => 1000 + i);
const REPEATS = 5;
const ask = { input_ids: PROMPT, sampling_params: { max_new_tokens: 4, ignore_eos: true } };

interface Routing {
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  prefix_hit_rate: number | null;
  queued_tokens: number | null;
  decisions: Record<string, number>;
}
interface Row {
  id: string;
  url: string;
  health: string;
  routing: Routing;
}

const generateCalls = async (s: SimProcess) => (await s.requests()).filter((r) => r.path === '/generate').length;

async function rows(gw: GatewayProcess): Promise<Row[]> {
  const r = await gw.http('GET', '/v1/rl/workers');
  expect(r.status, r.text).toBe(200);
  return r.json.workers as Row[];
}

/** Registers the engines, then waits until the gateway lists `total` rows, all ready. */
async function register(gw: GatewayProcess, engines: SimProcess[], total = engines.length): Promise<Row[]> {
  for (const s of engines) {
    const r = await gw.http('POST', '/workers', { url: s.url });
    expect(r.status, r.text).toBe(202);
  }
  return until(`${total} engines ready`, 20_000, async () => {
    const list = await rows(gw);
    return list.length === total && list.every((w) => w.health === 'ready') ? list : undefined;
  });
}

describe('routing figures per engine: rows and /metrics', () => {
  let sims: SimProcess[];
  let gw: GatewayProcess;
  let plain: GatewayProcess | undefined;
  const answers: Array<{ prompt_tokens: number; cached_tokens: number; completion_tokens: number }> = [];
  let home: SimProcess;
  let homeRow: Row;
  let other: SimProcess;

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--cost-model', 'realistic'])));
    gw = await startGatewayProcess([]);
    await register(gw, sims);
    await Promise.all(sims.map((s) => s.clearRequests()));
    for (let i = 0; i < REPEATS; i++) {
      const r = await gw.http('POST', '/generate', ask);
      expect(r.status, r.text).toBe(200);
      answers.push(r.json.meta_info);
    }
  }, 90_000);
  afterAll(async () => {
    await gw?.stop();
    await plain?.stop();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  const sum = (k: 'prompt_tokens' | 'cached_tokens' | 'completion_tokens') => answers.reduce((a, m) => a + m[k], 0);

  it('the repeated prompt stayed on one engine, which reused it (the answers say so)', async () => {
    const served = await Promise.all(sims.map(generateCalls));
    expect([...served].sort()).toEqual([0, REPEATS]);
    home = sims[served.indexOf(REPEATS)]!;
    other = sims.find((s) => s !== home)!;
    expect(sum('prompt_tokens')).toBe(REPEATS * PROMPT.length);
    expect(sum('cached_tokens')).toBeGreaterThan(0);
  });

  it("the serving engine's row sums the answers' counts; its hit rate is cached ÷ prompt; its decisions and queue are routing's", async () => {
    // The request ends for the router when the answer's socket closes, a moment after the caller has it.
    const list = await until('the answers counted', 10_000, async () => {
      const l = await rows(gw);
      return l.find((w) => w.url === home.url)?.routing.prompt_tokens === sum('prompt_tokens') ? l : undefined;
    });
    homeRow = list.find((w) => w.url === home.url)!;
    const r = homeRow.routing;
    expect(r.prompt_tokens).toBe(sum('prompt_tokens'));
    expect(r.cached_tokens).toBe(sum('cached_tokens'));
    expect(r.completion_tokens).toBe(sum('completion_tokens'));
    expect(r.prefix_hit_rate).toBeGreaterThan(0);
    expect(r.prefix_hit_rate).toBeCloseTo(sum('cached_tokens') / sum('prompt_tokens'), 12);
    expect(r.decisions).toEqual({ min_load: 1, cache_hit: REPEATS - 1 });
    expect(r.queued_tokens).toBe(0);

    const idle = list.find((w) => w.url === other.url)!.routing;
    expect(idle).toEqual({ prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, prefix_hit_rate: null, queued_tokens: 0, decisions: {} });

    const one = await gw.http('GET', `/v1/rl/workers/${homeRow.id}`);
    expect(one.status, one.text).toBe(200);
    expect(one.json.routing).toEqual(r);
  });

  it('/metrics agrees, per worker: tokens, decisions, and the queued tokens gauge', async () => {
    const text = (await gw.http('GET', '/metrics')).text;
    const worker = { worker: home.url };
    expect(sample(text, 'rlgate_worker_prompt_tokens_total', worker)).toBe(homeRow.routing.prompt_tokens);
    expect(sample(text, 'rlgate_worker_cached_tokens_total', worker)).toBe(homeRow.routing.cached_tokens);
    expect(sample(text, 'rlgate_worker_completion_tokens_total', worker)).toBe(homeRow.routing.completion_tokens);
    for (const [reason, n] of Object.entries(homeRow.routing.decisions)) {
      expect(sample(text, 'rlgate_routing_decisions_total', { worker: home.url, reason }), reason).toBe(n);
    }
    for (const s of sims) expect(sample(text, 'rlgate_worker_queued_tokens', { worker: s.url }), s.url).toBe(0);
    expect(sample(text, 'rlgate_worker_prompt_tokens_total', { worker: other.url })).toBeUndefined();
  });

  it('a policy that counts no queue (least_inflight): queued_tokens is null and the gauge has no series; tokens still count', async () => {
    plain = await startGatewayProcess(['--policy', 'least_inflight']);
    await register(plain, sims);
    const r = await plain.http('POST', '/generate', ask);
    expect(r.status, r.text).toBe(200);
    const list = await until('the answer counted', 10_000, async () => {
      const l = await rows(plain!);
      return l.some((w) => w.routing.prompt_tokens > 0) ? l : undefined;
    });
    for (const w of list) expect(w.routing.queued_tokens, w.url).toBeNull();
    const served = list.find((w) => w.routing.prompt_tokens > 0)!;
    expect(served.routing).toMatchObject({
      prompt_tokens: r.json.meta_info.prompt_tokens,
      cached_tokens: r.json.meta_info.cached_tokens,
      decisions: { min_load: 1 },
    });
    const text = (await plain.http('GET', '/metrics')).text;
    expect(samples(text).filter((s) => s.name === 'rlgate_worker_queued_tokens')).toEqual([]);
    expect(sample(text, 'rlgate_worker_prompt_tokens_total', { worker: served.url })).toBe(r.json.meta_info.prompt_tokens);
  });

  it('a removed engine takes its series along; registered again, its figures start from zero', async () => {
    const removed = await gw.http('DELETE', `/workers/${homeRow.id}`);
    expect(removed.status, removed.text).toBe(200);
    const text = (await gw.http('GET', '/metrics')).text;
    for (const n of [
      'rlgate_worker_prompt_tokens_total',
      'rlgate_worker_cached_tokens_total',
      'rlgate_worker_completion_tokens_total',
      'rlgate_worker_queued_tokens',
    ]) {
      expect(sample(text, n, { worker: home.url }), n).toBeUndefined();
    }
    const list = await register(gw, [home], sims.length);
    const again = list.find((w) => w.url === home.url)!;
    expect(again.routing).toEqual({ prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, prefix_hit_rate: null, queued_tokens: 0, decisions: {} });
  });
});

describe('routing figures of a token engine (TokenSpeed over gRPC)', () => {
  let fleet: TokenFleet;
  afterAll(() => fleet?.close());

  it("its row sums the answers' counts, buffered and streamed, as an HTTP engine's does", async () => {
    fleet = await startTokenFleet({ tokenspeed: [['--model', 'MODEL', '--cost-model', 'realistic']] });
    const metas: Array<{ prompt_tokens: number; cached_tokens: number; completion_tokens: number }> = [];
    for (const stream of [false, false, true]) {
      const r = await fleet.t.http('POST', '/generate', { body: { ...ask, stream } });
      expect(r.status, r.text).toBe(200);
      if (!stream) metas.push(r.json.meta_info);
      else {
        const events = r.text
          .split('\n\n')
          .map((b) => b.trim())
          .filter((b) => b.startsWith('data: ') && b !== 'data: [DONE]');
        metas.push(JSON.parse(events.at(-1)!.slice('data: '.length)).meta_info);
      }
    }
    const total = (k: 'prompt_tokens' | 'cached_tokens' | 'completion_tokens') => metas.reduce((a, m) => a + m[k], 0);
    expect(total('prompt_tokens')).toBe(3 * PROMPT.length);
    expect(total('cached_tokens')).toBeGreaterThan(0);
    const id = fleet.ids.ts[0]!;
    const routing = await until('the answers counted', 10_000, async () => {
      const r = (await fleet.t.http('GET', `/v1/rl/workers/${id}`)).json.routing as Routing;
      return r.prompt_tokens === total('prompt_tokens') && r.completion_tokens === total('completion_tokens') ? r : undefined;
    });
    expect(routing.cached_tokens).toBe(total('cached_tokens'));
    expect(routing.prefix_hit_rate).toBeCloseTo(total('cached_tokens') / total('prompt_tokens'), 12);
    expect(routing.queued_tokens).toBe(0);
  });
});
