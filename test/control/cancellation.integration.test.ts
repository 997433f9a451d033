// A caller that goes away cancels its engine calls: the running call is aborted at the engine, a
// queued fan-out leg is never sent, and the engine's command queue is free again. The control
// timeout is long (60 s) so only a cancellation can end a hung call.

import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

/** Polls until `check` holds; fails with `what` after `ms` (far below the 60 s control timeout). */
async function until(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`still waiting after ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function calls(sim: SimProcess, path: string): Promise<number> {
  return (await sim.requests()).filter((r) => r.path === path).length;
}

/** Starts a request and returns a way to drop the connection; the answer is never awaited. */
function startAndAbandon(url: string, body: unknown): () => void {
  const ctrl = new AbortController();
  request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: ctrl.signal,
  }).then(
    (res) => res.body.dump(),
    () => undefined, // the abort rejects it: that is the point
  );
  return () => ctrl.abort();
}

describe('client disconnect', () => {
  let t: TestGateway;
  /** [first, second] in fan-out order (targets are sorted by base_url). */
  let sims: SimProcess[];
  let ids: string[];

  beforeAll(async () => {
    const spawned = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    sims = spawned.sort((a, b) => (a.url < b.url ? -1 : 1));
    t = await startTestGateway({ rl: { controlTimeoutSecs: 60, fanoutConcurrency: 1 } });
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    // Simulators first: stopping one drops every call it still holds, so the gateway closes
    // promptly even when a cancellation did not happen (and no child outlives a failed run).
    await Promise.all((sims ?? []).map((s) => s.stop()));
    await t?.close();
  });

  it('a per-worker call is aborted at the engine and the engine takes the next command', async () => {
    const [sim] = sims;
    await sim!.setFaults({ route: 'flush_cache', hang: true, times: 1 });
    const abandon = startAndAbandon(`${t.url}/v1/rl/workers/${ids[0]}/engine/flush_cache`, {});
    await until('the engine to hold the call', async () => (await sim!.state()).hung === 1);
    abandon();
    await until('the gateway to abort the engine call', async () => (await sim!.state()).hung === 0);

    // The engine's actor is not stuck behind the cancelled call.
    const next = await t.http('POST', `/v1/rl/workers/${ids[0]}/engine/flush_cache`);
    expect(next.status).toBe(200);
  });

  it('a fan-out aborts its running leg and never sends its queued leg', async () => {
    const [first, second] = sims as [SimProcess, SimProcess];
    await Promise.all(sims.map((s) => s.clearRequests()));
    await first.setFaults({ route: 'pause_generation', hang: true, times: 1 });
    const abandon = startAndAbandon(`${t.url}/v1/rl/engine/pause_generation?selector=worker_type%3Dregular`, {});
    await until('the first leg to be held by its engine', async () => (await first.state()).hung === 1);
    expect(await calls(second, '/pause_generation')).toBe(0); // concurrency 1: still queued
    abandon();
    await until('the gateway to abort the running leg', async () => (await first.state()).hung === 0);

    // Both engines take new commands, and the queued pause never reached the second one: had it
    // been sent, it would sit in that engine's order before this flush.
    const next = await t.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular');
    expect(next.status).toBe(200);
    expect(next.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    expect(await calls(second, '/flush_cache')).toBe(1);
    expect(await calls(second, '/pause_generation')).toBe(0);
    expect(await calls(first, '/pause_generation')).toBe(1);
    for (const s of sims) expect((await s.state()).paused, s.url).toBeNull();

    // A cancelled call is nobody's failure: breakers closed, no load.
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    for (const row of rows) {
      expect(row.breaker, row.url).toBe('closed');
      expect(row.load, row.url).toBe(0);
    }
  });
});
