// The SGLang simulator's tokenizer routes (`/v1/tokenize`, `/v1/detokenize` and their bare
// aliases, SGLang's shapes over the byte tokenizer) and the engine routes slime calls directly:
// `/weights_checker` (snapshot, reset_tensors, compare), `/post_process_weights`, `/pull_weights`,
// `/start_profile`, `/stop_profile`, over real HTTP in a child process.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOS_TOKEN_ID, EOS_TOKEN_ID, encode } from '../../sim/core/tokens.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { call, get, post } from './sglang-http.ts';

describe('tokenize and detokenize', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--model', 'MODEL', '--context-length', '4096']);
  });
  afterAll(() => sim?.stop());

  it('/v1/tokenize and /tokenize: {tokens, count, max_model_len}, special tokens added unless asked not to', async () => {
    for (const path of ['/v1/tokenize', '/tokenize']) {
      const r = await post(sim.url, path, { model: 'MODEL', prompt: 'hé!' });
      expect(r.status, r.text).toBe(200);
      expect(r.json).toEqual({ tokens: [BOS_TOKEN_ID, ...encode('hé!')], count: 5, max_model_len: 4096 });
    }
    const plain = await post(sim.url, '/v1/tokenize', { prompt: 'hé!', add_special_tokens: false });
    expect(plain.json).toEqual({ tokens: encode('hé!'), count: 4, max_model_len: 4096 });
    const batch = await post(sim.url, '/v1/tokenize', { prompt: ['a', 'bc'], add_special_tokens: false });
    expect(batch.json).toEqual({ tokens: [encode('a'), encode('bc')], count: [1, 2], max_model_len: 4096 });
  });

  it('/v1/detokenize and /detokenize: {text}; a batch is a list; special tokens skipped unless asked', async () => {
    const ids = [BOS_TOKEN_ID, ...encode('hé!'), EOS_TOKEN_ID];
    for (const path of ['/v1/detokenize', '/detokenize']) expect((await post(sim.url, path, { model: 'MODEL', tokens: ids })).json).toEqual({ text: 'hé!' });
    expect((await post(sim.url, '/v1/detokenize', { tokens: ids, skip_special_tokens: false })).json).toEqual({ text: '<s>hé!</s>' });
    expect((await post(sim.url, '/v1/detokenize', { tokens: [encode('a'), encode('bc')] })).json).toEqual({ text: ['a', 'bc'] });
    expect((await post(sim.url, '/v1/detokenize', { tokens: [] })).json).toEqual({ text: '' });
  });

  it('bad input is 400 ErrorResponse: no prompt, wrong types, a body that is not application/json', async () => {
    for (const [path, body] of [
      ['/v1/tokenize', {}],
      ['/v1/tokenize', { prompt: 5 }],
      ['/v1/tokenize', { prompt: 'a', add_special_tokens: 'no' }],
      ['/v1/detokenize', {}],
      ['/v1/detokenize', { tokens: ['a'] }],
    ] as const) {
      const r = await post(sim.url, path, body);
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(r.json).toMatchObject({ object: 'error', code: 400 });
    }
    const text = await post(sim.url, '/v1/tokenize', JSON.stringify({ prompt: 'a' }), { 'content-type': 'text/plain' });
    expect(text.status).toBe(400);
    expect(text.json.message).toContain('application/json');
    expect((await get(sim.url, '/v1/tokenize')).status).toBe(405);
  });
});

