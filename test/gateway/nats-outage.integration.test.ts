// The gateway when NATS fails under it: its embedded nats-server killed (and kept from coming back
// by a test holding the port), or an external one stopped for a few seconds and started again on
// the same port and store. /health says so, control calls and refits answer bus_unavailable at
// once without touching the engine, and everything works again once the bus is back.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import type { Logger } from '../../src/obs/logger.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { until } from '../fixtures/gateway-process.ts';
import { alive } from '../fixtures/pids.ts';
import { squatPort, type PortSquatter } from '../fixtures/port-squatter.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { httpJson } from '../fixtures/http-json.ts';

// The bound the issue sets for a control call while the bus is down (and for /health to notice).
const FAIL_FAST_MS = 2_000;
const ALL = 'worker_type%3Dregular';

type LogLine = { msg: string; [k: string]: any };

/** A logger whose lines the test reads; `onLine` sees each one as it is written. */
function captureLog(onLine?: (l: LogLine) => void): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const log = pino(
    { level: 'info' },
    {
      write(s: string) {
        const l = JSON.parse(s) as LogLine;
        lines.push(l);
        onLine?.(l);
      },
    },
  );
  return { log, lines };
}

const http = (gw: Gateway, method: string, path: string, body?: unknown) => httpJson(gw.url, method, path, body);

/** Registers the engine and waits until the gateway has it ready. */
async function register(gw: Gateway, url: string): Promise<string> {
  const r = await http(gw, 'POST', '/workers', { url });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  await until('the engine to be ready', 20_000, async () => gw.services.view.rows().some((w) => w.health === 'ready'));
  return r.json.id as string;
}

/** Runs `call`, and fails the test if it took longer than the bound. */
async function fast<T>(what: string, call: () => Promise<T>): Promise<T> {
  const started = Date.now();
  const out = await call();
  expect(Date.now() - started, `${what} answered within ${FAIL_FAST_MS} ms`).toBeLessThan(FAIL_FAST_MS);
  return out;
}

let cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

describe('the embedded nats-server dies', () => {
  it('answers 503 and bus_unavailable at once, leaves the engine alone, restarts the server and works again', async () => {
    const sim: SimProcess = await spawnSglangSim(['--token-rate', '0']);
    cleanups.push(() => sim.stop());
    let squatter: PortSquatter | undefined;
    let natsPort = 0;
    // The supervisor restarts the server 200 ms after it died; holding its port as soon as the
    // death is logged keeps the outage open until the test has looked at it.
    const { log, lines } = captureLog((l) => {
      if (l.msg.startsWith('embedded nats-server exited unexpectedly') && !squatter) squatter = squatPort(natsPort);
    });
    const gw = await startGateway(testConfig(), { log });
    cleanups.push(() => gw.close());
    cleanups.push(() => squatter?.release());
    natsPort = Number(new URL(gw.natsUrl).port);
    const id = await register(gw, sim.url);
    const started = lines.find((l) => l.msg === 'embedded nats-server started');
    const natsPid = started?.nats_pid as number;
    expect(alive(natsPid)).toBe(true);
    expect((await http(gw, 'GET', '/health')).json).toEqual({ status: 'ok' });

    process.kill(natsPid, 'SIGKILL');
    await until('the server exit to be logged', 5_000, async () => squatter);
    await squatter!.held;

    const health = await fast('/health', () =>
      until('/health to say 503', FAIL_FAST_MS, async () => {
        const h = await http(gw, 'GET', '/health');
        return h.status === 503 ? h : undefined;
      }),
    );
    expect(health.json).toMatchObject({ status: 'unavailable', reason: 'bus_unavailable' });
    expect(typeof health.json.message).toBe('string');
    // The data plane needs no NATS: SMG's readiness probe stays ready (a load balancer keeps
    // routing rollouts here), and liveness says the process answers.
    expect(await http(gw, 'GET', '/readiness')).toMatchObject({ status: 200, json: { status: 'ready', healthy_workers: 1, total_workers: 1 } });
    expect(await http(gw, 'GET', '/liveness')).toMatchObject({ status: 200, text: 'OK' });

    const one = await fast('a per-worker call', () => http(gw, 'POST', `/v1/rl/workers/${id}/engine/pause_generation`, {}));
    expect(one.status).toBe(503);
    expect(one.json).toMatchObject({ error: 'bus_unavailable', worker_id: id });
    expect(typeof one.json.message).toBe('string');

    const many = await fast('a fan-out', () => http(gw, 'POST', `/v1/rl/engine/pause_generation?selector=${ALL}`, {}));
    expect(many.status).toBe(207);
    expect(many.json).toMatchObject({ total: 1, succeeded: 0, results: {} });
    expect(many.json.failed).toEqual([expect.objectContaining({ worker_id: id, error: 'bus_unavailable' })]);

    // The engine's own word: never paused (its pause mode stays null), never even asked.
    expect((await sim.state()).paused).toBeNull();
    expect((await sim.requests()).filter((r) => r.path === '/pause_generation')).toEqual([]);

    // A restart on a taken port fails and is tried again; once the port is free, it comes back.
    await until('a restart to fail on the held port', 10_000, async () => lines.some((l) => l.msg.startsWith('embedded nats-server could not be restarted')));
    await squatter!.release();
    await until('/health to say 200 again', 20_000, async () => (await http(gw, 'GET', '/health')).status === 200);
    const restarted = lines.find((l) => l.msg === 'embedded nats-server restarted');
    expect(restarted?.nats_pid).not.toBe(natsPid);
    expect(alive(restarted!.nats_pid)).toBe(true);

    const pause = await http(gw, 'POST', `/v1/rl/engine/pause_generation?selector=${ALL}`, {});
    expect(pause.status, JSON.stringify(pause.json)).toBe(200);
    expect((await sim.state()).paused).not.toBeNull();
    const resume = await http(gw, 'POST', `/v1/rl/engine/continue_generation?selector=${ALL}`, {});
    expect(resume.status, JSON.stringify(resume.json)).toBe(200);
    expect((await sim.state()).paused).toBeNull();
  }, 60_000);
});

