// One refit scenario per wire (HTTP SGLang, gRPC TokenSpeed, ZMQ): two engines, distributed refits
// to "1" then "2" through `POST /v1/rl/refits` with the trainer simulator as rank 0 (TokenSpeed
// control apps refuse disk refits), the same report shape on every wire, and /generate reporting
// each version — on ZMQ, whose wire carries none, through the gateway's attribution.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim } from '../fixtures/tokenspeed-sim.ts';
import { spawnZmqSim, tempIpcUrl } from '../fixtures/zmq-sim.ts';
import { ZmqEngineClient } from '../../src/engines/zmq.ts';
import { makeChunks } from '../../src/cli/trainer/chunks.ts';
import { runDistributedRefit } from '../../src/cli/trainer/refit.ts';

type Wire = 'http' | 'grpc' | 'zmq';

/** One engine simulator as the scenario needs it, whatever its wire. */
interface Engine {
  url: string;
  /** The engine's own view: live version and the checksums it loaded. */
  state(): Promise<{ weightVersion: string; weights: { tensors: Array<{ name: string; checksum: string }>; groups: unknown[] } }>;
  stop(): Promise<void>;
}

interface Fleet {
  engines: Engine[];
  /** POST /workers bodies, in the same order as `engines`. */
  registrations: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

/** GPUs of engine i: 1 and 2, so world_size = 4 and the rank offsets are 1 and 2 or 1 and 3. */
const TP = [1, 2];

async function startFleet(wire: Wire): Promise<Fleet> {
  if (wire === 'http') {
    const sims = await Promise.all(TP.map((tp) => spawnSglangSim(['--token-rate', '0', '--model', 'MODEL', '--tp-size', String(tp)])));
    return {
      engines: sims.map((s) => ({ url: s.url, state: s.state as Engine['state'], stop: s.stop })),
      registrations: sims.map((s) => ({ url: s.url })),
      close: async () => {
        await Promise.all(sims.map((s) => s.stop()));
      },
    };
  }
  if (wire === 'grpc') {
    // rl.control_url comes from discovery: the python personality advertises it in GetServerInfo.
    const sims = await Promise.all(
      TP.map((tp) => spawnTokenspeedSim(['--token-rate', '0', '--model', 'MODEL', '--rl-control-port', '0', '--attn-tp-size', String(tp)])),
    );
    return {
      engines: sims.map((s) => ({ url: s.url, state: s.state as Engine['state'], stop: s.stop })),
      registrations: sims.map((s) => ({ url: s.url, runtime_type: 'tokenspeed' })),
      close: async () => {
        await Promise.all(sims.map((s) => s.stop()));
      },
    };
  }
  // ZMQ: the gateway binds the lane and the engine dials in. This process opens the lane first
  // (port 0, read back) so the engine can be told where to dial; the gateway's client for the same
  // worker URL and handshake label shares that socket set (src/engines/zmq.ts). rl.control_url is
  // a registration label: the wire advertises nothing.
  const HANDSHAKE = 'tcp://127.0.0.1:0';
  const dirs = TP.map(() => tempIpcUrl());
  const clients = dirs.map((d) => new ZmqEngineClient(d.url, { handshakeAddress: HANDSHAKE, modelId: 'MODEL' }));
  const started = await Promise.allSettled(
    dirs.map(async (d, i) => {
      const { handshake } = await clients[i]!.open();
      return spawnZmqSim({ url: d.url, handshake, args: ['--token-rate', '0', '--model', 'MODEL', '--tp-size', String(TP[i])] });
    }),
  );
  const sims = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  if (sims.length !== started.length) {
    // Leave nothing behind: the engines that did start, the lanes, the socket directories.
    await Promise.all(sims.map((s) => s.stop()));
    await Promise.all(clients.map((c) => c.close()));
    for (const d of dirs) d.cleanup();
    throw (started.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason;
  }
  return {
    engines: sims.map((s) => ({ url: s.url, state: s.state as Engine['state'], stop: s.stop })),
    registrations: sims.map((s) => ({
      url: s.url,
      runtime_type: 'tokenspeed',
      labels: { 'rl.control_url': s.controlUrl, zmq_handshake_address: HANDSHAKE, model: 'MODEL' },
    })),
    close: async () => {
      await Promise.all(sims.map((s) => s.stop()));
      await Promise.all(clients.map((c) => c.close()));
      for (const d of dirs) d.cleanup();
    },
  };
}

/** What must not depend on the wire: the report's shape and the version progression. */
const signatures = new Map<Wire, unknown>();

/** The report with what legitimately differs (ids, URLs, timings, rank order by port) left out. */
function shapeOf(report: any, tpOf: Map<string, number>): unknown {
  return {
    keys: Object.keys(report).sort(),
    status: report.status,
    total: report.total,
    succeeded: report.succeeded,
    world_size: report.world_size,
    failed: report.failed.length,
    engines: report.engines
      .map((e: any) => ({
        keys: Object.keys(e).sort(),
        outcome: e.outcome,
        phases: Object.fromEntries(Object.entries(e.phases).map(([k, v]) => [k, typeof v])),
        breaker: e.breaker,
        state: e.state,
        weight_version: e.weight_version,
        tp: tpOf.get(e.url),
        has_rank_offset: typeof e.rank_offset === 'number',
      }))
      .sort((a: any, b: any) => a.tp - b.tp),
  };
}

describe.each<Wire>(['http', 'grpc', 'zmq'])('distributed refits over %s', (wire) => {
  let t: TestGateway;
  let fleet: Fleet;
  let ids: string[];
  const progression: string[] = [];
  const shapes: unknown[] = [];

  beforeAll(async () => {
    fleet = await startFleet(wire);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 20 } });
    ids = await t.register(fleet.registrations);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await fleet?.close();
    signatures.set(wire, { progression, shapes });
  });

