// `rlgate trainer --nats-url` as a trainer runs it: a child process that asks a real gateway for a
// distributed refit over NATS (plan and refit on rl.refit.request, report subject subscribed
// first), is rank 0 of the broadcast group the SGLang simulators join, and exits with the
// documented code. The outcome is judged on the simulators' own state.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjects } from '../../../src/bus/subjects.ts';
import { connectBus, type Bus } from '../../../src/bus/connection.ts';
import { startTestGateway, type TestGateway } from '../../fixtures/gateway.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../../fixtures/gateway-process.ts';
import { startTestNats, type TestNats } from '../../fixtures/nats-server.ts';
import { CLI } from '../../fixtures/entry.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../../fixtures/sglang-sim.ts';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment without anything that would pick a NATS server or subject root for the trainer. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/^(RLGATE_NATS_|NATS_URL$|RLGATE_SUBJECT_ROOT$|RLGATE_ADMIN_KEY$)/.test(k)) delete env[k];
  return env;
}

/** `rlgate trainer ...` as a child process, to its exit. */
function trainer(args: string[], timeoutMs = 90_000): Promise<Run> {
  return trainerProcess(args, timeoutMs).done;
}

function trainerProcess(args: string[], timeoutMs = 90_000): { done: Promise<Run>; output(): string } {
  let stdout = '';
  let stderr = '';
  const done = new Promise<Run>((resolve, reject) => {
    const child = spawn(process.execPath, [...CLI, 'trainer', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: cleanEnv(),
    });
    child.stdout!.on('data', (d) => (stdout += d));
    child.stderr!.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trainer did not exit within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
  return { done, output: () => `stdout: ${stdout}\nstderr: ${stderr}` };
}

type Loaded = Array<{ name: string; checksum: string; bytes: number }>;

describe('rlgate trainer over NATS', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rlgate-trainer-'));
    sims = await Promise.all([spawnSglangSim(['--tp-size', '1', '--token-rate', '0']), spawnSglangSim(['--tp-size', '1', '--token-rate', '0'])]);
    t = await startTestGateway({ rl: { controlTimeoutSecs: 10 } });
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function expectLoaded(sim: SimProcess, version: string, sent: Loaded): Promise<void> {
    const st = await sim.state();
    expect(st.weightVersion).toBe(version);
    expect(st.paused).toBeNull();
    const loaded = new Map<string, string>((st.weights.tensors as Loaded).map((x) => [x.name, x.checksum]));
    for (const x of sent) expect(loaded.get(x.name), `${sim.url} ${x.name}`).toBe(x.checksum);
    expect(st.weights.groups).toEqual([]); // the group was destroyed after the refit
  }

  it('refits two engines: exit 0, the report on stdout, the bytes sent are the bytes loaded', async () => {
    const sentFile = join(dir, 'sent-1.json');
    // 96 KiB of 64x64 bfloat16 parameters (8 KiB each) = 12 parameters, 5 per call = 3 chunks.
    const run = await trainer([
      '--nats-url',
      t.nats.url,
      '--version',
      '1',
      '--bytes',
      '96KiB',
      '--shape',
      '64,64',
      '--per-chunk',
      '5',
      '--refit-id',
      'trainer-nats-1',
      '--json',
      '--sent-file',
      sentFile,
    ]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ id: 'trainer-nats-1', status: 'succeeded', weight_version: '1', total: 2, succeeded: 2, world_size: 3, failed: [] });
    expect(report.engines.map((e: { url: string }) => e.url).sort()).toEqual(sims.map((s) => s.url).sort());
    expect(run.stderr).toMatch(
      /refit trainer-nats-1 to version 1: 200, report from the (NATS reply|report event|report subject|refit journal), world_size 3, 3\/3 chunks, 12 tensors broadcast\n/,
    );

    const sent = JSON.parse(readFileSync(sentFile, 'utf8')) as Loaded;
    expect(sent.map((x) => x.name)).toEqual(Array.from({ length: 12 }, (_, i) => `model.layers.${i}.mlp.weight`));
    expect(sent.every((x) => x.bytes === 64 * 64 * 2)).toBe(true);
    for (const s of sims) await expectLoaded(s, '1', sent);
    // Every chunk went to every engine once: one refit, never two.
    for (const s of sims) {
      const calls = (await s.requests()).filter((r) => r.path === '/update_weights_from_distributed');
      expect(calls).toHaveLength(3);
    }

    // Any replica answers for the refit by its id: the same report.
    const byId = await t.http('GET', '/v1/rl/refits/trainer-nats-1');
    expect(byId.json).toMatchObject({ id: 'trainer-nats-1', status: 'succeeded' });
  });

  it('the same --refit-id again is the same refit: its report, nothing runs twice; with another version, exit 1', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const again = await trainer([
      '--nats-url',
      t.nats.url,
      '--version',
      '1',
      '--bytes',
      '96KiB',
      '--shape',
      '64,64',
      '--per-chunk',
      '5',
      '--refit-id',
      'trainer-nats-1',
      '--json',
    ]);
    expect(again.code, again.stderr).toBe(0);
    const first = (await t.http('GET', '/v1/rl/refits/trainer-nats-1')).json;
    expect(JSON.parse(again.stdout)).toEqual(first);
    const other = await trainer(['--nats-url', t.nats.url, '--version', '9', '--params', '2', '--refit-id', 'trainer-nats-1']);
    expect(other.code, other.stderr).toBe(1);
    // The gateway refuses a known refit id with another version (409 refit_id_conflict).
    expect(other.stderr).toContain('refit_id_conflict');
    expect(other.stdout).toBe('');
    for (const s of sims) {
      expect((await s.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path))).toEqual([]);
      expect((await s.state()).weightVersion).toBe('1');
    }
  });

  it('one engine refuses a chunk: exit 3, and the summary names it', async () => {
    const [bad, good] = sims as [SimProcess, SimProcess];
    await Promise.all(sims.map((s) => s.clearRequests()));
    await bad.setFaults({ route: 'update_weights_from_distributed', status: 500, times: 1 });
    let run: Run;
    try {
      run = await trainer(['--nats-url', t.nats.url, '--version', '2', '--params', '6', '--shape', '32,32', '--per-chunk', '3']);
    } finally {
      await bad.clearFaults();
    }
    expect(run.code, run.stderr).toBe(3);
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^refit \S+ to version 2: (partial|failed), [01] of 2 engines \(world_size 3, /);
    const badLine = lines.find((l) => l.includes(bad.url));
    expect(badLine).toMatch(/^ {2}failed +http:\/\/127\.0\.0\.1:\d+ +refit \(update_weights_from_distributed 1\/2\): .*HTTP 500/);
    expect(run.stderr).toMatch(/: 207, report from /);
    expect(lines.filter((l) => /^ {2}failed /.test(l))).toHaveLength(2);
    // A rank that refused a chunk breaks the broadcast for every rank (as with NCCL), so no engine
    // holds all of version 2 nor advertises it (the version rides on the last chunk), and none is left paused.
    expect(lines.find((l) => l.includes(good.url))).toMatch(/^ {2}failed /);
    for (const s of sims) {
      const st = await s.state();
      expect(st.paused, s.url).toBeNull();
      expect(st.weightVersion, s.url).toBe('1');
    }
  });

  it('no gateway on the subject root: exit 4 (no report), nothing refitted', async () => {
    await Promise.all(sims.map((s) => s.clearRequests()));
    const run = await trainer(['--nats-url', t.nats.url, '--subject-root', 'nobody', '--version', '3', '--params', '2']);
    expect(run.code, run.stderr).toBe(4);
    expect(run.stderr).toContain('no gateway answers on nobody.refit.request');
    expect(run.stdout).toBe('');
    for (const s of sims) expect((await s.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path))).toEqual([]);
  });

  it('a refit the gateway refuses (no engine matches the selector): exit 1', async () => {
    const run = await trainer(['--nats-url', t.nats.url, '--version', '3', '--params', '2', '--selector', 'role=nothing-has-this']);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr).toContain('no_workers_match');
  });

  it('--help exits 0, documents the exit codes and connects nowhere', async () => {
    // A listener standing where --nats-url points: it must see no connection.
    const server: Server = createServer();
    let connections = 0;
    server.on('connection', (s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      const run = await trainer(['--nats-url', `nats://127.0.0.1:${port}`, '--version', '1', '--help']);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('usage: rlgate trainer');
      expect(run.stdout).toMatch(/exit codes: 0 .*\(200\); 3 .*\(207\); 1 .*refused.*; 4 no report/s);
      expect(connections).toBe(0);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('--gateway still refits over HTTP: exit 0, one summary line per engine', async () => {
    const sentFile = join(dir, 'sent-http.json');
    const run = await trainer(['--gateway', t.url, '--version', '5', '--params', '4', '--shape', '32,32', '--per-chunk', '4', '--sent-file', sentFile]);
    expect(run.code, run.stderr).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^refit \S+ to version 5: succeeded, 2 of 2 engines \(world_size 3, \d+ ms\)$/);
    for (const s of sims)
      expect(lines.find((l) => l.includes(s.url))).toMatch(/^ {2}ok +http:\/\/127\.0\.0\.1:\d+ +version 5 +rank_offset [12] +pause \d+ ms, refit \d+ ms/);
    expect(run.stderr).toMatch(/: 200, report from the HTTP answer, world_size 3, 1\/1 chunks, 4 tensors broadcast\n/);
    const sent = JSON.parse(readFileSync(sentFile, 'utf8')) as Loaded;
    expect(sent).toHaveLength(4);
    for (const s of sims) await expectLoaded(s, '5', sent);
  });

  it('bad flags: exit 2 without connecting', async () => {
    const both = await trainer(['--nats-url', t.nats.url, '--gateway', t.url, '--version', '1']);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('not both');
    const neither = await trainer(['--version', '1']);
    expect(neither.code).toBe(2);
    expect(neither.stderr).toContain('--nats-url (or --gateway) is required');
  });
});

describe('rlgate trainer over NATS when the replica it asked dies', () => {
  let nats: TestNats;
  let bus: Bus;
  let sim: SimProcess;
  const replicas: GatewayProcess[] = [];
  const launch = async (id: string) => {
    const g = await startGatewayProcess([
      '--nats-url',
      nats.url,
      '--replica-id',
      id,
      '--lease-secs',
      '2',
      '--health-check-interval-secs',
      '2',
      '--retry-interval-secs',
      '1',
      '--rl-control-timeout-secs',
      '60',
    ]);
    replicas.push(g);
    return g;
  };

  beforeAll(async () => {
    nats = await startTestNats();
    bus = await connectBus({ url: nats.url, name: 'test-observer' });
    sim = await spawnSglangSim(['--tp-size', '1', '--token-rate', '0']);
  });
  afterAll(async () => {
    await bus?.close();
    await Promise.all(replicas.map((g) => g.stop()));
    await sim?.stop();
    await nats?.stop();
  });

  it('takes the report from the report event, the report subject or the journal: one refit, exit 0', async () => {
    // Replica a is alone when the trainer asks, so a answers it and runs the refit.
    const a = await launch('a');
    expect((await a.http('POST', '/workers', { url: sim.url })).status).toBe(202);
    await until('the engine ready on a', 20_000, async () => (await a.http('GET', '/v1/rl/workers')).json.workers?.[0]?.health === 'ready');
    // The resume is held long enough for replica b to start; the one b sends again is not.
    await sim.setFaults({ route: 'continue_generation', delayMs: 60_000, times: 1 });
    const refitId = 'trainer-failover';
    const reports: unknown[] = [];
    const sub = bus.subscribe(subjects('rl').refitReport(refitId), (data) => void reports.push(data));
    const run = trainerProcess(
      ['--nats-url', nats.url, '--version', '7', '--params', '4', '--shape', '32,32', '--per-chunk', '2', '--refit-id', refitId, '--json'],
      120_000,
    );

    let seen: unknown;
    await until('the refit in its resume phase on a', 60_000, async () => {
      const r = await a.http('GET', `/v1/rl/refits/${refitId}`);
      seen = r.json;
      return r.status === 200 && r.json.status === 'running' && r.json.phase === 'resume';
    }).catch((err: Error) => {
      throw new Error(`${err.message}; last seen ${JSON.stringify(seen)}\ntrainer ${run.output()}\ngateway a: ${a.stderr()}`);
    });
    const b = await launch('b');
    await until('the engine known to b', 20_000, async () => (await b.http('GET', '/v1/rl/workers')).json.workers?.[0]?.health === 'ready');
    await a.kill(); // the replica holding the trainer's request: its reply can never come

    const out = await run.done;
    sub.unsubscribe();
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toMatch(/refit trainer-failover to version 7: 200, report from the (report event|report subject|refit journal), /);
    const report = JSON.parse(out.stdout);
    expect(report).toMatchObject({ id: refitId, status: 'succeeded', failed: [] });
    expect(reports).toHaveLength(1);
    const st = await sim.state();
    expect(st.weightVersion).toBe('7');
    expect(st.paused).toBeNull();
    // Never a second refit: each chunk reached the engine once.
    expect((await sim.requests()).filter((r) => r.path === '/update_weights_from_distributed')).toHaveLength(2);
  }, 150_000);
});
