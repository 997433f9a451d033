// The engines' KV events feed routing (docs/routing.md "KV events"): `rlgate gateway --policy
// cache_aware` over two TokenSpeed simulators with the realistic cost model (a radix cache whose
// pages go out as SubscribeKvEvents batches; one rust servicer, one python with
// --kv-events-config) and a third engine of another model whose servicer answers UNIMPLEMENTED.
// A prompt the gateway never routed (sent to engine A directly) draws the next request sharing
// its prefix to A, `cache_hit`, as A's own records and its cached_tokens show, where the
// gateway's tree alone would have sent it to B, the first candidate. Once A's cache is flushed
// through its control app (the gateway is not told), the prefix no longer draws it: it goes to
// the least loaded, `min_load`. The refusing engine is asked once; `--no-kv-events` subscribes
// to nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { sample } from '../fixtures/prometheus-text.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { collect, schedulerClient, type Client } from '../sim/tokenspeed-grpc.ts';

const MODEL = 'kv-model';
const REALISTIC = ['--cost-model', 'realistic', '--model', MODEL, '--rl-control-port', '0', '--kv-load-interval', '200'];
const KV_ON = ['--kv-events-config', '{"enable_kv_cache_events": true, "publisher": "zmq"}'];
const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);
/** Six whole pages of 16 tokens that only engine A is ever sent first. */
const PREFIX = range(1000, 96);

function generate(ids: number[]) {
  return { model: MODEL, input_ids: ids, sampling_params: { max_new_tokens: 4, ignore_eos: true } };
}

/** The prompts an engine was sent through Generate since its records were last cleared. */
async function promptsOn(sim: TokenspeedSimProcess): Promise<number[][]> {
  return (await sim.rpcs()).filter((r) => r.rpc === 'Generate').map((r) => r.request.tokenized.input_ids.map(Number));
}

async function metrics(gw: GatewayProcess): Promise<string> {
  return (await gw.http('GET', '/metrics')).text;
}

/** Blocks the gateway's index knows of the engine (rlgate_worker_kv_blocks), undefined without a stream. */
async function kvBlocks(gw: GatewayProcess, sim: TokenspeedSimProcess): Promise<number | undefined> {
  return sample(await metrics(gw), 'rlgate_worker_kv_blocks', { worker: sim.url });
}

async function directGenerate(client: Client, rid: string, ids: number[]): Promise<void> {
  const r = await collect(client, 'Generate', {
    request_id: rid,
    tokenized: { input_ids: ids },
    sampling_params: { max_new_tokens: 4, ignore_eos: true },
    stream: true,
  });
  expect(r.error).toBeNull();
}

