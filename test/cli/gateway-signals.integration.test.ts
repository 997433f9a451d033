// `rlgate gateway` stopped the ways a user stops it, as real processes: started with `npx` in a
// process group of its own (as a shell starts a job), then Ctrl-C (SIGINT to the whole group),
// SIGTERM to npx's pid only (npm does not pass it on: the gateway must notice its parent is gone),
// and Ctrl-C while its embedded nats-server is dead and kept down. Each time every process of the
// group is gone within 5 s: the gateway's node, its nats-server, and anything else it started.
// Without npx: the shutdown deadline (--shutdown-timeout-secs) and a second signal end a shutdown
// that is stuck behind a hung engine call.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../fixtures/gateway-process.ts';
import { alive, commandOf, groupMembers } from '../fixtures/pids.ts';
import { squatPort, type PortSquatter } from '../fixtures/port-squatter.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// The bound: gone within 5 s of the signal.
const EXIT_BOUND_MS = 5_000;
const START_TIMEOUT_MS = 60_000; // npx resolves the package first; a loaded machine is slow

/** The environment without any RLGATE_* variable, so the host's settings cannot leak in. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_')) env[k] = v;
  return env;
}

type LogLine = { msg?: string; pid?: number; nats_pid?: number; [k: string]: unknown };

interface Launched {
  /** The spawned process (npx, or the gateway's node itself), leader of its own process group. */
  leader: ChildProcess;
  pgid: number;
  url: string;
  natsUrl: string;
  /** The gateway's node process. */
  nodePid: number;
  natsPid: number;
  logs: LogLine[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const launched: Launched[] = [];
const squatters: PortSquatter[] = [];
const sims: SimProcess[] = [];
afterEach(async () => {
  // A failed test must not leave its processes behind either.
  for (const l of launched.splice(0)) {
    for (const pid of groupMembers(l.pgid)) process.kill(pid, 'SIGKILL');
  }
  await Promise.all(squatters.splice(0).map((s) => s.release()));
  await Promise.all(sims.splice(0).map((s) => s.stop()));
});

/** Starts `rlgate gateway` in a new process group and waits for its listening line and nats pid. */
async function launch(how: 'npx' | 'node', args: string[] = []): Promise<Launched> {
  const [cmd, argv] =
    how === 'npx'
      ? ['npx', ['rlgate', 'gateway', '--port', '0', '--log-level', 'info', ...args]]
      : [process.execPath, ['bin/rlgate.mjs', 'gateway', '--port', '0', '--log-level', 'info', ...args]];
  const leader = spawn(cmd, argv, { cwd: REPO_ROOT, env: cleanEnv(), detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => leader.once('exit', (code, signal) => res({ code, signal })));
  const logs: LogLine[] = [];
  createInterface({ input: leader.stderr! }).on('line', (line) => {
    try {
      logs.push(JSON.parse(line) as LogLine);
    } catch {
      logs.push({ msg: line });
    }
  });
  let listening: { url: string; nats_url: string } | undefined;
  createInterface({ input: leader.stdout! }).on('line', (line) => {
    try {
      const ev = JSON.parse(line);
      if (ev.event === 'listening') listening = ev;
    } catch {
      // not our line
    }
  });
  const l: Launched = { leader, pgid: leader.pid!, url: '', natsUrl: '', nodePid: 0, natsPid: 0, logs, exited };
  launched.push(l);
  await until(`${how} rlgate gateway to listen`, START_TIMEOUT_MS, async () => listening);
  const started = logs.find((x) => x.msg === 'embedded nats-server started');
  l.url = listening!.url;
  l.natsUrl = listening!.nats_url;
  l.nodePid = started!.pid!;
  l.natsPid = started!.nats_pid!;
  expect(alive(l.nodePid) && alive(l.natsPid)).toBe(true);
  return l;
}

/** Every process of the group gone within the bound (the gateway's node and nats-server named). */
async function expectAllGone(l: Launched, since: number): Promise<void> {
  await until(`every process of group ${l.pgid} to exit`, EXIT_BOUND_MS - (Date.now() - since), async () => groupMembers(l.pgid).length === 0).catch((err) => {
    const left = groupMembers(l.pgid).map((p) => `${p} ${commandOf(p)}`);
    throw new Error(`${(err as Error).message}; left: ${left.join('; ')}\n${JSON.stringify(l.logs.slice(-8))}`);
  });
  expect(alive(l.nodePid)).toBe(false);
  expect(alive(l.natsPid)).toBe(false);
}

const stopped = (l: Launched) => l.logs.some((x) => x.msg === 'gateway stopped');
const reason = (l: Launched) => l.logs.find((x) => x.msg === 'shutting down')?.reason;

describe('npx rlgate gateway', () => {
  it('Ctrl-C (SIGINT to its process group) stops it within 5 s and leaves no process', async () => {
    const l = await launch('npx');
    const health = await request(`${l.url}/health`);
    expect(health.statusCode).toBe(200);
    await health.body.dump();

    const t0 = Date.now();
    process.kill(-l.pgid, 'SIGINT');
    await expectAllGone(l, t0);
    expect(reason(l)).toBe('SIGINT');
    expect(stopped(l)).toBe(true);
  }, 90_000);

  it('SIGTERM to the npx pid only: the gateway notices its parent died, stops within 5 s, leaves no process', async () => {
    const l = await launch('npx');
    expect(l.nodePid).not.toBe(l.pgid); // npm exec → sh → node: the signal reaches npm alone

    const t0 = Date.now();
    process.kill(l.pgid, 'SIGTERM');
    await expectAllGone(l, t0);
    expect(reason(l)).toBe('parent_exited');
    expect(stopped(l)).toBe(true);
  }, 90_000);

  it('Ctrl-C while its embedded nats-server is dead and kept down: still gone within 5 s', async () => {
    const l = await launch('npx');
    const port = Number(new URL(l.natsUrl).port);
    // Kill the server and hold its port, so the gateway's restarts fail and NATS stays down. The
    // port is free the moment the server dies and the gateway restarts it 200 ms later: asked for
    // every 10 ms from the kill on, the port is ours first (a loaded machine that still loses the
    // race kills the restarted server and tries again).
    let pid = l.natsPid;
    const restarts = () => l.logs.filter((x) => x.msg === 'embedded nats-server restarted');
    for (let attempt = 1; ; attempt++) {
      const before = restarts().length;
      process.kill(pid, 'SIGKILL');
      let held = false;
      const deadline = Date.now() + EXIT_BOUND_MS;
      while (!held && restarts().length === before && Date.now() < deadline) {
        const squatter = squatPort(port);
        held = await squatter.held.then(
          () => true,
          () => false,
        );
        if (held) squatters.push(squatter);
        else await new Promise((r) => setTimeout(r, 10));
      }
      if (held) break;
      if (attempt >= 5) throw new Error(`the restarted nats-server took port ${port} first ${attempt} times`);
      // The restart that took the port is the one after this kill, not an earlier one.
      const restarted = await until('the restarted server', 10_000, async () => restarts()[before]);
      pid = restarted.nats_pid!;
    }
    await until('a failed restart on the held port', 15_000, async () =>
      l.logs.some((x) => String(x.msg).startsWith('embedded nats-server could not be restarted')),
    );
    const health = await request(`${l.url}/health`);
    expect(health.statusCode).toBe(503);
    await health.body.dump();

    const t0 = Date.now();
    process.kill(-l.pgid, 'SIGINT');
    await expectAllGone(l, t0);
    expect(stopped(l)).toBe(true);
  }, 90_000);
});

describe('rlgate gateway whose shutdown is stuck behind a hung engine call', () => {
  /** A gateway with one engine whose weight load never answers, and a refit waiting on it. */
  async function stuck(args: string[]): Promise<Launched> {
    const sim = await spawnSglangSim(['--token-rate', '0']);
    sims.push(sim);
    await sim.setFaults({ route: 'update_weights_from_disk', hang: true });
    const l = await launch('node', ['--enable-rl', '--worker-urls', sim.url, ...args]);
    await until('the engine to be ready', 20_000, async () => {
      const r = await request(`${l.url}/v1/rl/workers`);
      const body = (await r.body.json()) as { workers: Array<{ health?: string }> };
      return body.workers.length === 1 && body.workers[0]!.health === 'ready';
    });
    // The refit's answer never comes: the process is stopped under it.
    void request(`${l.url}/v1/rl/refits`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ weight_version: '2', source: { kind: 'disk', model_path: '/m' } }),
    }).then(
      (r) => r.body.dump(),
      () => undefined,
    );
    await until('the engine to hold the weight load', 20_000, async () => (await sim.requests()).some((r) => r.path === '/update_weights_from_disk'));
    return l;
  }

  it('exits (code 1) when --shutdown-timeout-secs passes, and leaves no process', async () => {
    const l = await stuck(['--shutdown-timeout-secs', '2']);
    const t0 = Date.now();
    process.kill(l.pgid, 'SIGTERM');
    await expectAllGone(l, t0);
    expect((await l.exited).code).toBe(1);
    expect(l.logs.some((x) => x.msg === 'shutdown did not finish in time; exiting anyway')).toBe(true);
    expect(stopped(l)).toBe(false);
  }, 90_000);

  it('a second SIGTERM exits at once (143), and leaves no process', async () => {
    const l = await stuck(['--shutdown-timeout-secs', '600']);
    process.kill(l.pgid, 'SIGTERM');
    await until('the shutdown to start', EXIT_BOUND_MS, async () => reason(l) === 'SIGTERM');
    const t0 = Date.now();
    process.kill(l.pgid, 'SIGTERM');
    await expectAllGone(l, t0);
    expect((await l.exited).code).toBe(143);
    expect(l.logs.some((x) => x.msg === 'second signal: exiting now')).toBe(true);
  }, 90_000);
});