describe('an external nats-server stops for a few seconds', () => {
  it('goes 503 while it is away, reconnects when it is back on the same port, and refits again', async () => {
    const sim: SimProcess = await spawnSglangSim(['--token-rate', '0']);
    cleanups.push(() => sim.stop());
    // The store outlives the first server so the second one finds the fleet's KV buckets.
    const storeDir = mkdtempSync(join(tmpdir(), 'rlgate-test-store-'));
    cleanups.push(() => rmSync(storeDir, { recursive: true, force: true }));
    let nats: EmbeddedNats = await startEmbeddedNats({ storeDir, restart: false });
    cleanups.push(() => nats.stop());
    const { log, lines } = captureLog();
    const gw = await startGateway({ ...testConfig(), natsUrl: nats.url }, { log });
    cleanups.push(() => gw.close());
    const id = await register(gw, sim.url);

    await nats.stop();
    const health = await fast('/health', () =>
      until('/health to say 503', FAIL_FAST_MS, async () => {
        const h = await http(gw, 'GET', '/health');
        return h.status === 503 ? h : undefined;
      }),
    );
    expect(health.json).toMatchObject({ status: 'unavailable', reason: 'bus_unavailable' });
    expect(lines.some((l) => l.msg.startsWith('lost the NATS connection'))).toBe(true);

    // A refit while the bus is away says so at once and pauses nothing: refused whole (503) when
    // its pauses cannot be recorded first, or (207) with every leg bus_unavailable.
    const during = await fast('a refit', () => http(gw, 'POST', '/v1/rl/refits', { weight_version: '7', source: { kind: 'disk', model_path: '/m' } }));
    expect([503, 207], JSON.stringify(during.json)).toContain(during.status);
    expect(JSON.stringify(during.json)).toContain('bus_unavailable');
    expect((await sim.state()).paused).toBeNull();
    expect((await sim.requests()).filter((r) => r.path === '/pause_generation')).toEqual([]);

    await new Promise((r) => setTimeout(r, 3_000)); // away for a few seconds
    expect((await http(gw, 'GET', '/health')).status).toBe(503);
    nats = await startEmbeddedNats({ port: nats.port, storeDir, restart: false });
    await until('/health to say 200 again', 20_000, async () => (await http(gw, 'GET', '/health')).status === 200);
    expect(lines.some((l) => l.msg === 'NATS connection re-established')).toBe(true);

    const refit = await http(gw, 'POST', '/v1/rl/refits', { weight_version: '8', source: { kind: 'disk', model_path: '/m' } });
    expect(refit.status, JSON.stringify(refit.json)).toBe(200);
    expect((await sim.state()).weightVersion).toBe('8');
    expect((await sim.state()).paused).toBeNull();
    expect(id).toBeTruthy();
  }, 60_000);
});
