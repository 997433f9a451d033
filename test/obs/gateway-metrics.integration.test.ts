// What the data-plane, worker and refit series say, read from GET /metrics of a real gateway
// with an SGLang (HTTP) and a TokenSpeed (gRPC) simulator: one request-histogram observation per
// finished request by route, model, answering worker and status (refusals before routing have no
// worker, a caller gone before any head is 499), TTFT and inter-token latency for streamed 2xx
// answers only, attempts per worker (a retry counts on both engines), in-flight requests and
// breaker states read at scrape time, and refits in flight with their phase durations.

import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { sample, total, types } from '../fixtures/prometheus-text.ts';

const HTTP_MODEL = 'sim-model';
const TOKEN_MODEL = 'TS';
const DURATION = 'rlgate_router_request_duration_seconds_count';
const TTFT = 'rlgate_router_ttft_seconds_count';
const ITL = 'rlgate_router_inter_token_latency_seconds_count';
const ATTEMPTS = 'rlgate_worker_requests_total';
const ACTIVE = 'rlgate_worker_requests_active';
const BREAKER = 'rlgate_worker_cb_state';

/** Polls GET /metrics until `check` holds (no speed asserted: only that it comes to hold). */
async function until(t: TestGateway, what: string, check: (text: string) => boolean, timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = (await t.http('GET', '/metrics')).text;
    if (check(text)) return text;
    if (Date.now() > deadline)
      throw new Error(
        `${what}: not reached; /metrics had:\n${text
          .split('\n')
          .filter((l) => l.startsWith('rlgate_') && !l.includes('_bucket'))
          .join('\n')}`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('data-plane, worker and refit series', () => {
  let sims: SimProcess[];
  let ts: TokenspeedSimProcess;
  let t: TestGateway;
  let ids: string[];
  const metrics = async () => (await t.http('GET', '/metrics')).text;
  const gen = (body: Record<string, unknown>) => t.http('POST', '/generate', { body });

  beforeAll(async () => {
    [sims, ts] = await Promise.all([
      Promise.all([spawnSglangSim(['--token-rate', '20']), spawnSglangSim(['--token-rate', '20'])]),
      spawnTokenspeedSim(['--model', TOKEN_MODEL, '--token-rate', '20']),
    ]);
    // Probes off: only data-plane answers move the breakers.
    t = await startTestGateway({ breakerThreshold: 2, breakerCooldownSecs: 1, probeIntervalSecs: 0, rl: { controlTimeoutSecs: 20 } });
    ids = await t.register([...sims.map((s) => s.url), { url: ts.url, runtime_type: 'tokenspeed' }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([...(sims ?? []), ...(ts ? [ts] : [])].map((s) => s.stop()));
  });

  it('the new families have their types: histograms, a counter and two gauges', async () => {
    const ty = types(await metrics());
    for (const h of ['rlgate_router_request_duration_seconds', 'rlgate_router_ttft_seconds', 'rlgate_router_inter_token_latency_seconds'])
      expect(ty.get(h), h).toBe('histogram');
    expect(ty.get(ATTEMPTS)).toBe('counter');
    expect(ty.get(ACTIVE)).toBe('gauge');
    expect(ty.get(BREAKER)).toBe('gauge');
    expect(ty.get('rlgate_rl_refits_in_flight')).toBe('gauge');
  });

  it('buffered answers are observed once by route, model, worker and status, with no TTFT; a streamed one adds TTFT and inter-token gaps', async () => {
    const [a, b] = sims as [SimProcess, SimProcess];
    // Buffered: two on the HTTP engines, one on the token engine.
    const answered: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await gen({ model: HTTP_MODEL, text: 'hi', sampling_params: { max_new_tokens: 1 } });
      expect(r.status, r.text).toBe(200);
      answered.push(String(r.headers['x-smg-routed-worker-id']));
    }
    expect((await gen({ model: TOKEN_MODEL, input_ids: [1, 2], sampling_params: { max_new_tokens: 1 } })).status).toBe(200);
    let text = await metrics();
    for (const s of [a, b]) {
      const n = answered.filter((u) => u === s.url).length;
      expect(sample(text, DURATION, { route: '/generate', model: HTTP_MODEL, worker: s.url, status: '200' }) ?? 0, s.url).toBe(n);
      expect(sample(text, ATTEMPTS, { worker: s.url, model: HTTP_MODEL }) ?? 0, s.url).toBe(n);
    }
    expect(sample(text, DURATION, { route: '/generate', model: TOKEN_MODEL, worker: ts.url, status: '200' })).toBe(1);
    expect(total(text, TTFT)).toBe(0);
    expect(total(text, ITL)).toBe(0);

    // Streamed, 4 tokens at 20 tokens/s: on the HTTP path and on the token path.
    const s1 = await gen({ model: HTTP_MODEL, text: 'hi', stream: true, sampling_params: { max_new_tokens: 4 } });
    expect(s1.status).toBe(200);
    const streamedOn = String(s1.headers['x-smg-routed-worker-id']);
    const s2 = await t.http('POST', '/v1/completions', { body: { model: TOKEN_MODEL, prompt: [1, 2, 3], stream: true, max_tokens: 4 } });
    expect(s2.status, s2.text).toBe(200);
    text = await metrics();
    expect(sample(text, TTFT, { route: '/generate', model: HTTP_MODEL, worker: streamedOn })).toBe(1);
    expect(sample(text, TTFT, { route: '/v1/completions', model: TOKEN_MODEL, worker: ts.url })).toBe(1);
    expect(total(text, TTFT)).toBe(2);
    // A gap between events that bring tokens: fewer than the 4 tokens (events may share tokens;
    // the completion and the `[DONE]` terminator are no gap).
    for (const [route, model, worker] of [
      ['/generate', HTTP_MODEL, streamedOn],
      ['/v1/completions', TOKEN_MODEL, ts.url],
    ] as const) {
      expect(sample(text, ITL, { route, model, worker }), route).toBeGreaterThanOrEqual(1);
      expect(sample(text, ITL, { route, model, worker }), route).toBeLessThanOrEqual(3);
    }
    expect(sample(text, DURATION, { route: '/v1/completions', model: TOKEN_MODEL, worker: ts.url, status: '200' })).toBe(1);
  });

  it('refusals before routing are observed with their status and no worker or model', async () => {
    expect((await gen({ model: 'no-such-model', text: 'hi' })).status).toBe(404);
    expect((await gen({ text: ['a', 'b'], model: HTTP_MODEL })).status).toBe(422);
    expect((await t.http('POST', '/v1/rl/engine/pause_generation?selector=engine%3Dsglang', { body: {} })).status).toBe(200);
    try {
      expect((await gen({ model: HTTP_MODEL, text: 'hi' })).status).toBe(503);
    } finally {
      expect((await t.http('POST', '/v1/rl/engine/continue_generation?selector=engine%3Dsglang', { body: {} })).status).toBe(200);
    }
    const text = await metrics();
    for (const status of ['404', '422', '503']) expect(sample(text, DURATION, { route: '/generate', model: '', worker: '', status }), status).toBe(1);
  });

  it('an engine that drops the connection before answering: the retry counts as an attempt on both, the answer on the one that answered', async () => {
    const before = await metrics();
    const [a] = sims as [SimProcess, SimProcess];
    await a.setFaults({ route: 'generate', drop: true, times: 1 });
    for (let i = 0; i < 6; i++) expect((await gen({ model: HTTP_MODEL, text: 'hi', sampling_params: { max_new_tokens: 1 } })).status).toBe(200);
    await a.clearFaults();
    const after = await metrics();
    const delta = (text: string, name: string, labels: Record<string, string>) => total(after, name, labels) - total(text, name, labels);
    expect(delta(before, ATTEMPTS, { model: HTTP_MODEL })).toBe(7);
    expect(delta(before, DURATION, { model: HTTP_MODEL, status: '200' })).toBe(6);
    expect(delta(before, ATTEMPTS, { worker: a.url })).toBe(delta(before, DURATION, { worker: a.url }) + 1);
  });

  it('in flight per worker is read at scrape time; a caller gone before any answer head is counted as 499', async () => {
    const [a, b] = sims as [SimProcess, SimProcess];
    let text = await metrics();
    for (const s of [a, b]) expect(sample(text, ACTIVE, { worker: s.url }), s.url).toBe(0);
    expect(sample(text, ACTIVE, { worker: ts.url })).toBe(0);
    // Both HTTP engines hold their next /generate: the request is in flight wherever it goes.
    for (const s of [a, b]) await s.setFaults({ route: 'generate', hang: true, times: 1 });
    const agent = new Agent();
    const ctrl = new AbortController();
    const pending = request(`${t.url}/generate`, {
      dispatcher: agent,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: HTTP_MODEL, text: 'hi' }),
      signal: ctrl.signal,
    }).catch((err: Error) => err);
    try {
      text = await until(t, 'one request in flight', (x) => total(x, ACTIVE, {}) === 1);
      expect(total(text, ACTIVE, { worker: a.url }) + total(text, ACTIVE, { worker: b.url })).toBe(1);
      ctrl.abort();
      expect(await pending).toBeInstanceOf(Error);
      text = await until(t, 'the 499 observed', (x) => total(x, DURATION, { status: '499' }) === 1);
      expect(total(text, DURATION, { route: '/generate', model: HTTP_MODEL, status: '499' })).toBe(1);
      await until(t, 'nothing in flight', (x) => total(x, ACTIVE, {}) === 0);
    } finally {
      await agent.destroy();
      for (const s of [a, b]) {
        await s.releaseHung();
        await s.clearFaults();
      }
    }
  });

  it('refits in flight reads 1 while a refit runs and 0 after; each phase it ran is observed once', async () => {
    let text = await metrics();
    expect(sample(text, 'rlgate_rl_refits_in_flight')).toBe(0);
    const phasesBefore = Object.fromEntries(
      ['pause', 'refit', 'verify', 'resume'].map((p) => [p, sample(text, 'rlgate_rl_refit_phase_duration_seconds_count', { phase: p }) ?? 0]),
    );
    await sims[0]!.setFaults({ route: 'pause_generation', delayMs: 1500, times: 1 });
    const refit = t.http('POST', '/v1/rl/refits', { body: { weight_version: '5', selector: 'engine=sglang', source: { kind: 'disk', model_path: '/m/5' } } });
    await until(t, 'a refit in flight', (x) => sample(x, 'rlgate_rl_refits_in_flight') === 1);
    const r = await refit;
    expect(r.status, r.text).toBe(200);
    text = await metrics();
    expect(sample(text, 'rlgate_rl_refits_in_flight')).toBe(0);
    expect(sample(text, 'rlgate_rl_refits_total', { result: 'succeeded' })).toBe(1);
    for (const p of ['pause', 'refit', 'verify', 'resume']) {
      expect(sample(text, 'rlgate_rl_refit_phase_duration_seconds_count', { phase: p }), p).toBe(phasesBefore[p]! + 1);
    }
    for (const s of sims) expect(sample(text, 'rlgate_rl_worker_weight_version', { worker: s.url }), s.url).toBe(5);
  });

  it('breaker state per worker: 1 once 5xx answers open it, 2 half-open after the cool-down, 0 closed again after a success', async () => {
    const [a, b] = sims as [SimProcess, SimProcess];
    let text = await metrics();
    for (const [url, id] of [
      [a.url, ids[0]],
      [b.url, ids[1]],
      [ts.url, ids[2]],
    ])
      expect(sample(text, BREAKER, { worker: url! }), id).toBe(0);
    // Only `a` serves while `b` is paused, so both 500s land on it.
    expect((await t.http('POST', `/v1/rl/engine/pause_generation?selector=id%3D${ids[1]}`, { body: {} })).status).toBe(200);
    try {
      await a.setFaults({ route: 'generate', status: 500, body: { error: { message: 'boom' } }, times: 2 });
      for (let i = 0; i < 2; i++) expect((await gen({ model: HTTP_MODEL, text: 'hi', sampling_params: { max_new_tokens: 1 } })).status).toBe(500);
      text = await metrics();
      expect(sample(text, BREAKER, { worker: a.url })).toBe(1);
      expect(sample(text, BREAKER, { worker: b.url })).toBe(0);
      expect(sample(text, DURATION, { route: '/generate', model: HTTP_MODEL, worker: a.url, status: '500' })).toBe(2);
      await until(t, 'half-open after the cool-down', (x) => sample(x, BREAKER, { worker: a.url }) === 2);
      expect((await gen({ model: HTTP_MODEL, text: 'hi', sampling_params: { max_new_tokens: 1 } })).status).toBe(200);
      expect(sample(await metrics(), BREAKER, { worker: a.url })).toBe(0);
    } finally {
      await t.http('POST', `/v1/rl/engine/continue_generation?selector=id%3D${ids[1]}`, { body: {} });
    }
  });
});
