// SMG's RL end-to-end expectations (its `e2e_test/router/test_rl_control_plane.py`, both lanes)
// against plain registrations: `POST /workers {url}` and nothing else (no runtime type, no
// labels), simulators on their default flags. The rows must carry what SMG's test reads: a
// `tp_size` (a TokenSpeed engine reports attn_tp_size 1 by default) and a `model_path` (or
// `model`) label to refit from; SGLang's comes from its server info as SMG's discovery keeps it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const MODEL = 'MODEL';

/** What both lanes of SMG's test check (RlControlPlaneBehavior). */
function sharedBehaviour(lane: () => { t: TestGateway; engine: string; mode: string }) {
  const fanout = (op: string, body: unknown) => {
    const { t, engine } = lane();
    return t.http('POST', `/v1/rl/engine/${op}?selector=${encodeURIComponent(`engine=${engine}`)}`, { body });
  };

  it('discovery reports the engine, its topology and its control endpoint', async () => {
    const { t, engine, mode } = lane();
    const body = (await t.http('GET', '/v1/rl/workers')).json;
    expect(body.total).toBeGreaterThanOrEqual(1);
    const w = body.workers[0];
    expect(w.engine).toBe(engine);
    expect(w.connection_mode).toBe(mode);
    expect(w.tp_size).not.toBeNull();
    expect(w.health).toBe('ready');
    expect(w.control_url).toBeTruthy();
    expect(w.capabilities.pause_modes).toContain('abort');
  });

  it('a flush fan-out succeeds on every engine', async () => {
    const r = await fanout('flush_cache', {});
    expect(r.status, r.text).toBe(200);
    expect(r.json.succeeded).toBe(r.json.total);
    expect(r.json.total).toBeGreaterThanOrEqual(1);
    expect(r.json.failed).toEqual([]);
  });

  it('pause then continue, and a chat completion still has choices', async () => {
    for (const op of ['pause_generation', 'continue_generation']) {
      const r = await fanout(op, {});
      expect(r.status, `${op}: ${r.text}`).toBe(200);
    }
    const chat = await lane().t.http('POST', '/v1/chat/completions', {
      body: { model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 4 },
    });
    expect(chat.status, chat.text).toBe(200);
    expect(chat.json.choices.length).toBeGreaterThanOrEqual(1);
  });
}

describe('SMG e2e, SGLang lane: plain registration, default simulator', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--model', MODEL]);
    t = await startTestGateway();
    await t.register([sim.url]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  sharedBehaviour(() => ({ t, engine: 'sglang', mode: 'http' }));

  it('the row has a tp_size and the model_path label discovered from the engine', async () => {
    const w = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    expect(w.tp_size).toBe(1);
    expect(w.labels.model_path).toBe(MODEL);
    // GET /workers shows the same discovered label.
    const listed = (await t.http('GET', '/workers')).json.workers[0];
    expect(listed.labels.model_path).toBe(MODEL);
  });

  it("the engine's server_info through the proxy has a tp_size", async () => {
    const wid = (await t.http('GET', '/v1/rl/workers')).json.workers[0].id;
    const r = await t.http('GET', `/v1/rl/workers/${wid}/engine/server_info`);
    expect(r.status, r.text).toBe(200);
    expect(r.json.body.tp_size).not.toBeNull();
  });

  it("a disk refit from the row's model_path is what the next /generate reports", async () => {
    const w = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    const modelPath = w.labels.model_path ?? w.labels.model;
    expect(modelPath).toBeTruthy();
    const steps: Array<[string, unknown]> = [
      ['pause_generation', {}],
      ['update_weights_from_disk', { model_path: modelPath, weight_version: 'e2e-refit', flush_cache: true }],
      ['continue_generation', {}],
    ];
    for (const [op, body] of steps) {
      const r = await t.http('POST', `/v1/rl/engine/${op}?selector=engine%3Dsglang`, { body });
      expect(r.status, `${op}: ${r.text}`).toBe(200);
    }
    const gen = await t.http('POST', '/generate', { body: { model: MODEL, text: 'Hello', sampling_params: { max_new_tokens: 4 } } });
    expect(gen.status, gen.text).toBe(200);
    const first = Array.isArray(gen.json) ? gen.json[0] : gen.json;
    expect(first.meta_info.weight_version).toBe('e2e-refit');
    // The engine was handed back exactly the path the row advertised.
    const refit = (await sim.requests()).find((r) => r.path === '/update_weights_from_disk');
    expect(JSON.parse(refit!.body).model_path).toBe(MODEL);
  });
});

describe('SMG e2e, TokenSpeed lane: plain registration, default simulator', () => {
  let t: TestGateway;
  let sim: TokenspeedSimProcess;

  beforeAll(async () => {
    // The control app is the only flag: without it a TokenSpeed engine has no control endpoint.
    sim = await spawnTokenspeedSim(['--model', MODEL, '--rl-control-port', '0']);
    t = await startTestGateway();
    await t.register([sim.url]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  sharedBehaviour(() => ({ t, engine: 'tokenspeed', mode: 'grpc' }));

  it('the row shows tp_size 1 and the model label; capabilities advertise distributed refits only', async () => {
    const w = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    expect(w.tp_size).toBe(1);
    expect(w.labels.model_path ?? w.labels.model).toBe(MODEL);
    expect(w.capabilities.update_from).toEqual(['distributed']);
    expect(w.capabilities.source).toBe('label');
  });

  it("the engine's model_info through the proxy has a weight_version", async () => {
    const wid = (await t.http('GET', '/v1/rl/workers')).json.workers[0].id;
    const r = await t.http('GET', `/v1/rl/workers/${wid}/engine/model_info`);
    expect(r.status, r.text).toBe(200);
    expect(r.json.body).toHaveProperty('weight_version');
  });

  it('a disk refit is refused per worker (207, 501) and the engine keeps serving', async () => {
    const w = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    const modelPath = w.labels.model_path ?? w.labels.model;
    expect(modelPath).toBeTruthy();
    const sel = 'selector=engine%3Dtokenspeed';
    expect((await t.http('POST', `/v1/rl/engine/pause_generation?${sel}`, { body: {} })).status).toBe(200);
    const r = await t.http('POST', `/v1/rl/engine/update_weights_from_disk?${sel}`, {
      body: { model_path: modelPath, weight_version: 'e2e-refused', flush_cache: true },
    });
    expect(r.status, r.text).toBe(207);
    expect(r.json.succeeded).toBe(0);
    expect(r.json.failed).toHaveLength(1);
    const failure = r.json.failed[0];
    expect(failure.error).toBe('upstream_error');
    expect(failure.status).toBe(501);
    expect(r.json.results[failure.worker_id].body.message).toContain('distributed');
    expect((await t.http('POST', `/v1/rl/engine/continue_generation?${sel}`, { body: {} })).status).toBe(200);
    const chat = await t.http('POST', '/v1/chat/completions', {
      body: { model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 4 },
    });
    expect(chat.status, chat.text).toBe(200);
    expect(chat.json.choices.length).toBeGreaterThanOrEqual(1);
  });
});
