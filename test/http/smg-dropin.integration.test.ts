// Drop-in gaps found by running upstream clients against rlgate, each against a real gateway and
// real simulators: sgl-router 0.2.x's `DELETE /workers/{url-encoded url}` (as slime written for
// it removes an engine); prefill/decode (PD) workers refused at registration with the reason
// (slime registers `{url, worker_type, bootstrap_port}`); SMG's `/v1/tokenize` and
// `/v1/detokenize` in SMG's shapes, through an SGLang engine's own routes or the worker's
// tokenizer; SMG's `/health_generate` probe; and the engine routes slime calls directly
// (`/weights_checker`, `/post_process_weights`, `/pull_weights`, `/start_profile`,
// `/stop_profile`) reaching the SGLang simulator through the `/v1/rl` pass-through. Judged on the
// registry and on what the engines were asked.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { startTokenEngines, type TokenEngines } from '../fixtures/token-fleet.ts';
import { BOS_TOKEN_ID, EOS_TOKEN_ID, encode as refEncode } from '../../sim/core/tokens.ts';
import { tokenizerFiles } from '../../sim/tokenspeed/tokenizer.ts';

const ADMIN = { authorization: 'Bearer adm' };

describe('registration with an admin key: removal by URL, PD workers refused', () => {
  let t: TestGateway;
  let sg: SimProcess;
  let pd: SimProcess;

  beforeAll(async () => {
    [sg, pd] = await Promise.all([spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']), spawnSglangSim(['--model', 'PD', '--token-rate', '0'])]);
    t = await startTestGateway({ adminKey: 'adm' });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([sg?.stop(), pd?.stop()]);
  });

  const listed = async () => (await t.http('GET', '/workers')).json.workers.map((w: { url: string }) => w.url);

  it('DELETE /workers/{url percent-encoded} (sgl-router 0.2.x) removes it as DELETE /workers/{id} does', async () => {
    const [id] = await t.register([sg.url]);
    const path = `/workers/${encodeURIComponent(sg.url)}`;
    // The same admin rule as the id route.
    expect(await t.http('DELETE', path)).toMatchObject({ status: 401, json: { error: 'unauthorized' } });
    expect(await listed()).toEqual([sg.url]);
    const r = await t.http('DELETE', path, { headers: ADMIN });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toEqual({ id, url: sg.url, status: 'removed' });
    expect(await listed()).toEqual([]);
    expect((await t.http('GET', '/v1/rl/workers', { headers: ADMIN })).json.workers).toEqual([]);
    // Gone, or never registered: the id route's 404.
    const again = await t.http('DELETE', path, { headers: ADMIN });
    expect(again.status).toBe(404);
    expect(again.json).toMatchObject({ error: 'worker_not_found', id: sg.url });
    const never = await t.http('DELETE', `/workers/${encodeURIComponent('http://127.0.0.1:1')}`, { headers: ADMIN });
    expect(never).toMatchObject({ status: 404, json: { error: 'worker_not_found' } });
    // The id form still works.
    const [id2] = await t.register([sg.url]);
    expect(await t.http('DELETE', `/workers/${id2}`, { headers: ADMIN })).toMatchObject({ status: 200, json: { id: id2, status: 'removed' } });
  });

  it("slime's PD registrations are 400 invalid_request naming the worker and the reason; nothing registered, the engine never asked", async () => {
    await pd.clearRequests();
    const bodies = [
      { url: pd.url, worker_type: 'prefill', bootstrap_port: 8998 },
      { url: pd.url, worker_type: 'decode' },
      { url: pd.url, worker_type: 'Prefill' },
      { url: pd.url, worker_type: 'encode' },
    ];
    for (const body of bodies) {
      const r = await t.http('POST', '/workers', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json).toMatchObject({ error: 'invalid_request', field: 'worker_type', url: pd.url, worker_type: body.worker_type });
      expect(r.json.message).toContain(`worker \`${pd.url}\``);
      expect(r.json.message).toContain('PD disaggregated routing is not supported yet');
    }
    expect((await t.http('POST', '/workers', { body: bodies[0] })).json.message).toContain('bootstrap_port 8998');
    // A bootstrap port is a prefill worker's, whatever the type says.
    const port = await t.http('POST', '/workers', { body: { url: pd.url, bootstrap_port: 8998 } });
    expect(port).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'bootstrap_port', url: pd.url } });
    // A type SMG does not know is refused too, never routed as regular.
    const odd = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'gpu' } });
    expect(odd).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type' } });
    expect(await listed()).toEqual([]);
    expect(await pd.requests()).toEqual([]);
  });

  it('a registered worker cannot become prefill or decode: re-registration and PUT/PATCH are refused and change nothing', async () => {
    const [id] = await t.register([{ url: pd.url, worker_type: 'regular' }]);
    // Without the admin bearer a re-registration of a known URL only re-runs discovery (202): a PD
    // one is refused before that.
    const again = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'decode' } });
    expect(again).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type' } });
    const withKey = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'prefill', bootstrap_port: 1 }, headers: ADMIN });
    expect(withKey.status).toBe(400);
    for (const method of ['PUT', 'PATCH']) {
      const r = await t.http(method, `/workers/${id}`, { body: { worker_type: 'decode' }, headers: ADMIN });
      expect(r).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type', url: pd.url } });
    }
    const row = (await t.http('GET', `/workers/${id}`)).json;
    expect(row.worker_type).toBe('regular');
    expect((await t.http('GET', '/workers')).json.stats).toEqual({ prefill_count: 0, decode_count: 0, regular_count: 1 });
    // Routed as before.
    const g = await t.http('POST', '/generate', { body: { input_ids: [1, 2], sampling_params: { max_new_tokens: 2 } } });
    expect(g.status).toBe(200);
    expect(g.headers['x-smg-routed-worker-id']).toBe(pd.url);
  });
});

