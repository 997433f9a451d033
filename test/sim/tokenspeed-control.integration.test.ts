// The TokenSpeed simulator's HTTP RL control app over real HTTP and gRPC, in child processes:
// bearer auth, the request record, pause modes (wait drains, abort ends streams, keep freezes,
// bodyless POST = {}), abort_request, flush, sleep/wake, facts routes, 501 for disk/tensor
// naming the supported sources, and a distributed refit over the broadcast group.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openGroup } from '../../sim/broadcast/master.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { call, get, post, track, until } from './sglang-http.ts';
import { collect, grpcStatus, open, schedulerClient, unary, type Client } from './tokenspeed-grpc.ts';

const KEY = 'ts-secret';
const auth = { authorization: `Bearer ${KEY}` };
const slow = (rid: string, max = 100_000) => ({
  request_id: rid,
  tokenized: { input_ids: [7, 8, 9] },
  sampling_params: { max_new_tokens: max },
  stream: true,
});

describe('control app', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  let ctl: string;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim([
      '--rl-control-port',
      '0',
      '--rl-control-api-key',
      KEY,
      '--token-rate',
      '200',
      '--attn-tp-size',
      '2',
      '--rl-update-from',
      'mooncake,distributed',
      '--weight-version',
      'v0',
      '--model',
      'MODEL',
    ]);
    c = schedulerClient(sim.address);
    ctl = sim.controlUrl!;
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });
  // A failed test must not leave the engine paused for the next one.
  afterEach(async () => {
    await sim.startControlApp();
    await post(ctl, '/continue_generation', {}, auth);
  });

  it('answers 401 {"success":false,"message":"unauthorized"} without the right bearer, on every route', async () => {
    for (const [method, path, headers] of [
      ['POST', '/pause_generation', {}],
      ['GET', '/model_info', { authorization: 'Bearer wrong' }],
      ['GET', '/nope', {}],
      ['POST', '/flush_cache', { authorization: KEY }],
    ] as const) {
      const r = await call(ctl, method, path, method === 'POST' ? {} : undefined, headers);
      expect(r.status).toBe(401);
      expect(r.text).toBe('{"success":false,"message":"unauthorized"}');
    }
    expect((await sim.state()).paused).toBeNull();
    expect((await get(ctl, '/nope', auth)).status).toBe(404);
  });

  it('records every control request with method, path, query, headers and body', async () => {
    await sim.clearRecords();
    await post(ctl, '/pause_generation?x=1', { mode: 'keep' }, auth);
    await post(ctl, '/continue_generation', undefined, auth);
    const recs = await sim.requests();
    expect(recs.map((r) => [r.method, r.path, r.query, r.body])).toEqual([
      ['POST', '/pause_generation', 'x=1', '{"mode":"keep"}'],
      ['POST', '/continue_generation', '', ''],
    ]);
    expect(recs[0].headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it('pauses in mode wait by default (bodyless POST = {}): in-flight requests drain, new ones are held', async () => {
    const running = open(c, 'Generate', slow('w1', 60));
    await running.first;
    const r = await post(ctl, '/pause_generation', undefined, auth);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ success: true, message: 'Paused generation.', mode: 'wait' });
    // The answer came after the drain: nothing runs or waits, and the stream ended normally.
    const s = await sim.state();
    expect([s.running, s.waiting, s.paused]).toEqual([0, 0, 'wait']);
    const done = await running.result;
    expect(done.error).toBeNull();
    expect(done.messages[done.messages.length - 1].complete.completion_tokens).toBe(60);
    expect((await get(ctl, '/is_paused', auth)).json).toEqual({ is_paused: true });
    expect((await unary(c, 'GetServerInfo')).value.is_paused).toBe(true);

    const held = track(collect(c, 'Generate', { ...slow('w2', 3), stream: false }));
    await until(async () => (await sim.state()).held === 1, 'the new request to be held');
    expect(held.settled()).toBe(false);
    const cont = await post(ctl, '/continue_generation', undefined, auth);
    expect(cont.json).toEqual({ success: true, message: 'Continued generation.' });
    expect((await held.promise).messages[0].complete.completion_tokens).toBe(3);
    expect((await get(ctl, '/is_paused', auth)).json).toEqual({ is_paused: false });
  });

  it('pause mode keep freezes in place; continue resumes the same stream', async () => {
    const s = open(c, 'Generate', slow('k1', 400));
    await s.first;
    expect((await post(ctl, '/pause_generation', { mode: 'keep' }, auth)).json.mode).toBe('keep');
    const st = await sim.state();
    expect(st.paused).toBe('keep');
    expect(st.sequences).toEqual([expect.objectContaining({ rid: 'k1', state: 'running' })]);
    await post(ctl, '/continue_generation', {}, auth);
    const r = await s.result;
    expect(r.error).toBeNull();
    expect(r.messages[r.messages.length - 1].complete.output_ids).toHaveLength(400);
  });

  it('pause mode abort ends in-flight streams with an error status; unknown modes are 400', async () => {
    const s = open(c, 'Generate', slow('a1'));
    await s.first;
    expect((await post(ctl, '/pause_generation', { mode: 'abort' }, auth)).json.mode).toBe('abort');
    expect((await s.result).error?.code).toBe(grpcStatus.INTERNAL);
    const bad = await post(ctl, '/pause_generation', { mode: 'retract' }, auth);
    expect(bad.status).toBe(400);
    expect(bad.json.success).toBe(false);
    expect(bad.json.message).toMatch(/^Invalid request: /);
    expect((await post(ctl, '/pause_generation', '{not json', auth)).status).toBe(400);
    await post(ctl, '/continue_generation', {}, auth);
  });

  it('abort_request answers {"success": true}; abort_all does not leave the engine paused', async () => {
    const one = open(c, 'Generate', slow('x1'));
    const two = open(c, 'Generate', slow('x2'));
    await Promise.all([one.first, two.first]);
    const r = await post(ctl, '/abort_request', { rid: 'x1' }, auth);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ success: true });
    expect((await one.result).error?.code).toBe(grpcStatus.INTERNAL);
    expect((await sim.state()).sequences.map((q: any) => q.rid)).toEqual(['x2']);
    expect((await post(ctl, '/abort_request', { abort_all: true }, auth)).json).toEqual({ success: true });
    expect((await two.result).error?.code).toBe(grpcStatus.INTERNAL);
    expect((await sim.state()).paused).toBeNull();
    expect((await post(ctl, '/abort_request', undefined, auth)).status).toBe(400);
  });

  it('flush_cache (GET and POST), loads, facts and sleep/wake', async () => {
    expect((await get(ctl, '/flush_cache', auth)).json).toEqual({ success: true, message: 'Cache flushed.' });
    expect((await post(ctl, '/flush_cache', undefined, auth)).json).toEqual({ success: true, message: 'Cache flushed.' });
    const busy = open(c, 'Generate', slow('b1'));
    await busy.first;
    expect((await get(ctl, '/v1/loads', auth)).json.loads[0]).toMatchObject({ dp_rank: 0, num_reqs: 1, num_waiting_reqs: 0 });
    const refused = await post(ctl, '/flush_cache', undefined, auth);
    expect(refused.status).toBe(400);
    expect(refused.json.success).toBe(false);
    expect((await post(ctl, '/release_memory_occupation', {}, auth)).status).toBe(400);
    busy.call.cancel();
    await busy.result;
    await until(async () => (await sim.state()).running === 0, 'the cancelled request to leave');

    expect((await get(ctl, '/model_info', auth)).json).toEqual({ model_path: 'MODEL', weight_version: expect.any(String) });
    const info = (await get(ctl, '/server_info', auth)).json;
    expect(info).toMatchObject({ model: 'MODEL', attn_tp_size: 2, is_paused: false, 'rl.update_from': 'distributed,mooncake' });
    expect(JSON.stringify(info)).not.toContain(KEY);
    expect((await get(ctl, '/health_generate', auth)).json).toEqual({ status: 'ok' });

    expect((await post(ctl, '/release_memory_occupation', { tags: ['weights'] }, auth)).status).toBe(200);
    const held = track(collect(c, 'Generate', { ...slow('m1', 2), stream: false }));
    await until(async () => (await sim.state()).held === 1, 'a request held while asleep');
    expect((await post(ctl, '/resume_memory_occupation', undefined, auth)).status).toBe(200);
    expect((await held.promise).error).toBeNull();
  });

  it('refuses disk and tensor refits with 501 naming the supported sources', async () => {
    for (const route of ['update_weights_from_disk', 'update_weights_from_tensor']) {
      const r = await post(ctl, `/${route}`, { model_path: '/m', weight_version: 'e2e-refused', flush_cache: true }, auth);
      expect(r.status).toBe(501);
      expect(r.json).toEqual({
        success: false,
        message: `${route} is not implemented by this build's scheduler; supported sources: distributed,mooncake`,
      });
    }
    expect((await get(ctl, '/get_weight_version', auth)).json.weight_version).not.toBe('e2e-refused');
    // The engine keeps serving.
    expect((await collect(c, 'Generate', { ...slow('after', 2), stream: false })).error).toBeNull();
  });

  it('update_weight_version relabels; /model_info and GetModelInfo follow', async () => {
    const r = await post(ctl, '/update_weight_version', { new_version: 'v5' }, auth);
    expect(r.json).toEqual({ success: true, message: 'Weight version updated to v5.', new_version: 'v5' });
    expect((await get(ctl, '/model_info', auth)).json.weight_version).toBe('v5');
    expect((await unary(c, 'GetModelInfo')).value.weight_version).toBe('v5');
    expect((await post(ctl, '/update_weight_version', {}, auth)).status).toBe(400);
  });

  it('a distributed refit over the broadcast group moves the version only on success', async () => {
    // world = trainer + this engine's 2 simulated GPUs (--attn-tp-size 2).
    const master = await openGroup({ worldSize: 3, groupName: 'weight_update_group', timeoutMs: 10_000 });
    try {
      const init = await post(
        ctl,
        '/init_weights_update_group',
        {
          master_address: '127.0.0.1',
          master_port: master.port,
          rank_offset: 1,
          world_size: 3,
        },
        auth,
      );
      expect(init.status).toBe(200);
      expect(init.json.success).toBe(true);
      await master.ready;
      expect(master.members()).toEqual([1, 2]);
      expect(
        (
          await post(
            ctl,
            '/init_weights_update_group',
            {
              master_address: '127.0.0.1',
              master_port: master.port,
              rank_offset: 1,
              world_size: 3,
            },
            auth,
          )
        ).status,
      ).toBe(400);

      const chunk = { names: ['w.a', 'w.b'], dtypes: ['bfloat16', 'float32'], shapes: [[4, 8], [16]] };
      const mismatched = await post(ctl, '/update_weights_from_distributed', { ...chunk, shapes: [[4, 8]], weight_version: 'bad' }, auth);
      expect(mismatched.status).toBe(400);
      expect((await get(ctl, '/model_info', auth)).json.weight_version).toBe('v5');

      const update = post(ctl, '/update_weights_from_distributed', { ...chunk, weight_version: 1, flush_cache: false }, auth);
      const sent = await master.broadcast(
        chunk.names.map((name, i) => ({ name, dtype: chunk.dtypes[i], shape: chunk.shapes[i] })),
        { version: '1' },
      );
      const r = await update;
      expect(r.status).toBe(200);
      expect(r.json.success).toBe(true);
      expect((await get(ctl, '/model_info', auth)).json.weight_version).toBe('1');
      expect((await unary(c, 'GetModelInfo')).value.weight_version).toBe('1');
      const g = await collect(c, 'Generate', { ...slow('post-refit', 2), stream: false });
      expect(g.messages[0].complete.weight_version).toBe('1');
      const weights = (await sim.state()).weights;
      expect(weights.tensors.map((t: any) => [t.name, t.checksum, t.weightVersion])).toEqual(sent.map((t) => [t.name, t.checksum, '1']));

      expect((await post(ctl, '/update_weights_from_distributed', { ...chunk, group_name: 'nope', weight_version: '2' }, auth)).status).toBe(400);
      expect((await post(ctl, '/destroy_weights_update_group', undefined, auth)).json.success).toBe(true);
      expect((await post(ctl, '/destroy_weights_update_group', { group_name: 'weight_update_group' }, auth)).json.success).toBe(true);
      expect((await get(ctl, '/get_weight_version', auth)).json.weight_version).toBe('1');
    } finally {
      master.close();
    }
  });

  it('a control app that stops leaves the engine serving; it can start again on the same port', async () => {
    await sim.stopControlApp();
    await expect(fetch(`${ctl}/model_info`, { headers: auth })).rejects.toThrow();
    expect((await unary(c, 'HealthCheck')).value.healthy).toBe(true);
    await sim.startControlApp();
    expect((await get(ctl, '/model_info', auth)).status).toBe(200);
  });
});
