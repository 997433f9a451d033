// The SGLang simulator's fault knobs and admin routes over real HTTP, in child processes: delay,
// status N times, canned answers on arbitrary paths, hang, drop, exit, the request record, peak
// concurrency, restart on the same port, the api key, and the in-process API.

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSglangSim } from '../../sim/sglang/server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { get, post, track, until } from './sglang-http.ts';

describe('faults and the request record', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
  });
  afterAll(() => sim?.stop());

  it('delays a route while the call is visibly in flight', async () => {
    await sim.setFaults({ route: '/model_info', delayMs: 1500, times: 1 });
    const r = track(get(sim.url, '/model_info'));
    await until(async () => (await sim.state()).delayed === 1, 'delayed call');
    expect(r.settled()).toBe(false);
    expect((await r.promise).status).toBe(200);
    expect((await sim.state()).delayed).toBe(0);
  });

  it('fails the next N calls with a status, then behaves normally', async () => {
    await sim.setFaults({ route: 'pause_generation', status: 503, times: 2 });
    expect((await post(sim.url, '/pause_generation', {})).status).toBe(503);
    const second = await post(sim.url, '/pause_generation', {});
    expect(second.status).toBe(503);
    expect(second.json).toEqual({ success: false, message: 'injected fault' });
    expect((await post(sim.url, '/pause_generation', {})).status).toBe(200);
    expect((await sim.state()).faults).toEqual([]);
    await post(sim.url, '/continue_generation', {});
  });

  it('answers canned bodies on any path: text/plain, 2 MiB JSON, fixture-H ok', async () => {
    expect((await get(sim.url, '/text_route')).status).toBe(404);
    await sim.setFaults([
      { route: 'text_route', status: 200, body: 'plain', contentType: 'text/plain' },
      { route: 'big', bodyBytes: 2 * 1024 * 1024 },
      { route: 'pause_generation', status: 200 },
    ]);
    const text = await get(sim.url, '/text_route');
    expect(text.headers.get('content-type')).toBe('text/plain');
    expect(text.text).toBe('plain');
    const big = await get(sim.url, '/big');
    expect(big.text.length).toBe(2 * 1024 * 1024);
    expect(big.json.success).toBe(true);
    const ok = await post(sim.url, '/pause_generation', {});
    expect(ok.json).toEqual({ success: true, message: 'ok' });
    expect((await sim.state()).paused).toBeNull(); // canned: the real handler did not run
    await sim.clearFaults();
  });

  it('hangs calls (counted in peak control concurrency) until released', async () => {
    await sim.clearRequests(); // also restarts the peak counters
    await sim.setFaults({ route: 'flush_cache', hang: true });
    const calls = [1, 2, 3].map(() => track(get(sim.url, '/flush_cache').catch((e: Error) => e)));
    const st = await until(async () => {
      const s = await sim.state();
      return s.hung === 3 ? s : null;
    }, '3 hung');
    expect(st.peakControlInFlight).toBe(3);
    expect(calls.some((c) => c.settled())).toBe(false);
    await sim.clearFaults();
    expect(await sim.releaseHung()).toBe(3);
    for (const c of calls) expect(await c.promise).toBeInstanceOf(Error);
    expect((await sim.state()).controlInFlight).toBe(0);
  });

  it('drops the connection without an answer', async () => {
    await sim.setFaults({ route: 'continue_generation', drop: true, times: 1 });
    await expect(post(sim.url, '/continue_generation', {})).rejects.toThrow();
    expect((await post(sim.url, '/continue_generation', {})).status).toBe(200);
  });

  it('records method, path, query, headers, body and HTTP version of every non-/_sim call', async () => {
    await sim.clearRequests();
    await post(sim.url, '/pause?mode=keep&level=2', { a: 1 }, { authorization: 'Bearer engine-secret', 'x-request-id': 'req-1' });
    await fetch(`${sim.url}/continue_generation`, { method: 'POST' });
    await sim.state();
    const seen = await sim.requests();
    expect(seen).toHaveLength(2);
    expect(seen[0]).toMatchObject({ method: 'POST', path: '/pause', query: 'mode=keep&level=2', body: '{"a":1}', httpVersion: '1.1' });
    expect(seen[0].headers).toMatchObject({ authorization: 'Bearer engine-secret', 'x-request-id': 'req-1', 'content-type': 'application/json' });
    expect(seen[1]).toMatchObject({ path: '/continue_generation', body: '', bodyBytes: 0 });
    await sim.clearRequests();
    expect(await sim.requests()).toEqual([]);
  });

  it('restarts on the same port with fresh state', async () => {
    await post(sim.url, '/update_weight_version', { new_version: 'before-restart' });
    const oldPid = sim.pid;
    await sim.restart();
    expect(sim.pid).not.toBe(oldPid);
    expect((await get(sim.url, '/model_info')).json.weight_version).toBe('default');
  });
});

