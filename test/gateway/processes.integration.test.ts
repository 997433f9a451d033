// `rlgate gateway --processes 2`: two gateway processes behind one port, one fleet view. Each
// request below comes on a new connection, which the supervisor hands to the processes in turn; the
// engine tells the processes apart by the connection each request arrived on (every process has its
// own upstream pool, and a lone process sending one request at a time reuses one connection). An
// engine registered through one process is routed to by both, a version set through one is stamped
// by both, and stopping the supervisor stops every process.

import { readdirSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { alive } from '../fixtures/pids.ts';

const GEN = { input_ids: [1, 2, 3, 4], sampling_params: { max_new_tokens: 2 } };

/** One request on a connection of its own (no agent: the supervisor hands each to the next process). */
function fresh(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; headers: Record<string, unknown>; json: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method, agent: false, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, json: text ? JSON.parse(text) : undefined });
      });
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The node processes the supervisor forked, from /proc. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid && stat.includes('(node)')) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

describe('rlgate gateway --processes 2', () => {
  let sim: SimProcess;
  let gw: GatewayProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    gw = await startGatewayProcess(['--processes', '2']);
  });
  afterAll(async () => {
    await gw?.kill();
    await sim?.stop();
  });

  it('starts two gateway processes sharing one port, each a replica of its own', async () => {
    expect(childrenOf(gw.pid)).toHaveLength(2);
  });

  it('routes to an engine registered through one process from both, each request answered by the engine', async () => {
    const reg = await fresh(gw.url, 'POST', '/workers', { url: sim.url });
    expect(reg.status).toBe(202);
    id = reg.json.id as string;
    // Both processes list it ready (the registry is shared through NATS): ten new connections in a row.
    await until('every process to list the engine ready', 20_000, async () => {
      for (let i = 0; i < 10; i++) {
        const rows = (await fresh(gw.url, 'GET', '/v1/rl/workers')).json.workers as Array<{ id: string; health: string }>;
        if (rows.find((r) => r.id === id)?.health !== 'ready') return false;
      }
      return true;
    });
    await sim.clearRequests();
    for (let i = 0; i < 12; i++) {
      const r = await fresh(gw.url, 'POST', '/generate', GEN);
      expect(r.status).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(sim.url);
      expect(r.json.meta_info.completion_tokens).toBe(2);
    }
    const calls = (await sim.requests()).filter((r) => r.path === '/generate');
    expect(calls).toHaveLength(12);
    // One at a time, a single process would have sent all twelve over one connection.
    expect(new Set(calls.map((c) => c.remotePort)).size).toBe(2);
  });

  it('stamps a version set through one process on the answers of both', async () => {
    const set = await fresh(gw.url, 'POST', '/v1/rl/engine/update_weight_version?selector=engine%3Dsglang', { new_version: '7', abort_all_requests: false });
    expect(set.status).toBe(200);
    await until('both processes to stamp version 7', 20_000, async () => {
      await sim.clearRequests();
      const stamps: unknown[] = [];
      for (let i = 0; i < 6; i++) stamps.push((await fresh(gw.url, 'POST', '/generate', GEN)).headers['x-smg-weight-version']);
      const ports = new Set((await sim.requests()).filter((r) => r.path === '/generate').map((c) => c.remotePort));
      return ports.size === 2 && stamps.every((s) => s === '7');
    });
  });

  it('stops every process on SIGTERM', async () => {
    const children = childrenOf(gw.pid);
    expect(children).toHaveLength(2);
    await gw.stop();
    expect(await gw.exited).toBe(0);
    await until('the gateway processes to exit', 10_000, async () => children.every((p) => !alive(p)));
  });
});
