// The two servicer personalities (smg_grpc_servicer's python and rust) over real gRPC: selection
// flag > env > default with the log line naming the source, invalid values failing startup with the
// allowed values named, and the rust profile's differences (no weight_version stamps, no rl.* keys,
// no live is_paused, UNIMPLEMENTED admin calls, refused ranked/prompt logprobs, KV events on).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTokenspeedSimToExit, spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { post, until } from './sglang-http.ts';
import { collect, grpcStatus, healthClient, open, plain, schedulerClient, unary, type Client } from './tokenspeed-grpc.ts';

const ENV = 'SMG_TOKENSPEED_SERVICER_IMPL';

describe('servicer selection', () => {
  it('flag beats env, env beats the default, and one log line names the source', async () => {
    const cases: Array<{ args: string[]; env: Record<string, string>; impl: string; source: string }> = [
      { args: [], env: {}, impl: 'python', source: 'default' },
      { args: [], env: { [ENV]: ' Rust ' }, impl: 'rust', source: 'env' },
      { args: ['--servicer-impl', 'python'], env: { [ENV]: 'rust' }, impl: 'python', source: 'flag' },
      { args: ['--servicer-impl=RUST'], env: {}, impl: 'rust', source: 'flag' },
    ];
    for (const k of cases) {
      const sim = await spawnTokenspeedSim(k.args, k.env);
      try {
        expect([sim.servicerImpl, sim.servicerImplSource]).toEqual([k.impl, k.source]);
        const lines = sim
          .stderr()
          .split('\n')
          .filter((l) => l.startsWith('Servicer implementation:'));
        expect(lines).toEqual([`Servicer implementation: ${k.impl} (source=${k.source})`]);
        expect((await sim.state()).servicerImpl).toBe(k.impl);
      } finally {
        await sim.stop();
      }
    }
  });

  it('an invalid flag fails startup with status 2 and names the allowed values', async () => {
    const r = await runTokenspeedSimToExit(['--servicer-impl', 'go']);
    expect(r.code).toBe(2);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toContain("'go'");
    expect(r.stderr).toContain("'python', 'rust'");
  });

  it('an invalid env value fails startup (exit 1) and names the allowed values', async () => {
    const r = await runTokenspeedSimToExit([], { [ENV]: 'java' });
    expect(r.code).toBe(1);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toContain(ENV);
    expect(r.stderr).toContain("'python', 'rust'");
  });
});

describe('rust profile', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim(
      [
        '--servicer-impl',
        'rust',
        '--token-rate',
        '50',
        '--rl-control-port',
        '0',
        '--weight-version',
        'v1',
        '--enable-output-logprobs',
        '--rl-control-api-key',
        'k',
      ],
      { SMG_TOKENSPEED_SERVICER_DRAIN_SECS: '2' },
    );
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });

  const auth = { authorization: 'Bearer k' };
  const req = (rid: string, extra: Record<string, unknown> = {}) => ({
    request_id: rid,
    tokenized: { input_ids: [1, 2, 3] },
    sampling_params: { max_new_tokens: 3 },
    stream: true,
    ...extra,
  });

  it('leaves weight_version unset on chunks and completes', async () => {
    const r = await collect(c, 'Generate', req('r1'));
    expect(r.error).toBeNull();
    expect(r.messages.length).toBeGreaterThan(1);
    for (const m of r.messages) expect('weight_version' in m[m.response]).toBe(false);
  });

  it('advertises no rl.* keys and no live is_paused, but still redacts credentials', async () => {
    expect((await post(sim.controlUrl!, '/pause_generation', { mode: 'keep' }, auth)).status).toBe(200);
    try {
      const r = await unary(c, 'GetServerInfo');
      const args = plain(r.value.server_args);
      expect(Object.keys(args).filter((k) => k.startsWith('rl.'))).toEqual([]);
      expect('rl_control_api_key' in args).toBe(false);
      expect(r.value.is_paused).toBe(false);
      expect((await sim.state()).paused).toBe('keep');
    } finally {
      expect((await post(sim.controlUrl!, '/continue_generation', undefined, auth)).status).toBe(200);
    }
  });

  it('answers UNIMPLEMENTED to FlushCache and the profiling calls', async () => {
    for (const m of ['FlushCache', 'StartProfile', 'StopProfile']) {
      expect((await unary(c, m, {})).error?.code).toBe(grpcStatus.UNIMPLEMENTED);
    }
  });

  it('refuses ranked top logprobs and prompt logprobs with INVALID_ARGUMENT', async () => {
    const top = await collect(c, 'Generate', req('t1', { return_logprob: true, top_logprobs_num: 2 }));
    expect(top.error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
    const prompt = await collect(c, 'Generate', req('t2', { return_logprob: true, logprob_start_len: 0 }));
    expect(prompt.error?.code).toBe(grpcStatus.INVALID_ARGUMENT);
    const plainLogprobs = await collect(c, 'Generate', req('t3', { return_logprob: true, top_logprobs_num: 1 }));
    expect(plainLogprobs.error).toBeNull();
  });

  it('keeps model facts at their launch values and reads the rust tuning variables', async () => {
    expect((await post(sim.controlUrl!, '/update_weight_version', { new_version: 'v9' }, auth)).status).toBe(200);
    expect((await unary(c, 'GetModelInfo')).value.weight_version).toBe('v1');
    const state = await sim.state();
    expect(state.weightVersion).toBe('v9');
    expect(state.rustTuning).toMatchObject({ drainSecs: 2, startupTimeoutSecs: 1800, workerThreads: 4, handshakePort: null });
    expect(state.rustTuning.zmqSocketDir).toMatch(/^\/tmp\/smg-zmq-\d+$/);
  });

  it('turns KV events on by default: stored blocks stream on SubscribeKvEvents', async () => {
    const kv = open(c, 'SubscribeKvEvents', { start_sequence_number: 0 });
    const ids = Array.from({ length: 32 }, (_, i) => 100 + i);
    // Wait until the subscription is registered before generating, so the batch is not missed.
    await until(async () => (await sim.state()).kvEvents.subscribers === 1, 'the KV subscription');
    await collect(c, 'Generate', { ...req('kv1'), tokenized: { input_ids: ids } });
    const batch = await kv.first;
    kv.call.cancel();
    await kv.result;
    expect(batch.events[0].stored.blocks.map((b: any) => b.token_ids)).toEqual([ids.slice(0, 16), ids.slice(16, 32)]);
    expect(batch.sequence_number).toBe('1');
    // The rust relay replays from its history: a batch published with nobody listening is
    // delivered to a subscriber that resumes after sequence 1.
    await collect(c, 'Generate', { ...req('kv2'), tokenized: { input_ids: ids.map((x) => x + 1) } });
    const replay = open(c, 'SubscribeKvEvents', { start_sequence_number: '1' });
    const again = await replay.first;
    replay.call.cancel();
    await replay.result;
    expect(again.sequence_number).toBe('2');
    expect(again.events[0].stored.blocks[0].token_ids).toEqual(ids.slice(0, 16).map((x) => x + 1));
  });
});