describe('weights_checker, post_process_weights, pull_weights, start_profile, stop_profile', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--model', 'MODEL']);
  });
  afterAll(() => sim?.stop());

  const check = (action: string) => post(sim.url, '/weights_checker', { action });

  it('weights_checker: compare holds against a snapshot, fails after reset_tensors until weights load again, and names what changed', async () => {
    const early = await check('compare');
    expect(early.status).toBe(400);
    expect(early.json).toMatchObject({ success: false, message: expect.stringContaining('snapshot') });
    expect(await check('snapshot')).toMatchObject({ status: 200, json: { success: true } });
    expect(await check('compare')).toMatchObject({ status: 200, json: { success: true } });
    expect(await check('reset_tensors')).toMatchObject({ status: 200, json: { success: true } });
    const noisy = await check('compare');
    expect(noisy).toMatchObject({ status: 400, json: { success: false } });
    expect(noisy.json.message).toContain('reset');
    // The same weights loaded again: they match the snapshot.
    expect((await post(sim.url, '/update_weights_from_disk', { model_path: 'MODEL' })).status).toBe(200);
    expect(await check('compare')).toMatchObject({ status: 200, json: { success: true } });
    // Other weights: the difference is named.
    expect((await post(sim.url, '/update_weights_from_disk', { model_path: 'OTHER' })).status).toBe(200);
    const other = await check('compare');
    expect(other).toMatchObject({ status: 400, json: { success: false } });
    expect(other.json.message).toContain('<model_path>');
    // A snapshot of reset weights holds their noise: it matches until weights load again.
    expect((await check('reset_tensors')).status).toBe(200);
    expect((await check('snapshot')).status).toBe(200);
    expect(await check('compare')).toMatchObject({ status: 200, json: { success: true } });
    expect((await post(sim.url, '/update_weights_from_disk', { model_path: 'OTHER' })).status).toBe(200);
    const reloaded = await check('compare');
    expect(reloaded).toMatchObject({ status: 400, json: { success: false } });
    expect(reloaded.json.message).toContain('<reset_tensors>');
    const sum = await check('checksum');
    expect(sum).toMatchObject({ status: 200, json: { success: true, message: expect.stringMatching(/^checksum [0-9a-f]{64} /) } });
  });

  it('weights_checker: an unknown action is 400 success false; a body is required; POST only', async () => {
    expect(await check('nope')).toMatchObject({ status: 400, json: { success: false, message: 'Unsupported action="nope"' } });
    expect((await call(sim.url, 'POST', '/weights_checker')).status).toBe(400);
    expect((await post(sim.url, '/weights_checker', { action: 3 })).json).toMatchObject({ success: false, code: 400 });
    expect((await get(sim.url, '/weights_checker')).status).toBe(405);
  });

  it('post_process_weights and pull_weights answer {success, message}; a missing or mistyped field is 400', async () => {
    expect(await post(sim.url, '/post_process_weights', { restore_weights_before_load: false, post_process_quantization: true })).toMatchObject({
      status: 200,
      json: { success: true, message: 'Success.' },
    });
    expect(await post(sim.url, '/post_process_weights', { post_process_quantization: 'yes' })).toMatchObject({ status: 400, json: { success: false } });
    const pull = { local_checkpoint_dir: '/local/ckpt', source_dir: '/shared/weights', target_version: 3 };
    expect(await post(sim.url, '/pull_weights', pull)).toMatchObject({ status: 200, json: { success: true, message: 'Success.' } });
    for (const key of Object.keys(pull)) {
      const { [key as keyof typeof pull]: _, ...rest } = pull;
      const r = await post(sim.url, '/pull_weights', rest);
      expect(r.status, key).toBe(400);
      expect(r.json.message).toContain(key);
    }
    expect((await post(sim.url, '/pull_weights', { ...pull, target_version: '3' })).status).toBe(400);
  });

  it('start_profile and stop_profile: plain text without a content-type, GET or POST; a mistyped field is 400', async () => {
    const start = await post(sim.url, '/start_profile', { output_dir: null, start_step: null, num_steps: 5, activities: ['CPU'], profile_by_stage: false });
    expect(start.status).toBe(200);
    expect(start.text).toBe('Start profiling.\n');
    expect(start.headers.get('content-type')).toBeNull();
    expect((await get(sim.url, '/start_profile')).text).toBe('Start profiling.\n');
    expect((await post(sim.url, '/start_profile', { num_steps: 'five' })).status).toBe(400);
    const stop = await post(sim.url, '/stop_profile', {});
    expect(stop.status).toBe(200);
    expect(stop.text).toBe('Stop profiling. This will take some time.\n');
    expect(stop.headers.get('content-type')).toBeNull();
  });

  it('every call is in the request record', async () => {
    const paths = new Set((await sim.requests()).map((r) => r.path));
    for (const p of ['/weights_checker', '/post_process_weights', '/pull_weights', '/start_profile', '/stop_profile']) expect(paths.has(p), p).toBe(true);
  });
});