describe('--policy cache_aware on the engines’ KV events', () => {
  let a: TokenspeedSimProcess;
  let b: TokenspeedSimProcess;
  let refusing: TokenspeedSimProcess;
  let gw: GatewayProcess;
  let clientA: Client;
  let clientB: Client;

  beforeAll(async () => {
    [a, b, refusing] = await Promise.all([
      spawnTokenspeedSim([...REALISTIC, '--servicer-impl', 'rust']),
      spawnTokenspeedSim([...REALISTIC, ...KV_ON]),
      spawnTokenspeedSim(['--model', 'other-model']),
    ]);
    // B first: with no cache anywhere, the least loaded tie goes to the first candidate, B.
    gw = await startGatewayProcess(['--policy', 'cache_aware', '--worker-urls', b.url, a.url, refusing.url]);
    await until('3 engines ready', 20_000, async () => {
      const rows = (await gw.http('GET', '/v1/rl/workers')).json.workers as Array<{ health: string }>;
      return rows.length === 3 && rows.every((r) => r.health === 'ready');
    });
    await until('the gateway subscribed to both engines', 10_000, async () => {
      const [sa, sb] = await Promise.all([a.state(), b.state()]);
      return sa.kvEvents.subscribers === 1 && sb.kvEvents.subscribers === 1;
    });
    clientA = schedulerClient(a.address);
    clientB = schedulerClient(b.address);
  }, 60_000);
  afterAll(async () => {
    clientA?.close();
    clientB?.close();
    await gw?.stop();
    await Promise.all([a?.stop(), b?.stop(), refusing?.stop()]);
  });

  it('a prefix an engine holds by its own events draws the request there (cache_hit), though the gateway never routed it', async () => {
    // Straight to the engines: A caches the prefix, B another prompt.
    await directGenerate(clientA, 'direct-a', PREFIX);
    await directGenerate(clientB, 'direct-b', range(5000, 96));
    await until("both engines' pages in the gateway's index", 10_000, async () => (await kvBlocks(gw, a)) === 6 && (await kvBlocks(gw, b)) === 6);
    await Promise.all([a.clearRecords(), b.clearRecords()]);

    const r = await gw.http('POST', '/generate', generate([...PREFIX, ...range(7000, 20)]));
    expect(r.status, r.text).toBe(200);
    // The engine's own word: the six pages were in its cache.
    expect(r.json.meta_info.cached_tokens).toBe(96);
    expect(await promptsOn(a)).toEqual([[...PREFIX, ...range(7000, 20)]]);
    expect(await promptsOn(b)).toEqual([]);
    const m = await metrics(gw);
    expect(sample(m, 'rlgate_routing_decisions_total', { worker: a.url, reason: 'cache_hit' })).toBe(1);
    expect(sample(m, 'rlgate_routing_decisions_total', { worker: b.url, reason: 'min_load' })).toBeUndefined();
  });

  it('once that engine’s cache is flushed behind the gateway’s back, the prefix no longer draws the request (min_load)', async () => {
    const flushed = await fetch(`${a.controlUrl}/flush_cache`, { method: 'POST' });
    expect(flushed.status).toBe(200);
    await until('the flush in the gateway’s index', 10_000, async () => (await kvBlocks(gw, a)) === 0);
    await Promise.all([a.clearRecords(), b.clearRecords()]);

    const r = await gw.http('POST', '/generate', generate([...PREFIX, ...range(8000, 20)]));
    expect(r.status, r.text).toBe(200);
    // The least loaded: both idle, B has been routed fewer requests (none) than A (one).
    expect(await promptsOn(b)).toEqual([[...PREFIX, ...range(8000, 20)]]);
    expect(await promptsOn(a)).toEqual([]);
    expect(r.json.meta_info.cached_tokens).toBe(0);
    const m = await metrics(gw);
    expect(sample(m, 'rlgate_routing_decisions_total', { worker: b.url, reason: 'min_load' })).toBe(1);
    expect(sample(m, 'rlgate_routing_decisions_total', { worker: a.url, reason: 'cache_hit' })).toBe(1);
  });

  it('an engine that answers UNIMPLEMENTED is asked once and has no KV series', async () => {
    const asked = (await refusing.rpcs()).filter((r) => r.rpc === 'SubscribeKvEvents');
    expect(asked).toHaveLength(1);
    expect(await kvBlocks(gw, refusing)).toBeUndefined();
  });

  it('--no-kv-events subscribes to nothing', async () => {
    await a.clearRecords();
    const off = await startGatewayProcess(['--policy', 'cache_aware', '--no-kv-events', '--worker-urls', a.url]);
    try {
      await until('the engine ready', 20_000, async () => (await off.http('GET', '/v1/rl/workers')).json.workers?.[0]?.health === 'ready');
      // Both gateways probe A; only the first one streams its events.
      expect((await a.state()).kvEvents.subscribers).toBe(1);
      expect((await a.rpcs()).filter((r) => r.rpc === 'SubscribeKvEvents')).toEqual([]);
      expect(sample(await metrics(off), 'rlgate_worker_kv_blocks', { worker: a.url })).toBeUndefined();
    } finally {
      await off.stop();
    }
  });
});
