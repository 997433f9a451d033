// `rlgate serve` as a user runs it: engines and gateway in one command; the engines register,
// refit through the gateway, a crashed engine is restarted, and SIGTERM takes everything down; a
// mixed fleet from one --kind list, with the engine flags after `--` reaching every simulator.

import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

interface Serving {
  url: string;
  engines: Array<{ kind: string; url: string; pid: number }>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function json(url: string, init?: Parameters<typeof request>[1]) {
  const r = await request(url, init);
  return { status: r.statusCode, body: (await r.body.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function until<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out; last ${JSON.stringify(v).slice(0, 300)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('rlgate serve', () => {
  let child: ChildProcess;
  let serving: Serving;

  beforeAll(async () => {
    child = spawn(process.execPath, ['bin/rlgate.mjs', 'serve', '--engines', '2', '--port', '0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    serving = await new Promise<Serving>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('serve did not start')), 30_000);
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = JSON.parse(l) as Serving & { event: string };
        if (m.event === 'serving') {
          clearTimeout(t);
          resolve(m);
        }
      });
    });
  });
  afterAll(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });

  it('registers every engine and refits them through the gateway', async () => {
    const rows = await until(
      () => json(`${serving.url}/v1/rl/workers`),
      (r) => r.body.total === 2 && r.body.workers.every((w: { health: string }) => w.health === 'ready'),
    );
    expect(rows.body.workers.map((w: { url: string }) => w.url).sort()).toEqual(serving.engines.map((e) => e.url).sort());
    const refit = await json(`${serving.url}/v1/rl/refits`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ weight_version: '4', source: { kind: 'disk', model_path: '/m' } }),
    });
    expect(refit.status).toBe(200);
  });

  it('restarts an engine that crashed', async () => {
    const victim = serving.engines[0]!;
    // The process that runs now holds the refit's version.
    expect((await json(`${victim.url}/_sim/state`)).body.weightVersion).toBe('4');
    const killedAt = Date.now();
    process.kill(victim.pid, 'SIGKILL');
    await until(
      async () => alive(victim.pid),
      (up) => !up,
      5_000,
    );
    // Back on the same URL: a new process, started after the kill, on the initial weights (the
    // killed one held the refit's).
    const state = async () => {
      try {
        return await json(`${victim.url}/_sim/state`);
      } catch {
        return { status: 0, body: undefined };
      }
    };
    const back = await until(state, (r) => r.status === 200);
    expect(back.body.weightVersion).toBe('default');
    expect(back.body.uptimeMs).toBeLessThan(Date.now() - killedAt);
    const health = await request(`${victim.url}/health`);
    await health.body.dump();
    expect(health.statusCode).toBe(200);
  });

  it('SIGTERM stops the gateway and every engine', async () => {
    child.kill('SIGTERM');
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(0);
    await until(
      async () => serving.engines.map((e) => e.pid).filter(alive),
      (left) => left.length === 0,
      10_000,
    );
  });
});

