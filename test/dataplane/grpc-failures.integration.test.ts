// A TokenSpeed gRPC engine dying under load (issue 3): SIGKILL while a fan-out leg waits on its
// control app, and SIGKILL mid streamed /generate. The gateway must answer (207 naming the dead
// engine; a stream that ends with an abort partial or an error, then `data: [DONE]`), never hang,
// and leave every other engine serving and unpaused.

import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const q = (selector: string) => `selector=${encodeURIComponent(selector)}`;
const GEN = { model: 'MODEL', input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };

/** Polls `check` until it holds; the deadline only bounds a hang, it asserts no speed. */
async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Rejects if `p` has not settled within `ms`: turns a hang into a failure with a name. */
function noHang<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, rej) => {
    timer = setTimeout(() => rej(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

describe('gRPC engines killed mid fan-out and mid stream (tsA, tsB: TokenSpeed; sg: SGLang)', () => {
  let t: TestGateway;
  let tsA: TokenspeedSimProcess;
  let tsB: TokenspeedSimProcess;
  let sg: SimProcess;
  const id = { a: '', b: '', sg: '' };

  async function row(workerId: string): Promise<Record<string, any>> {
    const res = await t.http('GET', `/v1/rl/workers/${workerId}`);
    expect(res.status).toBe(200);
    return res.json;
  }

  /** `n` /generate calls that must all succeed; returns the workers they were routed to. */
  async function generateMany(n: number): Promise<Set<string>> {
    const routed = new Set<string>();
    for (let i = 0; i < n; i++) {
      const gen = await t.http('POST', '/generate', { body: GEN });
      expect(gen.status, gen.text).toBe(200);
      expect(Array.isArray(gen.json)).toBe(false);
      expect(gen.json.output_ids).toHaveLength(3);
      routed.add(String(gen.headers['x-smg-routed-worker-id']));
    }
    return routed;
  }

  beforeAll(async () => {
    [tsA, tsB, sg] = await Promise.all([
      spawnTokenspeedSim([
        '--rl-control-port',
        '0',
        '--rl-control-api-key',
        'ts-secret',
        '--stamp-weight-version',
        'v7',
        '--model',
        'MODEL',
        '--token-rate',
        '0',
      ]),
      // Slow tokens: a long generation is still running when the engine is killed.
      spawnTokenspeedSim(['--rl-control-port', '0', '--stamp-weight-version', 'v7', '--model', 'MODEL', '--token-rate', '20']),
      spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']),
    ]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 5 } });
    [id.a, id.b, id.sg] = await t.register([
      { url: tsA.url, runtime_type: 'tokenspeed', api_key: 'ts-secret' },
      { url: tsB.url, runtime_type: 'tokenspeed' },
      sg.url,
    ]);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([tsA, tsB, sg].filter(Boolean).map((s) => s.stop()));
  });

  it('SIGKILL while its pause leg is in flight: 207 naming it, the others pause and resume, nothing stays paused', async () => {
    await tsA.clearRecords();
    // The leg to tsA is held at its control app (below the 5 s control timeout) until the kill.
    await tsA.setFaults({ route: 'pause_generation', delayMs: 4_000, times: 1 });
    const fanout = t.http('POST', `/v1/rl/engine/pause_generation?${q('worker_type=regular')}`, { body: { mode: 'abort' } });
    await waitFor('the pause to reach tsA', async () => (await tsA.requests()).some((r) => r.path === '/pause_generation'));
    await tsA.kill();

    const res = await noHang(fanout, 10_000, 'the fan-out');
    expect(res.status).toBe(207);
    expect(res.json).toMatchObject({ total: 3, succeeded: 2 });
    expect(Object.keys(res.json.results)).toEqual([id.b, id.sg].sort());
    for (const other of [id.b, id.sg]) expect(res.json.results[other].status).toBe(200);
    expect(res.json.failed).toHaveLength(1);
    const f = res.json.failed[0];
    expect(f.worker_id).toBe(id.a);
    expect(f.url).toBe(tsA.url);
    expect(['upstream_unreachable', 'upstream_timeout']).toContain(f.error);
    if (f.error === 'upstream_unreachable') expect(f.message).toContain(`${tsA.controlUrl}/pause_generation`);
    expect(f.message).toContain(tsA.url);

    // The trainer resumes whatever it paused; the dead leg fails again, the live ones resume.
    const resumed = await noHang(t.http('POST', `/v1/rl/engine/continue_generation?${q('worker_type=regular')}`, { body: {} }), 10_000, 'the resume fan-out');
    expect(resumed.status).toBe(207);
    expect(resumed.json).toMatchObject({ total: 3, succeeded: 2 });
    expect(resumed.json.failed.map((x: { worker_id: string }) => x.worker_id)).toEqual([id.a]);
    expect(resumed.json.failed[0].error).toBe('upstream_unreachable');

    expect((await tsB.state()).paused).toBeNull();
    expect((await sg.state()).paused).toBeNull();
    for (const other of [id.b, id.sg]) {
      expect(await row(other), other).toMatchObject({ control: 'active', state: 'serving', health: 'ready', breaker: 'closed', load: 0 });
    }
    // The dead engine was never recorded paused (no 2xx came back) and leaves routing by its probes.
    expect((await row(id.a)).control).toBe('active');
    await waitFor('tsA to leave routing', async () => (await row(id.a)).health === 'not_ready');
    const routed = await generateMany(4);
    expect(routed.has(tsA.url)).toBe(false);
    expect(routed).toEqual(new Set([tsB.url, sg.url]));

    // Back on the same ports: rediscovered, and the same kind of fan-out is a full success.
    await tsA.restart();
    await waitFor('tsA to serve again', async () => (await row(id.a)).state === 'serving');
    const again = await t.http('POST', `/v1/rl/engine/flush_cache?${q('worker_type=regular')}`);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ total: 3, succeeded: 3, failed: [] });
  });

  it('a caller that drops a stream: the engine gets Abort(rid, "Stream dropped"), no failure is counted', async () => {
    for (const other of [id.a, id.sg]) {
      expect((await t.http('POST', `/v1/rl/workers/${other}/state`, { body: { control: 'paused' } })).status).toBe(200);
    }
    try {
      await tsB.clearRecords();
      const ctrl = new AbortController();
      const res = await request(`${t.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ rid: 'drop-1', input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 400 }, stream: true }),
        signal: ctrl.signal,
      });
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-smg-routed-worker-id']).toBe(tsB.url);
      let text = '';
      try {
        for await (const chunk of res.body) {
          text += Buffer.from(chunk).toString('utf8');
          if ((lastEvent(text)?.output_ids?.length ?? 0) > 0) ctrl.abort();
        }
      } catch {
        // the abort we asked for
      }
      expect(ctrl.signal.aborted).toBe(true);

      await waitFor('the Abort RPC', async () => (await tsB.rpcs()).some((r) => r.rpc === 'Abort'));
      const aborts = (await tsB.rpcs()).filter((r) => r.rpc === 'Abort');
      expect(aborts).toHaveLength(1);
      expect(aborts[0]!.request).toMatchObject({ request_id: 'drop-1', reason: 'Stream dropped' });
      await waitFor('the engine to drop the request', async () => (await tsB.state()).sequences.length === 0);
      await waitFor('the load to return to 0', async () => (await row(id.b)).load === 0);
      expect(await row(id.b)).toMatchObject({ state: 'serving', breaker: 'closed', control: 'active' });
    } finally {
      for (const other of [id.a, id.sg]) await t.http('POST', `/v1/rl/workers/${other}/state`, { body: { control: 'active' } });
    }
  });

  it('SIGKILL mid streamed /generate: the stream ends with an abort partial or an error and [DONE]; the others serve on', async () => {
    // Only tsB is eligible while the others are marked paused on the gateway (no engine call).
    for (const other of [id.a, id.sg]) {
      expect((await t.http('POST', `/v1/rl/workers/${other}/state`, { body: { control: 'paused' } })).status).toBe(200);
    }
    let text = '';
    let tokensBeforeKill = 0;
    try {
      const res = await request(`${t.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'MODEL', input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 400 }, stream: true }),
      });
      expect(res.statusCode).toBe(200);
      expect(String(res.headers['content-type'])).toContain('text/event-stream');
      expect(res.headers['x-smg-routed-worker-id']).toBe(tsB.url);

      let killed: Promise<void> | undefined;
      const read = (async () => {
        for await (const chunk of res.body) {
          text += Buffer.from(chunk).toString('utf8');
          const seen = lastEvent(text)?.output_ids?.length ?? 0;
          if (!killed && seen > 0) {
            tokensBeforeKill = seen;
            killed = tsB.kill();
          }
        }
      })();
      await noHang(read, 15_000, 'the stream');
      await killed;
    } finally {
      for (const other of [id.a, id.sg]) await t.http('POST', `/v1/rl/workers/${other}/state`, { body: { control: 'active' } });
    }

    expect(tokensBeforeKill).toBeGreaterThan(0);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const last = lastEvent(text);
    expect(last).toBeDefined();
    if (last!.error !== undefined) {
      expect(typeof last!.error.message).toBe('string');
    } else {
      // An abort partial: the tokens that arrived, fewer than asked for, stamped by the engine.
      expect(last!.meta_info.finish_reason.type).toBe('abort');
      expect(last!.output_ids.length).toBeGreaterThanOrEqual(tokensBeforeKill);
      expect(last!.output_ids.length).toBeLessThan(400);
      expect(last!.meta_info.weight_version).toBe('v7');
    }

    // The other engines are unaffected: once tsB leaves routing, every /generate succeeds elsewhere.
    await waitFor('tsB to leave routing', async () => (await row(id.b)).health === 'not_ready');
    const routed = await generateMany(4);
    expect(routed).toEqual(new Set([tsA.url, sg.url]));
    for (const other of [id.a, id.sg]) {
      expect(await row(other), other).toMatchObject({ control: 'active', state: 'serving', breaker: 'closed', load: 0 });
    }
  });
});

/** The last complete JSON event of an SSE text (before `[DONE]`); a half-received one is ignored. */
function lastEvent(text: string): Record<string, any> | undefined {
  const events = text
    .split('\n\n')
    .slice(0, -1)
    .map((e) => e.trim())
    .filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]');
  const last = events.at(-1);
  if (!last) return undefined;
  try {
    return JSON.parse(last.slice('data: '.length));
  } catch {
    return undefined;
  }
}
