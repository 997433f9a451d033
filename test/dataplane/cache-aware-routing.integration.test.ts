// `rlgate gateway --policy cache_aware` (docs/routing.md) over three SGLang simulators, judged by
// the simulators' own request records: while the loads are balanced, prompts sharing a long
// prefix all go to the one engine that served the first; once that engine holds more requests in
// flight than both thresholds allow (here 3 against 0 with --balance-abs-threshold 2), the same
// prompts go to the other engines, spread over both; and /metrics counts each decision by worker
// and reason.

import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { sample } from '../fixtures/prometheus-text.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

// Far longer than any question after it: every later prompt matches well above 0.3 of itself.
const PREFIX = `You are a careful assistant for a reinforcement-learning rollout. ${'Think step by step and show the working. '.repeat(6)}`;
const prompt = (i: number) => `${PREFIX}Question ${i}: what is ${i} + ${i}?`;
const QUICK = (i: number) => ({ text: prompt(i), sampling_params: { max_new_tokens: 1 } });

/** The /generate prompts each simulator was sent since it was last cleared. */
async function promptsOn(s: SimProcess): Promise<string[]> {
  return (await s.requests()).filter((r) => r.path === '/generate').map((r) => JSON.parse(r.body).text as string);
}

/** A streamed /generate on its own socket, answered (head received) and then held open. */
function openStream(base: string, body: unknown): Promise<{ req: ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/generate`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
    req.on('error', () => {}); // destroyed on purpose at the end
    req.on('response', (res) => {
      res.on('error', () => {}).resume();
      resolve({ req, res });
    });
    req.once('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('--policy cache_aware over three SGLang simulators', () => {
  let sims: SimProcess[];
  let gw: GatewayProcess;
  const held: ClientRequest[] = [];

  beforeAll(async () => {
    // 20 tokens a second: a 30000-token stream stays open for the whole test, a 1-token answer is quick.
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '20'])));
    gw = await startGatewayProcess(['--policy', 'cache_aware', '--balance-abs-threshold', '2', '--balance-rel-threshold', '1.5']);
    for (const s of sims) {
      const r = await gw.http('POST', '/workers', { url: s.url });
      expect(r.status, r.text).toBe(202);
    }
    await until('3 engines ready', 20_000, async () => {
      const rows = (await gw.http('GET', '/v1/rl/workers')).json.workers as Array<{ health: string }>;
      return rows.length === 3 && rows.every((r) => r.health === 'ready');
    });
  }, 60_000);
  afterAll(async () => {
    for (const c of held) c.destroy();
    await gw?.stop();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  let home: SimProcess;
  let others: SimProcess[];

  it('balanced: every prompt sharing the prefix goes to the engine that served the first', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    for (let i = 0; i < 8; i++) {
      const r = await gw.http('POST', '/generate', QUICK(i));
      expect(r.status, r.text).toBe(200);
    }
    const seen = await Promise.all(sims.map(promptsOn));
    const served = seen.map((p) => p.length);
    expect(served.sort()).toEqual([0, 0, 8]);
    home = sims[seen.findIndex((p) => p.length === 8)]!;
    others = sims.filter((s) => s !== home);
    expect(seen.find((p) => p.length === 8)).toEqual(Array.from({ length: 8 }, (_, i) => prompt(i)));

    const metrics = (await gw.http('GET', '/metrics')).text;
    expect(sample(metrics, 'rlgate_routing_decisions_total', { worker: home.url, reason: 'cache_hit' })).toBe(7);
    expect(sample(metrics, 'rlgate_routing_decisions_total', { worker: home.url, reason: 'min_load' })).toBe(1);
  });

  it('imbalanced: with 3 in flight on it against 0, the same prompts go to the other engines, both of them', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    // Three long streams with the shared prefix: each goes home (at most 2 against 0 is balanced).
    for (let i = 100; i < 103; i++) {
      const st = await openStream(gw.url, { text: prompt(i), stream: true, sampling_params: { max_new_tokens: 30_000 } });
      held.push(st.req);
      expect(st.res.statusCode).toBe(200);
    }
    expect((await promptsOn(home)).length).toBe(3);
    await until('3 requests in flight on the home engine', 10_000, async () => {
      const metrics = (await gw.http('GET', '/metrics')).text;
      return sample(metrics, 'rlgate_worker_requests_active', { worker: home.url }) === 3;
    });

    for (let i = 200; i < 206; i++) {
      const r = await gw.http('POST', '/generate', QUICK(i));
      expect(r.status, r.text).toBe(200);
    }
    expect((await promptsOn(home)).length).toBe(3);
    const spread = await Promise.all(others.map(promptsOn));
    expect(spread.map((p) => p.length)).toEqual([3, 3]);
    expect(spread.flat().sort()).toEqual(Array.from({ length: 6 }, (_, i) => prompt(200 + i)).sort());

    const metrics = (await gw.http('GET', '/metrics')).text;
    for (const s of others) expect(sample(metrics, 'rlgate_routing_decisions_total', { worker: s.url, reason: 'imbalance' })).toBe(3);
  });
});

describe('a bad routing setting', () => {
  it('stops the gateway before it listens, naming the flag', async () => {
    await expect(startGatewayProcess(['--policy', 'cache_aware', '--cache-threshold', '1.5'])).rejects.toThrow(
      /gateway exited \(\d+\) before listening: .*--cache-threshold must be between 0\.0 and 1\.0, got `1\.5`/s,
    );
  });
});
