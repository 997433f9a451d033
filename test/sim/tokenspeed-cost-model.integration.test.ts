// The TokenSpeed simulator under --cost-model realistic, over real gRPC: chunks and completes carry
// prompt, completion and cached tokens; the SubscribeKvEvents stream shows the radix cache's pages
// stored at a request's end and removed when a later request evicts them (the same hashes), and a
// flush as cleared; GetLoads reports the pool and the hit rate; a distributed weight update
// flushes the cache when it says `flush_cache: true` (TokenSpeed's default on that route is false).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGroup } from '../../sim/broadcast/master.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { post, until } from './sglang-http.ts';
import { collect, open, schedulerClient, unary, type Client } from './tokenspeed-grpc.ts';

const PAGE = 16;
const POOL = 128;
const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function generate(rid: string, ids: number[], maxNewTokens: number) {
  return {
    request_id: rid,
    tokenized: { input_ids: ids },
    sampling_params: { max_new_tokens: maxNewTokens, ignore_eos: true },
    stream: true,
  };
}

describe('KV events and loads from the radix cache', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim([
      '--cost-model',
      'realistic',
      '--kv-cache-tokens',
      String(POOL),
      '--page-size',
      String(PAGE),
      '--prefill-tokens-per-s',
      '100000',
      '--decode-step-ms',
      '1',
      '--kv-events-config',
      '{"enable_kv_cache_events": true, "publisher": "zmq"}',
    ]);
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });

  it('streams stored pages at each end, removed ones at eviction, cleared at a flush; chunks carry the token counts', async () => {
    const events: any[] = [];
    const kv = open(c, 'SubscribeKvEvents', { start_sequence_number: 0 });
    kv.call.on('data', (batch: any) => events.push(...batch.events));
    await until(async () => (await sim.state()).kvEvents.subscribers === 1, 'the KV subscription');

    const a = range(1000, 40);
    const first = await collect(c, 'Generate', generate('a1', a, 8));
    expect(first.error).toBeNull();
    const firstEnd = first.messages[first.messages.length - 1].complete;
    expect(firstEnd).toMatchObject({ prompt_tokens: 40, completion_tokens: 8, cached_tokens: 0 });
    expect(firstEnd.output_ids).toHaveLength(8);
    // 47 tokens had KV at the end: two whole pages went into the cache.
    await until(async () => events.length === 1, 'the stored event');
    expect(events[0].stored.blocks.map((b: any) => b.token_ids)).toEqual([a.slice(0, 16), a.slice(16, 32)]);
    expect(events[0].stored.blocks.every((b: any) => b.block_size === PAGE)).toBe(true);
    const aHashes = events[0].stored.blocks.map((b: any) => b.block_hash);

    const again = await collect(c, 'Generate', generate('a2', a, 8));
    const chunk = again.messages.find((m) => m.chunk)?.chunk;
    expect(chunk).toMatchObject({ prompt_tokens: 40, cached_tokens: 32 });
    expect(again.messages[again.messages.length - 1].complete).toMatchObject({ cached_tokens: 32, completion_tokens: 8 });

    // 100 new tokens need 112 of the 96 free: the two cached pages of `a` are evicted.
    const b = range(5000, 100);
    const other = await collect(c, 'Generate', generate('b1', b, 8));
    expect(other.messages[other.messages.length - 1].complete.cached_tokens).toBe(0);
    await until(async () => events.length === 3, 'the removed and stored events');
    expect(events[1].removed.block_hashes).toEqual(aHashes);
    expect(events[2].stored.blocks.map((x: any) => x.token_ids)).toEqual([0, 1, 2, 3, 4, 5].map((i) => b.slice(i * 16, (i + 1) * 16)));
    expect(events[2].stored.parent_block_hash).toBeUndefined();

    const state = await sim.state();
    expect(state.cache).toMatchObject({ tokens: 96, evictions: 1, evictedTokens: 32, requests: 3, hitTokens: 32, promptTokens: 180 });
    const loads = (await unary(c, 'GetLoads', {})).value.loads[0];
    expect(loads).toMatchObject({ max_total_num_tokens: POOL, num_used_tokens: 0, num_running_reqs: 0 });
    expect(loads.cache_hit_rate).toBeCloseTo(32 / 180, 12);

    // A request extending `b` stores only its new page, chained on b's last page.
    const longer = [...b.slice(0, 96), ...range(9000, 20)];
    const ext = await collect(c, 'Generate', generate('b2', longer, 1));
    expect(ext.messages[ext.messages.length - 1].complete.cached_tokens).toBe(96);
    await until(async () => events.length === 4, 'the extension event');
    expect(events[3].stored.blocks.map((x: any) => x.token_ids)).toEqual([longer.slice(96, 112)]);
    expect(events[3].stored.parent_block_hash).toBe(events[2].stored.blocks[5].block_hash);

    expect((await unary(c, 'FlushCache', {})).value.success).toBe(true);
    await until(async () => events.length === 5, 'the cleared event');
    expect(events[4].cleared).toBeDefined();
    expect((await sim.state()).cache.tokens).toBe(0);
    kv.call.cancel();
    await kv.result;
  });
});

describe('a distributed weight update', () => {
  let sim: TokenspeedSimProcess;
  let c: Client;
  beforeAll(async () => {
    sim = await spawnTokenspeedSim(['--cost-model', 'realistic', '--kv-cache-tokens', '1024', '--decode-step-ms', '1', '--rl-control-port', '0']);
    c = schedulerClient(sim.address);
  });
  afterAll(async () => {
    c?.close();
    await sim?.stop();
  });

  it('flushes the cache with flush_cache: true and keeps it otherwise', async () => {
    const ids = range(300, 50);
    const cachedOf = async (rid: string): Promise<number> => {
      const r = await collect(c, 'Generate', generate(rid, ids, 2));
      return r.messages[r.messages.length - 1].complete.cached_tokens;
    };
    expect(await cachedOf('w1')).toBe(0);
    expect(await cachedOf('w2')).toBe(48);

    const ctl = sim.controlUrl!;
    const master = await openGroup({ worldSize: 2, groupName: 'weight_update_group', timeoutMs: 10_000 });
    try {
      const init = await post(ctl, '/init_weights_update_group', { master_address: '127.0.0.1', master_port: master.port, rank_offset: 1, world_size: 2 });
      expect(init.json.success).toBe(true);
      await master.ready;
      const chunk = { names: ['w.a'], dtypes: ['float32'], shapes: [[4]] };
      const update = async (extra: Record<string, unknown>, version: string): Promise<void> => {
        const r = post(ctl, '/update_weights_from_distributed', { ...chunk, weight_version: version, ...extra });
        await master.broadcast([{ name: 'w.a', dtype: 'float32', shape: [4] }], { version });
        expect((await r).json.success).toBe(true);
      };

      await update({ flush_cache: true }, 'v1');
      expect((await sim.state()).cache).toMatchObject({ tokens: 0, flushes: 1 });
      expect(await cachedOf('w3')).toBe(0);
      expect(await cachedOf('w4')).toBe(48);

      await update({ flush_cache: false }, 'v2');
      await update({}, 'v3');
      expect((await sim.state()).cache.flushes).toBe(1);
      expect(await cachedOf('w5')).toBe(48);
    } finally {
      master.close();
    }
  });
});
