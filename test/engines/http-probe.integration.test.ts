// The HTTP engine's liveness probe against a real SGLang simulator: what it reads off the engine
// (alive, answering 5xx, paused or admitting), that its signal ends it at once wherever the request
// is (not yet sent, or held by a hung engine), and that the control connection serves the next
// call after such an abort. The probe reads the status alone and drops the body, so a large body
// costs it nothing but the reading.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HttpEngineClient } from '../../src/engines/http.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

let sim: SimProcess;
let client: HttpEngineClient;

beforeAll(async () => {
  sim = await spawnSglangSim();
});
afterAll(async () => {
  await sim?.stop();
});
afterEach(async () => {
  // A hung call first, or closing the client would wait for it.
  await sim.clearFaults();
  await sim.releaseHung();
  await client?.close();
  await fetch(`${sim.url}/continue_generation`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
});

const live = () => new AbortController().signal;
const healthCalls = async () => (await sim.requests()).filter((r) => r.path === '/health').length;

describe('HttpEngineClient.probe', () => {
  it('a healthy engine: the loud probe passes; a quiet probe also reads whether it admits requests', async () => {
    client = new HttpEngineClient(sim.url, null);
    await expect(client.probe(live())).resolves.toBeUndefined();
    await expect(client.probe(live(), true)).resolves.toEqual({ paused: false });

    const paused = await fetch(`${sim.url}/pause_generation`, { method: 'POST', body: '{"mode":"abort"}', headers: { 'content-type': 'application/json' } });
    expect(paused.status).toBe(200);
    await expect(client.probe(live(), true)).resolves.toEqual({ paused: true });
  });

  it('an engine answering 503 on /health fails the probe, naming the path and the status', async () => {
    client = new HttpEngineClient(sim.url, null);
    await sim.setFaults({ route: '/health', status: 503, body: { error: 'overloaded' } });
    await expect(client.probe(live())).rejects.toThrow('/health answered 503');
  });

  it('a large body is read to its end and dropped: the status decides, and the connection goes on', async () => {
    client = new HttpEngineClient(sim.url, null);
    await sim.setFaults({ route: '/health', status: 200, bodyBytes: 4 << 20 });
    await expect(client.probe(live())).resolves.toBeUndefined();
    await sim.clearFaults();
    await expect(client.probe(live())).resolves.toBeUndefined();
  });

  it('a hung /health: the abort ends the probe with the signal’s reason at once, and the next probe is answered', async () => {
    client = new HttpEngineClient(sim.url, null);
    await sim.clearRequests();
    await sim.setFaults({ route: '/health', hang: true, times: 1 });
    const ctrl = new AbortController();
    const probe = client.probe(ctrl.signal);
    // Wait until the engine holds the request, so the abort lands on a request in flight.
    for (let i = 0; i < 100 && (await healthCalls()) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await healthCalls()).toBe(1);
    const reason = new Error('probe deadline');
    const t0 = performance.now();
    ctrl.abort(reason);
    await expect(probe).rejects.toBe(reason);
    expect(performance.now() - t0).toBeLessThan(500);

    // The aborted request leaves the connection once undici has torn it down; until then a probe
    // says it skipped its round (a call holds the connection) rather than queue behind it.
    let next = await client.probe(live());
    for (let i = 0; i < 50 && next?.skipped; i++) {
      await new Promise((r) => setTimeout(r, 20));
      next = await client.probe(live());
    }
    expect(next).toBeUndefined();
    expect(await healthCalls()).toBe(2);
  });

  it('a signal already aborted: the probe fails without a request to the engine', async () => {
    client = new HttpEngineClient(sim.url, null);
    await sim.clearRequests();
    const ctrl = new AbortController();
    const reason = new Error('stopped');
    ctrl.abort(reason);
    await expect(client.probe(ctrl.signal)).rejects.toBe(reason);
    await expect(client.probe(ctrl.signal, true)).rejects.toBe(reason);
    expect((await sim.requests()).filter((r) => r.path === '/health' || r.path === '/model_info' || r.path === '/ready')).toEqual([]);
  });

  it('an engine that is gone: the probe fails with the connection error', async () => {
    const gone = await spawnSglangSim();
    client = new HttpEngineClient(gone.url, null);
    await expect(client.probe(live())).resolves.toBeUndefined();
    await gone.kill();
    await expect(client.probe(live())).rejects.toThrow(/ECONNREFUSED|other side closed|socket/i);
  });
});