  it('lists both engines with the wire, their tp_size and a control endpoint', async () => {
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row.connection_mode).toBe(wire);
      expect(row.engine).toBe(wire === 'http' ? 'sglang' : 'tokenspeed');
      expect(row.health).toBe('ready');
      expect(row.control_url).toBeTruthy();
    }
    const byUrl = new Map(rows.map((r: { url: string }) => [r.url, r]));
    fleet.engines.forEach((e, i) => expect(byUrl.get(e.url)).toMatchObject({ tp_size: TP[i] }));
    if (wire === 'grpc') for (const row of rows) expect(row.capabilities.source).toBe('label');
  });

  for (const version of ['1', '2']) {
    it(`refits to "${version}"; the report and the next /generate show it`, async () => {
      const chunks = makeChunks({ params: 5, perChunk: 2, shape: [16, 16], dtype: 'bfloat16' });
      const res = await runDistributedRefit({ gateway: t.url, version, chunks, rendezvousTimeoutMs: 15_000, chunkTimeoutMs: 15_000, httpTimeoutMs: 30_000 });
      expect(res.transferError).toBeNull();
      expect(res.status).toBe(200);
      expect(res.chunksSent).toBe(3);
      const report = res.report as any;
      expect(report).toMatchObject({ status: 'succeeded', weight_version: version, source: 'distributed', total: 2, succeeded: 2, world_size: 4, failed: [] });
      expect(report.engines.map((e: any) => e.worker_id).sort()).toEqual([...ids].sort());
      for (const e of report.engines) {
        expect(e.outcome).toBe('ok');
        for (const p of ['pause', 'refit', 'verify', 'resume']) expect(e.phases[p]).toEqual(expect.any(Number));
        expect(e.breaker).toBe('closed');
        expect(e.weight_version).toBe(version);
      }
      // Ranks follow the trainer in the fleet's order: 1, then 1 + the first engine's GPUs.
      const tpOf = new Map(fleet.engines.map((e, i) => [e.url, TP[i]!]));
      const byRank = [...report.engines].sort((a: any, b: any) => a.rank_offset - b.rank_offset);
      expect(byRank[0].rank_offset).toBe(1);
      expect(byRank[1].rank_offset).toBe(1 + tpOf.get(byRank[0].url)!);
      shapes.push(shapeOf(report, tpOf));

      // Each engine loaded exactly what rank 0 sent, and the group is gone.
      const sent = new Map(res.sent.map((x) => [x.name, x.checksum]));
      expect(sent.size).toBe(5);
      for (const e of fleet.engines) {
        const st = await e.state();
        expect(st.weightVersion).toBe(version);
        expect(st.weights.groups).toEqual([]);
        const loaded = new Map(st.weights.tensors.map((x) => [x.name, x.checksum]));
        for (const [name, sum] of sent) expect(loaded.get(name)).toBe(sum);
      }

      // Both engines serve the new version: token ids in, SGLang's object out.
      const routed = new Set<string>();
      for (let i = 0; i < 2; i++) {
        const gen = await t.http('POST', '/generate', { body: { input_ids: [7, 8, 9], sampling_params: { max_new_tokens: 3 } } });
        expect(gen.status).toBe(200);
        expect(Array.isArray(gen.json)).toBe(false);
        expect(gen.json.meta_info.weight_version).toBe(version);
        routed.add(String(gen.headers['x-smg-routed-worker-id']));
      }
      expect(routed).toEqual(new Set(fleet.engines.map((e) => e.url)));
      progression.push(version);

      const rows = (await t.http('GET', '/v1/rl/workers')).json.workers;
      for (const row of rows) expect(row).toMatchObject({ weight_version: version, control: 'active' });
    });
  }
});

describe('the same refit on every wire', () => {
  it('gives the same report shape and the same version progression', () => {
    expect([...signatures.keys()].sort()).toEqual(['grpc', 'http', 'zmq']);
    const http = signatures.get('http') as { progression: string[]; shapes: unknown[] };
    expect(http.progression).toEqual(['1', '2']);
    expect(http.shapes).toHaveLength(2);
    expect(signatures.get('grpc')).toEqual(http);
    expect(signatures.get('zmq')).toEqual(http);
  });
});