describe('rust profile with SMG_TOKENSPEED_SERVICER_KV_EVENTS=0', () => {
  it('answers SubscribeKvEvents with UNIMPLEMENTED', async () => {
    const sim = await spawnTokenspeedSim([], { [ENV]: 'rust', SMG_TOKENSPEED_SERVICER_KV_EVENTS: 'off' });
    const c = schedulerClient(sim.address);
    try {
      expect((await collect(c, 'SubscribeKvEvents', {})).error?.code).toBe(grpcStatus.UNIMPLEMENTED);
      expect((await sim.state()).kvEvents.enabled).toBe(false);
    } finally {
      c.close();
      await sim.stop();
    }
  });
});

describe('health and shutdown', () => {
  it('the deep HealthCheck probe fails after TOKENSPEED_HEALTH_CHECK_TIMEOUT while nothing can run', async () => {
    const sim = await spawnTokenspeedSim(['--rl-control-port', '0'], { TOKENSPEED_HEALTH_CHECK_TIMEOUT: '0.2' });
    const c = schedulerClient(sim.address);
    try {
      expect((await unary(c, 'HealthCheck')).value.healthy).toBe(true);
      await post(sim.controlUrl!, '/pause_generation', { mode: 'keep' });
      expect((await unary(c, 'HealthCheck')).value).toEqual({ healthy: false, message: 'Health check timeout after 0.2s' });
      await post(sim.controlUrl!, '/continue_generation');
      expect((await unary(c, 'HealthCheck')).value.healthy).toBe(true);
    } finally {
      c.close();
      await sim.stop();
    }
  });

  it('SIGTERM turns health NOT_SERVING, refuses new streams and lets in-flight ones finish (rust drain window)', async () => {
    const sim = await spawnTokenspeedSim(['--servicer-impl', 'rust', '--rl-control-port', '0', '--token-rate', '200'], {
      SMG_TOKENSPEED_SERVICER_DRAIN_SECS: '60',
    });
    const c = schedulerClient(sim.address);
    const h = healthClient(sim.address);
    try {
      // Paused first, so the request waits in flight and the drain window, not the token rate,
      // decides when the process may exit.
      await post(sim.controlUrl!, '/pause_generation', { mode: 'keep' });
      const s = open(c, 'Generate', { request_id: 'drain', tokenized: { input_ids: [4, 5] }, sampling_params: { max_new_tokens: 30 }, stream: true });
      await until(async () => (await sim.state()).held === 1, 'the request to be held');
      process.kill(sim.pid, 'SIGTERM');
      await until(async () => (await unary(h, 'Check', { service: '' })).value?.status === 'NOT_SERVING', 'NOT_SERVING');
      expect((await unary(c, 'HealthCheck')).value).toEqual({ healthy: false, message: 'Server is shutting down' });
      expect((await collect(c, 'Generate', { request_id: 'late', tokenized: { input_ids: [1] } })).error?.code).toBe(grpcStatus.UNAVAILABLE);
      await post(sim.controlUrl!, '/continue_generation');
      const r = await s.result;
      expect(r.error).toBeNull();
      expect(r.messages[r.messages.length - 1].complete.completion_tokens).toBe(30);
      expect(await sim.exited).toBe(0);
    } finally {
      c.close();
      h.close();
      await sim.stop();
    }
  });
});
