// A fresh `rlgate gateway` process loads an engine wire's libraries only with the first engine of
// that kind, and that first engine registers and serves as any other: a TokenSpeed gRPC engine and
// a ZMQ engine, each the first of its kind, come up `ready` and answer /generate through the
// gateway (the engines' own records show the calls). ZeroMQ's native addon, which a process maps
// from disk when it loads it, is not in the gateway's memory map before the first ZMQ engine
// registers, and is after (Linux: /proc/<pid>/maps).

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pickFreePort } from '../../src/bus/server.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { spawnZmqSim, tempIpcUrl, type ZmqSimProcess } from '../fixtures/zmq-sim.ts';

const GENERATE = { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };

/** Whether ZeroMQ's native addon is mapped into the process. */
function zeromqMapped(pid: number): boolean {
  return readFileSync(`/proc/${pid}/maps`, 'utf8').includes('/zeromq/build/');
}

async function readyRow(gw: GatewayProcess, id: string): Promise<Record<string, unknown>> {
  return until(`worker ${id} ready`, 30_000, async () => {
    const row = await gw.http('GET', `/v1/rl/workers/${id}`);
    return row.status === 200 && row.json.health === 'ready' ? row.json : undefined;
  });
}

describe('the first engine of each kind of a fresh gateway', () => {
  let gw: GatewayProcess;
  let ts: TokenspeedSimProcess | undefined;
  let zmq: ZmqSimProcess | undefined;
  const ipc = tempIpcUrl();

  beforeAll(async () => {
    gw = await startGatewayProcess([]);
  });
  afterAll(async () => {
    await gw?.stop();
    await Promise.all([ts?.stop(), zmq?.stop()]);
    ipc.cleanup();
  });

  it('a TokenSpeed gRPC engine registers, comes up ready and serves /generate', async () => {
    ts = await spawnTokenspeedSim(['--model', 'TS', '--token-rate', '0']);
    const reg = await gw.http('POST', '/workers', { url: ts.url, runtime_type: 'tokenspeed' });
    expect(reg.status).toBe(202);
    const row = await readyRow(gw, reg.json.id);
    expect(row).toMatchObject({ engine: 'tokenspeed', connection_mode: 'grpc', model_id: 'TS' });
    const gen = await gw.http('POST', '/generate', { ...GENERATE, model: 'TS' });
    expect(gen.status).toBe(200);
    expect(gen.json.output_ids).toHaveLength(3);
    expect((await ts.rpcs()).filter((r) => r.rpc === 'Generate')).toHaveLength(1);
  });

  it('a ZMQ engine: ZeroMQ is not loaded before it registers; it comes up ready and serves /generate', async () => {
    expect(zeromqMapped(gw.pid)).toBe(false);
    const handshake = `tcp://127.0.0.1:${await pickFreePort()}`;
    const reg = await gw.http('POST', '/workers', {
      url: ipc.url,
      runtime_type: 'tokenspeed',
      labels: { zmq_handshake_address: handshake, model: 'ZQ' },
    });
    expect(reg.status).toBe(202);
    zmq = await spawnZmqSim({ url: ipc.url, handshake, args: ['--token-rate', '0', '--model', 'ZQ'] });
    const row = await readyRow(gw, reg.json.id);
    expect(row).toMatchObject({ connection_mode: 'zmq', model_id: 'ZQ' });
    expect(zeromqMapped(gw.pid)).toBe(true);
    const gen = await gw.http('POST', '/generate', { ...GENERATE, model: 'ZQ' });
    expect(gen.status).toBe(200);
    expect(gen.json.output_ids).toHaveLength(3);
    expect(await zmq.requests()).toHaveLength(1);
  });
});
