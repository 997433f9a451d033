// The HTTP-engine relay writes answers straight to the caller's socket (http-relay.ts): large
// answers must arrive whole to a caller that reads slowly (the engine side waits for the
// caller's socket to drain), and a buffered JSON /generate read whole for the mixed-version
// check goes out byte for byte with its length. Real simulator, real sockets.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const MIB = 1024 * 1024;

/** POSTs `body` on its own socket, pausing the answer after its first chunk for `holdMs`. */
function slowRead(url: string, body: unknown, holdMs: number): Promise<{ status: number; headers: Record<string, unknown>; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/generate`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      let held = false;
      res.on('data', (c: Buffer) => {
        chunks.push(c);
        if (!held) {
          held = true;
          res.pause(); // the caller's window fills; the gateway must hold the engine, not buffer it all
          setTimeout(() => res.resume(), holdMs);
        }
      });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, bytes: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('HTTP relay: large answers and slow callers', () => {
  let sim: SimProcess;
  let t: TestGateway;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim();
    t = await startTestGateway();
    [id] = (await t.register([sim.url])) as [string];
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('a 16 MiB streamed answer reaches a caller that pauses reading, whole and in order', async () => {
    await sim.setFaults({ route: 'generate', bodyBytes: 16 * MIB, contentType: 'application/octet-stream', times: 1 });
    const r = await slowRead(t.url, { input_ids: [1, 2, 3] }, 300);
    expect(r.status).toBe(200);
    expect(r.headers['x-smg-routed-worker-id']).toBe(sim.url);
    expect(r.bytes.length).toBe(16 * MIB);
    expect(r.bytes.subarray(0, 24).toString()).toBe('{"success":true,"data":"');
    expect(r.bytes.subarray(-2).toString()).toBe('"}');
    expect(r.bytes.indexOf('y')).toBe(-1); // only the engine's bytes, nothing lost or doubled
    expect(t.gw.services.host.load(id)).toBe(0);
  });

  it('a buffered JSON answer read whole for the mixed-version check goes out byte for byte, with its length', async () => {
    await sim.setFaults({ route: 'generate', bodyBytes: 3 * MIB, times: 1 });
    const r = await slowRead(t.url, { input_ids: [1, 2, 3] }, 100);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(Number(r.headers['content-length'])).toBe(3 * MIB);
    expect(r.bytes.length).toBe(3 * MIB);
    expect(r.bytes.subarray(-2).toString()).toBe('"}');
    expect(r.headers['x-smg-mixed-version']).toBeUndefined();
    expect(t.gw.services.host.load(id)).toBe(0);
  });

  it('an engine 5xx is relayed as the engine sent it and counts against its breaker', async () => {
    await sim.setFaults({ route: 'generate', status: 500, body: { error: 'boom' }, times: 1 });
    const r = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3] } });
    expect(r.status).toBe(500);
    expect(r.json).toEqual({ error: 'boom' });
    expect(r.headers['x-smg-routed-worker-id']).toBe(sim.url);
    const snap = t.gw.services.host.snapshot(id);
    expect(snap?.context.breakerFailures).toBe(1);
    // The next success forgets it.
    const ok = await t.http('POST', '/generate', { body: { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 2 } } });
    expect(ok.status, ok.text).toBe(200);
    expect(t.gw.services.host.snapshot(id)?.context.breakerFailures).toBe(0);
  });
});