/** The simulators' tokenizer files as a tokenizer directory (what `--tokenizer-path` names). */
function writeTokenizerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rlgate-dropin-tokenizer-'));
  for (const f of tokenizerFiles({ modelName: 'TOK', contextLength: 4096 })) writeFileSync(join(dir, f.name), f.content);
  return dir;
}

const TEXT = 'hé!';
const IDS = refEncode(TEXT);

describe("SMG's /v1/tokenize and /v1/detokenize", () => {
  let engines: TokenEngines;
  let sg: SimProcess;
  /** No --tokenizer-path. */
  let t: TestGateway;
  /** --tokenizer-path. */
  let tp: TestGateway;
  let dir: string;
  let sgId: string;

  beforeAll(async () => {
    dir = writeTokenizerDir();
    engines = await startTokenEngines({
      sglang: ['--model', 'MODEL', '--token-rate', '0', '--context-length', '2048'],
      tokenspeed: [['--model', 'TSM', '--token-rate', '0']],
      zmq: { model: 'ZQ' },
    });
    sg = engines.sg!;
    [t, tp] = await Promise.all([startTestGateway(), startTestGateway({ tokenizerPath: dir })]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([t?.close(), tp?.close()]);
    await engines?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const tokenizeCalls = async () => (await sg.requests()).filter((r) => r.path === '/v1/tokenize' || r.path === '/v1/detokenize');

  it('an empty fleet is a retryable 503', async () => {
    expect(await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } })).toMatchObject({
      status: 404,
      json: { error: 'model_not_found' },
    });
    expect(await t.http('POST', '/v1/tokenize', { body: { prompt: TEXT } })).toMatchObject({
      status: 503,
      json: { error: 'no_available_workers', retryable: true },
    });
    const r = engines.registration;
    [sgId] = await t.register([r.sg!, ...r.ts, r.zmq!]);
    await tp.register([r.sg!, ...r.ts, r.zmq!]);
  });

  it("an SGLang engine tokenizes itself: SMG's {tokens, count, char_count}, with SGLang's max_model_len", async () => {
    await sg.clearRequests();
    const r = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } });
    expect(r.status, r.text).toBe(200);
    // SMG tokenizes without special tokens: no BOS. char_count counts code points (é is one).
    expect(r.json).toEqual({ tokens: IDS, count: IDS.length, char_count: 3, max_model_len: 2048 });
    expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    const [seen] = await tokenizeCalls();
    expect(JSON.parse(seen!.body)).toEqual({ model: 'MODEL', prompt: TEXT, add_special_tokens: false });

    const special = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT, add_special_tokens: true } });
    expect(special.json.tokens).toEqual([BOS_TOKEN_ID, ...IDS]);
    const batch = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: ['a', TEXT] } });
    expect(batch.json).toEqual({ tokens: [refEncode('a'), IDS], count: [1, IDS.length], char_count: [1, 3], max_model_len: 2048 });
  });

  it('an SGLang engine detokenizes itself: {text}; a batch is a list; skip_special_tokens passed on', async () => {
    await sg.clearRequests();
    const ids = [BOS_TOKEN_ID, ...IDS, EOS_TOKEN_ID];
    expect((await t.http('POST', '/v1/detokenize', { body: { model: 'MODEL', tokens: ids } })).json).toEqual({ text: TEXT });
    expect((await t.http('POST', '/v1/detokenize', { body: { model: 'MODEL', tokens: ids, skip_special_tokens: false } })).json).toEqual({
      text: `<s>${TEXT}</s>`,
    });
    expect((await t.http('POST', '/v1/detokenize', { body: { model: 'MODEL', tokens: [refEncode('a'), IDS] } })).json).toEqual({ text: ['a', TEXT] });
    const bodies = (await tokenizeCalls()).map((c) => JSON.parse(c.body));
    expect(bodies.map((b) => b.skip_special_tokens)).toEqual([true, false, true]);
  });

  it("a TokenSpeed engine's own tokenizer (GetTokenizer) answers; no generation runs", async () => {
    const ts = engines.ts[0]!;
    await ts.clearRecords();
    const r = await t.http('POST', '/v1/tokenize', { body: { model: 'TSM', prompt: [TEXT, 'bc'] } });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toMatchObject({ tokens: [IDS, refEncode('bc')], count: [IDS.length, 2], char_count: [3, 2] });
    expect(r.json.max_model_len).toBeGreaterThan(0);
    expect(r.headers['x-smg-routed-worker-id']).toBe(ts.url);
    const d = await t.http('POST', '/v1/detokenize', { body: { model: 'TSM', tokens: [BOS_TOKEN_ID, ...IDS], skip_special_tokens: false } });
    expect(d.json).toEqual({ text: `<s>${TEXT}` });
    expect((await ts.rpcs()).filter((c) => c.rpc === 'Generate')).toEqual([]);
  });

  it('no tokenizer: 400 tokenizer_not_found naming the worker and the fix; --tokenizer-path serves it', async () => {
    const zmqUrl = engines.registration.zmq!.url as string;
    const r = await t.http('POST', '/v1/tokenize', { body: { model: 'ZQ', prompt: TEXT } });
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ error: 'tokenizer_not_found', model: 'ZQ' });
    expect(r.json.message).toContain(zmqUrl);
    expect(r.json.message).toContain('--tokenizer-path');
    const d = await t.http('POST', '/v1/detokenize', { body: { model: 'ZQ', tokens: IDS } });
    expect(d).toMatchObject({ status: 400, json: { error: 'tokenizer_not_found' } });

    const ok = await tp.http('POST', '/v1/tokenize', { body: { model: 'ZQ', prompt: TEXT } });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json).toMatchObject({ tokens: IDS, count: IDS.length, char_count: 3 });
    expect((await tp.http('POST', '/v1/detokenize', { body: { model: 'ZQ', tokens: IDS } })).json).toEqual({ text: TEXT });
  });

  it('an SGLang build without the routes (404): the gateway tokenizer, else 400 tokenizer_not_found', async () => {
    await sg.setFaults([
      { route: 'v1/tokenize', status: 404, body: { detail: 'Not Found' } },
      { route: 'v1/detokenize', status: 404, body: { detail: 'Not Found' } },
    ]);
    try {
      const r = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } });
      expect(r).toMatchObject({ status: 400, json: { error: 'tokenizer_not_found' } });
      expect(r.json.message).toContain(`${sg.url} has no /v1/tokenize (it answered 404)`);
      const ok = await tp.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } });
      expect(ok.status, ok.text).toBe(200);
      // The worker's context length (the engine's), not the tokenizer directory's.
      expect(ok.json).toEqual({ tokens: IDS, count: IDS.length, char_count: 3, max_model_len: 2048 });
      expect((await tp.http('POST', '/v1/detokenize', { body: { model: 'MODEL', tokens: IDS } })).json).toEqual({ text: TEXT });
    } finally {
      await sg.clearFaults();
    }
  });

  it("the engine's own refusal comes back as it wrote it", async () => {
    await sg.setFaults({ route: 'v1/tokenize', status: 500, body: { object: 'error', message: 'tokenizer crashed', code: 500 } });
    try {
      const r = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } });
      expect(r.status).toBe(500);
      expect(r.json).toEqual({ object: 'error', message: 'tokenizer crashed', code: 500 });
      expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    } finally {
      await sg.clearFaults();
    }
  });

  it('bad input is a 400 naming the field (a 415 for a body that is not JSON), and reaches no engine', async () => {
    await sg.clearRequests();
    for (const [path, body, field] of [
      ['/v1/tokenize', { model: 'MODEL' }, '/prompt'],
      ['/v1/tokenize', { model: 'MODEL', prompt: 5 }, '/prompt'],
      ['/v1/tokenize', { model: 'MODEL', prompt: 'a', add_special_tokens: 'yes' }, '/add_special_tokens'],
      ['/v1/detokenize', { model: 'MODEL', tokens: [-1] }, '/tokens'],
      ['/v1/detokenize', { model: 'MODEL', tokens: 'abc' }, '/tokens'],
      ['/v1/detokenize', { model: 'MODEL', tokens: [1], skip_special_tokens: 1 }, '/skip_special_tokens'],
    ] as const) {
      const r = await t.http('POST', path, { body });
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(r.json).toMatchObject({ error: 'invalid_request' });
      expect(r.json.field.startsWith(field), r.json.field).toBe(true);
    }
    expect((await t.http('POST', '/v1/tokenize', { raw: '[1]', headers: { 'content-type': 'application/json' } })).json.error).toBe('invalid_request');
    expect((await t.http('POST', '/v1/tokenize', { raw: 'prompt=a', headers: { 'content-type': 'text/plain' } })).status).toBe(415);
    expect(await t.http('POST', '/v1/tokenize', { body: { model: 'nope', prompt: 'a' } })).toMatchObject({ status: 404, json: { error: 'model_not_found' } });
    expect(await tokenizeCalls()).toEqual([]);
  });

  it('a paused engine still tokenizes (no generation is involved); /generate waits for it', async () => {
    expect((await t.http('POST', `/v1/rl/workers/${sgId}/engine/pause_generation`, { body: {} })).status).toBe(200);
    try {
      expect((await t.http('POST', '/generate', { body: { model: 'MODEL', input_ids: [5], sampling_params: { max_new_tokens: 1 } } })).status).toBe(503);
      const r = await t.http('POST', '/v1/tokenize', { body: { model: 'MODEL', prompt: TEXT } });
      expect(r.status, r.text).toBe(200);
      expect(r.json.tokens).toEqual(IDS);
    } finally {
      expect((await t.http('POST', `/v1/rl/workers/${sgId}/engine/continue_generation`, { body: {} })).status).toBe(200);
    }
  });
});