describe.each(['tokenspeed', 'zmq'])('rlgate serve --kind %s', (kind) => {
  let child: ChildProcess;
  let serving: Serving;

  beforeAll(async () => {
    child = spawn(process.execPath, ['bin/rlgate.mjs', 'serve', '--kind', kind, '--engines', '2', '--tp-size', '1', '--port', '0', '--log-level', 'warn'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    serving = await new Promise<Serving>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('serve did not start')), 30_000);
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = JSON.parse(l) as Serving & { event: string };
        if (m.event === 'serving') {
          clearTimeout(t);
          resolve(m);
        }
      });
    });
  });
  afterAll(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });

  it('registers engines with their control endpoint, generates, and fans control calls out', async () => {
    const rows = await until(
      () => json(`${serving.url}/v1/rl/workers`),
      (r) => r.body.total === 2 && r.body.workers.every((w: { health: string }) => w.health === 'ready'),
    );
    for (const w of rows.body.workers) {
      expect(w.engine).toBe('tokenspeed');
      expect(w.connection_mode).toBe(kind === 'zmq' ? 'zmq' : 'grpc');
      expect(w.control_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    }
    const gen = await json(`${serving.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } }),
    });
    expect(gen.status).toBe(200);
    expect(gen.body.output_ids).toHaveLength(3);
    const flush = await json(`${serving.url}/v1/rl/engine/flush_cache?selector=worker_type%3Dregular`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(flush.status).toBe(200);
    expect(flush.body.succeeded).toBe(2);
  });
});

describe('rlgate serve --kind sglang:3,tokenspeed:2 -- --tp 2 --served-model-name mixed-model', () => {
  let child: ChildProcess;
  let serving: Serving;

  beforeAll(async () => {
    // SGLang's spellings after --: --tp reaches the SGLang simulators as --tp-size and the
    // TokenSpeed ones as --attn-tp-size.
    child = spawn(
      process.execPath,
      [
        'bin/rlgate.mjs',
        'serve',
        '--kind',
        'sglang:3,tokenspeed:2',
        '--port',
        '0',
        '--log-level',
        'warn',
        '--',
        '--tp',
        '2',
        '--served-model-name',
        'mixed-model',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    serving = await new Promise<Serving>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('serve did not start')), 60_000);
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = JSON.parse(l) as Serving & { event: string };
        if (m.event === 'serving') {
          clearTimeout(t);
          resolve(m);
        }
      });
    });
  }, 90_000);
  afterAll(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });

  it('starts three SGLang and two TokenSpeed simulators and registers all five', async () => {
    expect(serving.engines.map((e) => e.kind)).toEqual(['sglang', 'sglang', 'sglang', 'tokenspeed', 'tokenspeed']);
    const rows = await until(
      () => json(`${serving.url}/v1/rl/workers`),
      (r) => r.body.total === 5 && r.body.workers.every((w: { health: string }) => w.health === 'ready'),
      60_000,
    );
    const engines = rows.body.workers.map((w: { engine: string; connection_mode: string }) => `${w.engine}/${w.connection_mode}`).sort();
    expect(engines).toEqual(['sglang/http', 'sglang/http', 'sglang/http', 'tokenspeed/grpc', 'tokenspeed/grpc']);
    expect(rows.body.workers.map((w: { url: string }) => w.url).sort()).toEqual(serving.engines.map((e) => e.url).sort());
  });

  it('hands the engine flags to every simulator: each reports the served model name and tp 2', async () => {
    const rows = await json(`${serving.url}/v1/rl/workers`);
    for (const w of rows.body.workers) {
      expect(w.model_id, w.url).toBe('mixed-model');
      expect(w.tp_size, w.url).toBe(2);
    }
    // Straight from an SGLang simulator, not through the gateway.
    const sglang = serving.engines.find((e) => e.kind === 'sglang')!;
    const info = await json(`${sglang.url}/server_info`);
    expect(info.body).toMatchObject({ served_model_name: 'mixed-model', tp_size: 2 });
  });

  it('generates through the mixed fleet', async () => {
    const gen = await json(`${serving.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } }),
    });
    expect(gen.status).toBe(200);
    expect(gen.body.output_ids).toHaveLength(3);
  });
});

describe('rlgate serve usage errors', () => {
  async function serveFails(...args: string[]) {
    const c = spawn(process.execPath, ['bin/rlgate.mjs', 'serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout!.on('data', (d) => (stdout += d));
    c.stderr!.on('data', (d) => (stderr += d));
    const code = await new Promise<number | null>((resolve) => c.once('exit', resolve));
    return { code, stdout, stderr };
  }

  it.each([
    [['--kind', 'sglang:two'], /--kind sglang:two/],
    [['--kind', 'vllm:2'], /--kind takes sglang, tokenspeed or zmq/],
    [['--kind', 'sglang:1,tokenspeed:1', '--engine-cmd', 'engine --port {port}'], /--engine-cmd launches engines of one kind/],
    [['--kind', 'sglang:1,tokenspeed:1', '--', '--no-such-flag'], /the sglang simulator refuses the engine flags: unknown flag --no-such-flag/],
    // TokenSpeed has no pipeline parallelism flag: SGLang's --pp is refused for it, not dropped.
    [['--kind', 'tokenspeed:1', '--', '--pp', '2'], /the tokenspeed simulator refuses the engine flags: unknown flag --pp/],
    [['--kind', 'sglang:1', '--', '--port', '4000'], /--port after -- is serve's to set/],
  ])('serve %j: usage on stderr, exit 2, nothing started', async (args, message) => {
    const r = await serveFails(...args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toMatch(/usage: rlgate serve/);
    expect(r.stdout).toBe('');
  });
});