describe('exit', () => {
  it('stops with exit code 0 on SIGTERM (here with /health as a plain liveness check)', async () => {
    const sim = await spawnSglangSim(['--health-mode', 'liveness', '--health-check-timeout', '60000']);
    try {
      await post(sim.url, '/pause_generation', { mode: 'in_place' });
      expect((await get(sim.url, '/health')).status).toBe(200);
      expect((await get(sim.url, '/ready')).status).toBe(503);
    } finally {
      await sim.stop();
    }
    expect(await sim.exited).toBe(0);
  });

  it('exits the process from a route fault (a death mid-collective) and from POST /_sim/exit', async () => {
    const a = await spawnSglangSim(['--transport', 'metadata']);
    try {
      await a.setFaults({ route: 'update_weights_from_distributed', exit: 7 });
      await expect(post(a.url, '/update_weights_from_distributed', { names: [], dtypes: [], shapes: [] })).rejects.toThrow();
      expect(await a.exited).toBe(7);
    } finally {
      await a.kill();
    }
    const b = await spawnSglangSim();
    try {
      expect((await post(b.url, '/_sim/exit', { code: 3 })).json).toEqual({ exiting: true, code: 3 });
      expect(await b.exited).toBe(3);
    } finally {
      await b.kill();
    }
  });
});

describe('lifeline', () => {
  it('a simulator whose test process dies without stopping it stops by itself', async () => {
    const script =
      "import('./test/fixtures/sglang-sim.ts').then(async (m) => { const s = await m.spawnSglangSim(); console.log(JSON.stringify({ url: s.url, pid: s.pid })); setInterval(() => {}, 1000); })";
    const harness = spawn(process.execPath, ['--import', 'tsx', '-e', script], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit'] });
    let simPid = 0;
    try {
      const line = await new Promise<string>((res, rej) => {
        createInterface({ input: harness.stdout! }).once('line', res);
        harness.once('exit', () => rej(new Error('harness exited early')));
      });
      const { url, pid } = JSON.parse(line) as { url: string; pid: number };
      simPid = pid;
      expect((await get(url, '/model_info')).status).toBe(200);
      harness.kill('SIGKILL');
      await until(
        async () =>
          get(url, '/model_info').then(
            () => false,
            () => true,
          ),
        'the orphaned simulator to stop',
      );
    } finally {
      harness.kill('SIGKILL');
      if (simPid)
        try {
          process.kill(simPid, 'SIGKILL');
        } catch {
          /* already gone */
        }
    }
  });
});

describe('api key', () => {
  let sim: SimProcess;
  beforeAll(async () => {
    sim = await spawnSglangSim(['--api-key', 'k1', '--token-rate', '0']);
  });
  afterAll(() => sim?.stop());

  it('requires the Bearer key except on /health* and /_sim/*', async () => {
    expect((await post(sim.url, '/pause_generation', {})).status).toBe(401);
    expect((await post(sim.url, '/generate', { text: 'x' }, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await post(sim.url, '/generate', { text: 'x', sampling_params: { max_new_tokens: 1 } }, { authorization: 'Bearer k1' })).status).toBe(200);
    expect((await get(sim.url, '/health')).status).toBe(200);
    expect((await sim.state()).paused).toBeNull();
    expect(JSON.stringify((await get(sim.url, '/server_info', { authorization: 'Bearer k1' })).json)).not.toContain('k1');
  });
});

describe('in-process API', () => {
  it('starts on port 0, serves, reports state and closes', async () => {
    const sim = await startSglangSim({ weightVersion: 'v0', tokenRate: 0, faults: [{ route: 'ping', status: 418 }] });
    try {
      expect(sim.url).toBe(`http://127.0.0.1:${sim.port}`);
      expect((await get(sim.url, '/model_info')).json.weight_version).toBe('v0');
      expect((await get(sim.url, '/ping')).status).toBe(418);
      expect(sim.state().weightVersion).toBe('v0');
    } finally {
      await sim.close();
    }
    await expect(get(sim.url, '/health')).rejects.toThrow();
  });
});