describe("SMG's /health_generate probe", () => {
  let engines: TokenEngines;
  let sg: SimProcess;
  let t: TestGateway;

  beforeAll(async () => {
    engines = await startTokenEngines({ sglang: ['--model', 'MODEL', '--token-rate', '0'], tokenspeed: [['--model', 'TSM', '--token-rate', '0']] });
    sg = engines.sg!;
    t = await startTestGateway();
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await engines?.close();
  });

  const probes = async () => (await sg.requests()).filter((r) => r.path === '/health_generate' && r.method === 'GET');

  it('no routable worker: 503 no_available_workers', async () => {
    expect(await t.http('GET', '/health_generate')).toMatchObject({ status: 503, json: { error: 'no_available_workers', retryable: true } });
  });

  it('a token engine alone: its generating health check (gRPC HealthCheck), 200 with no body', async () => {
    const ts = engines.ts[0]!;
    const [tsId] = await t.register(engines.registration.ts);
    await ts.clearRecords();
    const r = await t.http('GET', '/health_generate');
    expect(r.status).toBe(200);
    expect(r.text).toBe('');
    expect(r.headers['x-smg-routed-worker-id']).toBe(ts.url);
    expect((await ts.rpcs()).filter((c) => c.rpc === 'HealthCheck').length).toBeGreaterThanOrEqual(1);
    // Paused: not routable, so not asked.
    expect((await t.http('POST', `/v1/rl/workers/${tsId}/state`, { body: { control: 'paused' } })).status).toBeLessThan(300);
    expect(await t.http('GET', '/health_generate')).toMatchObject({ status: 503, json: { error: 'no_available_workers' } });
    expect((await t.http('POST', `/v1/rl/workers/${tsId}/state`, { body: { control: 'active' } })).status).toBeLessThan(300);
  });

  it("an SGLang engine's own /health_generate, preferred over token engines; its status and empty body passed back", async () => {
    await t.register([sg.url], { ready: 2 });
    await sg.clearRequests();
    const r = await t.http('GET', '/health_generate');
    expect(r.status).toBe(200);
    expect(r.text).toBe('');
    expect(r.headers['x-smg-routed-worker-id']).toBe(sg.url);
    expect(await probes()).toHaveLength(1);
    await sg.setFaults({ route: 'health_generate', status: 503, body: '' });
    try {
      const down = await t.http('GET', '/health_generate');
      expect(down.status).toBe(503);
      expect(down.text).toBe('');
      expect(down.headers['x-smg-routed-worker-id']).toBe(sg.url);
    } finally {
      await sg.clearFaults();
    }
  });
});

