// slime-shaped /generate on TokenSpeed gRPC workers (fixture G): one JSON object for one prompt,
// SSE ending `data: [DONE]` when streamed, the engine-stamped `weight_version` beating the
// registration label, an explicit `model` accepted and never sent upstream, and a model-less
// request resolved on a one-worker fleet.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';

const MODEL = 'MODEL';
/** Both fixture-G TokenSpeed simulators stamp `v7` on every chunk and complete. */
const TS_ARGS = ['--model', MODEL, '--token-rate', '0', '--stamp-weight-version', 'v7', '--weight-version', 'live-3'];
const ADV_ARGS = [...TS_ARGS, '--rl-control-port', '0', '--rl-control-api-key', 'ts-secret', '--rl-update-from', 'distributed,mooncake'];
const BODY = { model: MODEL, input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };

/** Every `data:` event of an SSE body, parsed, and whether it ended with `[DONE]`. */
function sseEvents(text: string): { events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  const done = datas.at(-1) === '[DONE]';
  return { events: datas.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)), done };
}

async function generateRequests(sims: TokenspeedSimProcess[]): Promise<any[]> {
  const all = await Promise.all(sims.map((s) => s.rpcs()));
  return all
    .flat()
    .filter((r) => r.rpc === 'Generate')
    .map((r) => r.request);
}

describe('fixture G: /generate on TokenSpeed workers', () => {
  let t: TestGateway;
  let adv: TokenspeedSimProcess;
  let silent: TokenspeedSimProcess;
  let sg: SimProcess;
  let ids: string[];

  beforeAll(async () => {
    [adv, silent, sg] = await Promise.all([spawnTokenspeedSim(ADV_ARGS), spawnTokenspeedSim(TS_ARGS), spawnSglangSim(['--token-rate', '0', '--model', MODEL])]);
    t = await startTestGateway();
    ids = await t.register([
      { url: adv.url, runtime_type: 'tokenspeed', api_key: 'ts-secret', labels: { weight_version: 'registered' } },
      { url: silent.url, runtime_type: 'tokenspeed', labels: { weight_version: 'registered' } },
      sg.url,
    ]);
    // Lines 39/40 are about the TokenSpeed path: the SGLang engine is taken out of routing with a
    // gateway-local state write (no engine call), so every request lands on a gRPC worker.
    const off = await t.http('POST', `/v1/rl/workers/${ids[2]}/state`, { body: { control: 'paused' } });
    expect(off.status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([adv?.stop(), silent?.stop(), sg?.stop()]);
  });

  it('the rows keep the label `registered` while the engines stamp v7 (the precondition of what follows)', async () => {
    for (const id of ids.slice(0, 2)) {
      const row = (await t.http('GET', `/v1/rl/workers/${id}`)).json;
      expect(row).toMatchObject({ engine: 'tokenspeed', connection_mode: 'grpc', model_id: MODEL, weight_version: 'registered' });
    }
  });

  it('buffered, with an explicit model → 200, one object, meta_info.weight_version "v7"', async () => {
    await adv.clearRecords();
    await silent.clearRecords();
    const seen = new Set<string>();
    // Four requests reach both TokenSpeed workers (round-robin among eligible engines).
    for (let i = 0; i < 4; i++) {
      const r = await t.http('POST', '/generate', { body: { ...BODY, stream: false } });
      expect(r.status).toBe(200);
      expect(String(r.headers['content-type'])).toContain('application/json');
      expect(Array.isArray(r.json)).toBe(false);
      expect(typeof r.json).toBe('object');
      expect(r.json.meta_info.weight_version).toBe('v7');
      expect(r.json.output_ids).toHaveLength(3);
      expect(typeof r.json.text).toBe('string');
      expect(r.json.meta_info.completion_tokens).toBe(3);
      expect(r.json.meta_info.prompt_tokens).toBe(3);
      expect(r.json.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
      expect(typeof r.json.meta_info.id).toBe('string');
      seen.add(String(r.headers['x-smg-routed-worker-id']));
    }
    expect([...seen].sort()).toEqual([adv.url, silent.url].sort());
    // The model names the route, never the engine request: nothing upstream carries it.
    const sent = await generateRequests([adv, silent]);
    expect(sent).toHaveLength(4);
    for (const req of sent) {
      expect(JSON.stringify(req)).not.toContain(MODEL);
      expect(req.tokenized.input_ids).toEqual([1, 2, 3]);
      expect(req.sampling_params.max_new_tokens).toBe(3);
    }
  });

  it('streamed → 200 text/event-stream, events carry "weight_version":"v7", ending data: [DONE]', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await t.http('POST', '/generate', { body: { ...BODY, stream: true } });
      expect(r.status).toBe(200);
      expect(String(r.headers['content-type'])).toContain('text/event-stream');
      expect(r.text).toContain('"weight_version":"v7"');
      expect(r.text).not.toContain('"weight_version":"registered"');
      expect(r.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      const { events, done } = sseEvents(r.text);
      expect(done).toBe(true);
      expect(events.length).toBeGreaterThanOrEqual(1);
      for (const e of events) {
        expect(Array.isArray(e)).toBe(false);
        expect(e.meta_info.weight_version).toBe('v7');
      }
      const last = events.at(-1);
      expect(last.output_ids).toHaveLength(3);
      expect(last.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
    }
  });

  it('the version is the one on the wire: neither the label nor the engine live version shows', async () => {
    // The live version (`live-3`) is what a live stamp would carry; v7 proves the fixed stamp is
    // copied from the wire, and `registered` (the label) is only the fallback.
    const r = await t.http('POST', '/generate', { body: { input_ids: [5, 6], sampling_params: { max_new_tokens: 2 } } });
    expect(r.status).toBe(200);
    expect(r.json.meta_info.weight_version).toBe('v7');
    expect(await adv.state()).toMatchObject({ weightVersion: 'live-3', stamp: 'v7' });
  });
});

describe('fixture G with one tagged TokenSpeed worker: model-less /generate', () => {
  let t: TestGateway;
  let ts: TokenspeedSimProcess;

  beforeAll(async () => {
    ts = await spawnTokenspeedSim(ADV_ARGS);
    t = await startTestGateway();
    await t.register([{ url: ts.url, runtime_type: 'tokenspeed', api_key: 'ts-secret', labels: { weight_version: 'registered' } }]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await ts?.stop();
  });

  it('no model → 200 object with meta_info.weight_version "v7"', async () => {
    const workers = (await t.http('GET', '/workers')).json.workers;
    expect(workers.map((w: { model_id: string }) => w.model_id)).toEqual([MODEL]);
    const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } } });
    expect(r.status).toBe(200);
    expect(Array.isArray(r.json)).toBe(false);
    expect(r.json.meta_info.weight_version).toBe('v7');
    expect(r.json.output_ids).toHaveLength(3);
    expect(r.headers['x-smg-routed-worker-id']).toBe(ts.url);
  });

  it('an explicit model the single worker serves is accepted as well, buffered and streamed', async () => {
    const b = await t.http('POST', '/generate', { body: BODY });
    expect(b.status).toBe(200);
    expect(b.json.meta_info.weight_version).toBe('v7');
    const s = await t.http('POST', '/generate', { body: { ...BODY, stream: true } });
    expect(s.status).toBe(200);
    expect(sseEvents(s.text).done).toBe(true);
  });
});
