// The end-to-end TokenSpeed-shaped lane, driven as SMG's reference trainer drives it through the
// `/v1/rl` pass-through: discovery, the engine's model_info, a flush fan-out, and a NCCL-style
// refit (pause, init per worker with its own rank_offset, one update fan-out per chunk broadcast by
// rank 0 while it is outstanding, destroy, continue) that /generate then shows.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { openGroup } from '../../sim/broadcast/master.ts';
import type { LoadedTensor } from '../../sim/broadcast/types.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';

const ALL = 'selector=engine%3Dtokenspeed';
const GROUP = 'weight_update_group';

describe('E2E TokenSpeed-shaped lane', () => {
  let t: TestGateway;
  let sims: TokenspeedSimProcess[];
  let ids: string[];

  const fanout = (path: string, body: unknown) => t.http('POST', `/v1/rl/engine/${path}?${ALL}`, { body });

  beforeAll(async () => {
    // Live stamping (python personality, no fixed stamp) so a refit shows in /generate. The second
    // engine spans two simulated GPUs, so rank offsets are not simply 1, 2.
    sims = await Promise.all(
      [1, 2].map((tp) =>
        spawnTokenspeedSim(['--model', 'MODEL', '--token-rate', '0', '--rl-control-port', '0', '--attn-tp-size', String(tp), '--group-timeout', '20000']),
      ),
    );
    t = await startTestGateway({ rl: { controlTimeoutSecs: 20 } });
    ids = await t.register(sims.map((s) => ({ url: s.url, runtime_type: 'tokenspeed' })));
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('rows, the engine model_info through the proxy, a flush fan-out', async () => {
    const listing = await t.http('GET', '/v1/rl/workers');
    expect(listing.status).toBe(200);
    expect(listing.json.total).toBe(2);
    for (const row of listing.json.workers) {
      expect(row.engine).toBe('tokenspeed');
      expect(row.connection_mode).toBe('grpc');
      expect(row.tp_size).not.toBeNull();
      expect(row.health).toBe('ready');
      expect(row.control_url).toBeTruthy();
      expect(row.capabilities.pause_modes).toContain('abort');
      expect(row.capabilities.update_from).toEqual(['distributed']);
      expect(row.capabilities.source).toBe('label');
    }
    const bySim = new Map(listing.json.workers.map((r: { url: string }) => [r.url, r]));
    for (const [i, s] of sims.entries()) {
      expect(bySim.get(s.url)).toMatchObject({ tp_size: i + 1, control_url: s.controlUrl });
    }

    const info = await t.http('GET', `/v1/rl/workers/${ids[0]}/engine/model_info`);
    expect(info.status).toBe(200);
    expect(info.json).toMatchObject({ worker_id: ids[0], status: 200 });
    expect(info.json.body).toHaveProperty('weight_version');
    expect(info.json.body.weight_version).toBe('default');

    const flush = await fanout('flush_cache', {});
    expect(flush.status).toBe(200);
    expect(flush.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
    for (const s of sims) expect((await s.requests()).some((r) => r.path === '/flush_cache')).toBe(true);
  });

  it('a NCCL refit through the pass-through; the next /generate reports weight_version "1"', async () => {
    const rows: Array<{ id: string; url: string; tp_size: number }> = (await t.http('GET', `/v1/rl/workers`)).json.workers;
    // world = trainer + Σ tp; engine i's ranks start after the GPUs of the engines before it.
    const worldSize = 1 + rows.reduce((n, r) => n + r.tp_size, 0);
    expect(worldSize).toBe(4);
    const master = await openGroup({ host: '127.0.0.1', port: 0, worldSize, groupName: GROUP, timeoutMs: 20_000 });
    try {
      for (const s of sims) await s.clearRecords();
      const pause = await fanout('pause_generation', {});
      expect(pause.status).toBe(200);
      expect(pause.json.succeeded).toBe(2);

      let offset = 1;
      const offsets = new Map<string, number>();
      for (const row of rows) {
        offsets.set(row.url, offset);
        const init = await t.http('POST', `/v1/rl/workers/${row.id}/engine/init_weights_update_group`, {
          body: { master_address: '127.0.0.1', master_port: master.port, rank_offset: offset, world_size: worldSize, group_name: GROUP, backend: 'nccl' },
        });
        expect(init.status).toBe(200);
        expect(init.json.body.success).toBe(true);
        offset += row.tp_size;
      }
      await master.ready;
      expect(master.members()).toEqual([1, 2, 3]);

      const chunks = makeChunks({ params: 7, perChunk: 3, shape: [32, 32], dtype: 'bfloat16' });
      expect(chunks).toHaveLength(3);
      const sent: LoadedTensor[] = [];
      for (const [i, chunk] of chunks.entries()) {
        const last = i === chunks.length - 1;
        const body = { ...chunk, group_name: GROUP, flush_cache: false, ...(last ? { weight_version: '1' } : {}) };
        // The fan-out answers only after the engines received the chunk: broadcast while it is out.
        const [update, got] = await Promise.all([
          fanout('update_weights_from_distributed', body),
          master.broadcast(
            chunk.names.map((name, j) => ({ name, dtype: chunk.dtypes[j]!, shape: chunk.shapes[j]! })),
            { version: '1', timeoutMs: 20_000 },
          ),
        ]);
        expect(update.status).toBe(200);
        expect(update.json).toMatchObject({ total: 2, succeeded: 2, failed: [] });
        sent.push(...got);
        // A partial refit never advertises the new version: only the last chunk moves it.
        for (const s of sims) expect((await s.state()).weightVersion).toBe(last ? '1' : 'default');
      }

      const destroy = await fanout('destroy_weights_update_group', { group_name: GROUP });
      expect(destroy.status).toBe(200);
      const resume = await fanout('continue_generation', {});
      expect(resume.status).toBe(200);

      // Each engine joined with its own offset and holds exactly the bytes rank 0 sent.
      for (const s of sims) {
        const reqs = await s.requests();
        const init = reqs.filter((r) => r.path === '/init_weights_update_group').map((r) => JSON.parse(r.body));
        expect(init.map((b) => b.rank_offset)).toEqual([offsets.get(s.url)]);
        const updates = reqs.filter((r) => r.path === '/update_weights_from_distributed').map((r) => JSON.parse(r.body));
        expect(updates.map((b) => b.weight_version ?? null)).toEqual([null, null, '1']);
        const st = await s.state();
        expect(st.weightVersion).toBe('1');
        expect(st.weights.groups).toEqual([]);
        const loaded = new Map<string, string>((st.weights.tensors as LoadedTensor[]).map((x) => [x.name, x.checksum]));
        expect(sent).toHaveLength(7);
        for (const x of sent) expect(loaded.get(x.name)).toBe(x.checksum);
      }
    } finally {
      master.close();
    }

    const listing = (await t.http('GET', '/v1/rl/workers')).json.workers;
    for (const row of listing) expect(row).toMatchObject({ weight_version: '1', version_source: 'passthrough', control: 'active' });
    const seen = new Set<string>();
    for (let i = 0; i < 2; i++) {
      const gen = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 4 } } });
      expect(gen.status).toBe(200);
      expect(gen.json.meta_info.weight_version).toBe('1');
      seen.add(String(gen.headers['x-smg-routed-worker-id']));
    }
    expect(seen.size).toBe(2);
  });
});