describe('the engine routes slime calls directly, through the /v1/rl pass-through to the SGLang simulator', () => {
  let sg: SimProcess;
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    sg = await spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']);
    t = await startTestGateway();
    [id] = await t.register([sg.url]);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sg?.stop();
  });

  const engine = (path: string, body: unknown) => t.http('POST', `/v1/rl/workers/${id}/engine/${path}`, { body });

  it("weights_checker: SGLang's {success, message}, 200 while the weights match the snapshot, 400 once they do not", async () => {
    expect(await engine('weights_checker', { action: 'snapshot' })).toMatchObject({ status: 200, json: { status: 200, body: { success: true } } });
    expect(await engine('weights_checker', { action: 'compare' })).toMatchObject({ status: 200, json: { body: { success: true } } });
    expect(await engine('weights_checker', { action: 'reset_tensors' })).toMatchObject({ status: 200, json: { body: { success: true } } });
    const bad = await engine('weights_checker', { action: 'compare' });
    expect(bad.json).toMatchObject({ status: 400, body: { success: false } });
    // Fan-out form too: every engine's answer.
    const fan = await t.http('POST', '/v1/rl/engine/weights_checker?selector=engine%3Dsglang', { body: { action: 'snapshot' } });
    expect(fan.status).toBe(200);
    expect(await engine('weights_checker', { action: 'compare' })).toMatchObject({ json: { status: 200, body: { success: true } } });
  });

  it('post_process_weights, pull_weights: {success, message}; start_profile, stop_profile: their texts', async () => {
    expect((await engine('post_process_weights', { restore_weights_before_load: false, post_process_quantization: false })).json).toMatchObject({
      status: 200,
      body: { success: true },
    });
    expect((await engine('pull_weights', { local_checkpoint_dir: '/l', source_dir: '/s', target_version: 1 })).json).toMatchObject({
      status: 200,
      body: { success: true },
    });
    expect((await engine('pull_weights', { source_dir: '/s', target_version: 1 })).json).toMatchObject({ status: 400, body: { success: false } });
    expect((await engine('start_profile', { num_steps: 3 })).json).toMatchObject({ status: 200, body: 'Start profiling.\n' });
    expect((await engine('stop_profile', {})).json).toMatchObject({ status: 200, body: 'Stop profiling. This will take some time.\n' });
    const seen = (await sg.requests()).map((r) => r.path);
    for (const p of ['/weights_checker', '/post_process_weights', '/pull_weights', '/start_profile', '/stop_profile']) expect(seen, p).toContain(p);
  });
});
