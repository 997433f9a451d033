// Registration is safe by default (issue 11, item 2), over a real gateway and SGLang simulators:
// worker URLs that are refused (400, nothing registered, nothing sent to the engine), the
// `--allowed-worker-hosts` allow-list, label bounds at their edges, re-registration without the
// admin key (the worker keeps its key, labels and version), and `--registration-key`.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, testConfig, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { loadConfig } from '../../src/gateway/config.ts';
import { LABEL_LIMITS } from '../../src/fleet/label-limits.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function listed(t: TestGateway): Promise<string[]> {
  const res = await t.http('GET', '/workers');
  expect(res.status).toBe(200);
  return res.json.workers.map((w: { url: string }) => w.url);
}

describe('worker URL rules', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let hostPort: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    hostPort = `127.0.0.1:${sim.port}`;
    t = await startTestGateway();
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  // [class, url, reason]: each names the simulator where it can, so a probe would show up there.
  const refused = (): Array<[string, string, string]> => [
    ['userinfo', `http://admin:hunter2@${hostPort}`, 'userinfo'],
    ['userinfo with a DP rank', `http://admin:hunter2@${hostPort}@1`, 'userinfo'],
    ['a query', `http://${hostPort}/?probe=1`, 'query'],
    ['a fragment', `http://${hostPort}/#frag`, 'fragment'],
    ['dot segments', `http://${hostPort}/../..`, 'path'],
    ['encoded dot segments', `http://${hostPort}/%2e%2e/x`, 'path'],
    ['an unknown scheme', `ftp://${hostPort}`, 'scheme'],
    ['a 2,000-character host', `http://${'a'.repeat(2000)}:1`, 'host'],
    ['a 64-character host label', `http://${'a'.repeat(64)}.example:1`, 'host'],
    ['a bad host character', `http://bad%host:1`, 'host'],
    ['port 0', 'http://127.0.0.1:0', 'port'],
    ['AWS metadata', 'http://169.254.169.254/latest/meta-data/', 'metadata'],
    ['AWS metadata as one number', 'http://2852039166/', 'metadata'],
    ['AWS metadata over IPv6', 'http://[fd00:ec2::254]:80', 'metadata'],
    ['GCP metadata', 'http://metadata.google.internal', 'metadata'],
    ['Alibaba metadata', 'http://100.100.100.200', 'metadata'],
    ['IPv4 link-local', 'http://169.254.10.20:8000', 'link_local'],
    ['IPv6 link-local', 'http://[fe80::1]:8000', 'link_local'],
    ['IPv4-mapped link-local', 'http://[::ffff:169.254.10.20]:8000', 'link_local'],
    ['gRPC to metadata', 'grpc://169.254.169.254:50051', 'metadata'],
  ];

  it('POST /workers refuses each class with 400 invalid_request naming the reason, and registers nothing', async () => {
    for (const [what, url, reason] of refused()) {
      const res = await t.http('POST', '/workers', { body: { url, worker_type: 'regular' } });
      expect(res.status, what).toBe(400);
      expect(res.json, what).toMatchObject({ error: 'invalid_request', field: 'url', reason });
      expect(res.text, what).not.toContain('hunter2');
    }
    expect(await listed(t)).toEqual([]);
  });

  it('POST /add_worker refuses the same URLs with 400 and registers nothing', async () => {
    for (const [what, url, reason] of refused()) {
      const res = await t.http('POST', `/add_worker?url=${encodeURIComponent(url)}&timeout_secs=1`);
      expect(res.status, what).toBe(400);
      expect(res.json, what).toMatchObject({ error: 'invalid_request', field: 'url', reason });
      expect(res.text, what).not.toContain('hunter2');
    }
    expect(await listed(t)).toEqual([]);
  });

  it('sends nothing to an engine named by a refused URL (the simulator saw no request)', async () => {
    // Probes run every second in tests: a registered worker would have been discovered by now.
    await sleep(2500);
    expect(await sim.requests()).toEqual([]);
    // And the same engine under a valid URL is registered and discovered.
    await t.register([sim.url]);
    expect(await listed(t)).toEqual([sim.url]);
    expect((await sim.requests()).length).toBeGreaterThan(0);
  });

  it('--worker-urls is held to the same rules at start, naming the entry and never the password', () => {
    expect(() => testConfig({ workerUrls: ['http://127.0.0.1:1', 'http://169.254.169.254'] })).toThrow(/--worker-urls entry 2: .*metadata/);
    expect(() => testConfig({ workerUrls: ['http://u:hunter2@127.0.0.1:1'] })).toThrow(/user name or password/);
    try {
      testConfig({ workerUrls: ['http://u:hunter2@127.0.0.1:1'] });
    } catch (err) {
      expect((err as Error).message).not.toContain('hunter2');
    }
    expect(testConfig({ workerUrls: ['http://127.0.0.1:1', 'grpc://10.0.0.5:30000', 'ipc:///run/rlgate/e0'] }).workerUrls).toHaveLength(3);
  });

  it('--allowed-worker-hosts is a flag, an environment variable and a config key, and a bad entry stops the start', () => {
    expect(
      loadConfig(['--allowed-worker-hosts', '10.0.0.0/8', '169.254.169.254', '--worker-urls', 'http://169.254.169.254:80'], {}).allowedWorkerHosts,
    ).toEqual(['10.0.0.0/8', '169.254.169.254']);
    expect(() => loadConfig(['--allowed-worker-hosts', '10.0.0.0/8', '--worker-urls', 'http://127.0.0.1:1'], {})).toThrow(/not in --allowed-worker-hosts/);
    expect(loadConfig([], { RLGATE_ALLOWED_WORKER_HOSTS: 'engines.internal,*.gpu.internal' }).allowedWorkerHosts).toEqual([
      'engines.internal',
      '*.gpu.internal',
    ]);
    expect(() => loadConfig(['--allowed-worker-hosts', '10.0.0.0/33'], {})).toThrow(/not a valid CIDR/);
    expect(() => loadConfig(['--allowed-worker-hosts', 'bad host!'], {})).toThrow(/allowed-worker-hosts/);
  });
});

describe('--allowed-worker-hosts', () => {
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ allowedWorkerHosts: ['127.0.0.0/8', '169.254.169.254', '*.gpu.internal'] });
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('lets an allowed metadata address and an allowed name suffix through', async () => {
    for (const url of ['http://169.254.169.254:9', 'http://node-1.gpu.internal:9']) {
      const res = await t.http('POST', '/workers', { body: { url } });
      expect(res.status, url).toBe(202);
    }
    expect(await listed(t)).toEqual(expect.arrayContaining(['http://169.254.169.254:9', 'http://node-1.gpu.internal:9']));
  });

  it('accepts only the hosts it names: localhost, other link-local and private hosts are refused', async () => {
    const before = await listed(t);
    for (const url of [`http://localhost:${sim.port}`, 'http://169.254.1.1:9', 'http://10.0.0.5:9', 'http://gpu.internal:9']) {
      const res = await t.http('POST', '/workers', { body: { url } });
      expect(res.status, url).toBe(400);
      expect(res.json, url).toMatchObject({ error: 'invalid_request', field: 'url', reason: 'not_allowed' });
    }
    expect(await listed(t)).toEqual(before);
  });

  it('an allowed loopback engine registers and is discovered', async () => {
    const [id] = await t.register([sim.url], { ready: 0 });
    let status = '';
    for (let i = 0; i < 400 && status !== 'ready'; i++) {
      status = (await t.http('GET', `/workers/${id}`)).json.status;
      if (status !== 'ready') await sleep(50);
    }
    expect(status).toBe('ready');
  });
});

describe('label bounds', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    [id] = await t.register([{ url: sim.url, labels: { team: 'a' } }]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  const other = (n: number) => `http://127.0.0.1:${40000 + n}`;

  it('a 256-character key is accepted and a 257-character one refused', async () => {
    const ok = await t.http('POST', '/workers', { body: { url: other(1), labels: { ['k'.repeat(256)]: 'v' } } });
    expect(ok.status).toBe(202);
    const bad = await t.http('POST', '/workers', { body: { url: other(2), labels: { ['k'.repeat(257)]: 'v' } } });
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ error: 'invalid_request', field: 'labels', limit: 'key_length', max: 256 });
    expect(await listed(t)).not.toContain(other(2));
  });

  it(`values up to ${LABEL_LIMITS.maxValueLength} characters pass, one more is refused`, async () => {
    expect((await t.http('POST', '/workers', { body: { url: other(3), labels: { v: 'x'.repeat(LABEL_LIMITS.maxValueLength) } } })).status).toBe(202);
    const bad = await t.http('POST', '/workers', { body: { url: other(4), labels: { v: 'x'.repeat(LABEL_LIMITS.maxValueLength + 1) } } });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toBe('invalid_request');
    expect(await listed(t)).not.toContain(other(4));
  });

  it(`${LABEL_LIMITS.maxCount} labels pass, one more is refused`, async () => {
    const labels = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`l${i}`, 'v']));
    expect((await t.http('POST', '/workers', { body: { url: other(5), labels: labels(LABEL_LIMITS.maxCount) } })).status).toBe(202);
    const bad = await t.http('POST', '/workers', { body: { url: other(6), labels: labels(LABEL_LIMITS.maxCount + 1) } });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toBe('invalid_request');
    expect(await listed(t)).not.toContain(other(6));
  });

  it(`labels over ${LABEL_LIMITS.maxTotalBytes} bytes in all are refused, each within its own bounds`, async () => {
    const labels = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`l${i}`, 'x'.repeat(4000)]));
    const bad = await t.http('POST', '/workers', { body: { url: other(7), labels } });
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ error: 'invalid_request', field: 'labels', limit: 'total_bytes', max: LABEL_LIMITS.maxTotalBytes });
    expect(await listed(t)).not.toContain(other(7));
  });

  it('a 10 MB label (key or value) is refused, and nothing is registered', async () => {
    const before = await listed(t);
    for (const labels of [{ ['k'.repeat(10 * 1024 * 1024)]: 'v' }, { v: 'x'.repeat(10 * 1024 * 1024) }]) {
      const res = await t.http('POST', '/workers', { body: { url: other(8), labels } });
      expect(res.status).toBe(400);
      expect(res.json.error).toBe('invalid_request');
    }
    expect(await listed(t)).toEqual(before);
    expect(await listed(t)).not.toContain(other(8));
  });

  it('PUT and PATCH /workers/{id} are held to the same bounds and change nothing when refused', async () => {
    for (const method of ['PUT', 'PATCH']) {
      const res = await t.http(method, `/workers/${id}`, { body: { labels: { ['k'.repeat(257)]: 'v' } } });
      expect(res.status, method).toBe(400);
      expect(res.json, method).toMatchObject({ error: 'invalid_request', field: 'labels', limit: 'key_length' });
    }
    expect((await t.http('GET', `/workers/${id}`)).json.labels.team).toBe('a');
  });
});

describe('re-registration without the admin key', () => {
  const ADMIN = { authorization: 'Bearer adm' };
  let t: TestGateway;
  let sim: SimProcess;
  let id: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0', '--api-key', 'engine-secret']);
    t = await startTestGateway({ adminKey: 'adm' });
    const res = await t.http('POST', '/workers', { body: { url: sim.url, api_key: 'engine-secret', labels: { team: 'a', 'rl.role': 'x' } }, headers: ADMIN });
    expect(res.status).toBe(202);
    id = res.json.id;
    await t.waitReady(1);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('a plain POST /workers answers 202 and keeps the key, labels and version; discovery runs again', async () => {
    const before = (await t.http('GET', `/workers/${id}`)).json;
    await sim.clearRequests();
    for (const body of [{ url: sim.url }, { url: sim.url, worker_type: 'regular' }, { url: `${sim.url}/`, labels: { team: 'b' } }]) {
      const res = await t.http('POST', '/workers', { body });
      expect(res.status, JSON.stringify(body)).toBe(202);
      expect(res.json).toMatchObject({ id, status: 'accepted' });
    }
    const after = (await t.http('GET', `/workers/${id}`)).json;
    expect(after.labels).toEqual(before.labels);
    expect(after.labels.team).toBe('a');
    expect(after.labels['rl.role']).toBe('x');
    expect(after.labels.weight_version).not.toBe('0');
    // Liveness: the engine is asked again, with its key.
    let discovery: Awaited<ReturnType<SimProcess['requests']>> = [];
    for (let i = 0; i < 200 && discovery.length === 0; i++) {
      discovery = (await sim.requests()).filter((r) => r.path.includes('server_info'));
      if (discovery.length === 0) await sleep(50);
    }
    expect(discovery.length).toBeGreaterThan(0);
    expect(discovery.every((r) => r.headers.authorization === 'Bearer engine-secret')).toBe(true);
  });

  it('POST /add_worker of the known URL keeps the key too', async () => {
    const res = await t.http('POST', `/add_worker?url=${encodeURIComponent(sim.url)}&timeout_secs=10`);
    expect(res.status).toBe(200);
    expect((await t.http('GET', `/workers/${id}`)).json.labels.team).toBe('a');
  });

  it('a later engine call still authenticates with the kept key', async () => {
    await t.waitReady(1);
    await sim.clearRequests();
    const paused = await t.http('POST', `/v1/rl/workers/${id}/engine/pause_generation`, { body: {}, headers: ADMIN });
    expect(paused.status).toBe(200);
    expect(paused.json.status).toBe(200);
    const resumed = await t.http('POST', `/v1/rl/workers/${id}/engine/continue_generation`, { body: {}, headers: ADMIN });
    expect(resumed.status).toBe(200);
    expect(resumed.json.status).toBe(200);
    const calls = (await sim.requests()).filter((r) => r.path === '/pause_generation' || r.path === '/continue_generation');
    expect(calls.map((r) => r.headers.authorization)).toEqual(['Bearer engine-secret', 'Bearer engine-secret']);
  });

  it('a key, an rl.* label or a weight_version label without the admin bearer is still 401 and changes nothing', async () => {
    const before = (await t.http('GET', `/workers/${id}`)).json;
    for (const body of [
      { url: sim.url, api_key: '' },
      { url: sim.url, labels: { 'rl.control_url': 'http://127.0.0.1:1' } },
      { url: sim.url, labels: { weight_version: '0' } },
    ]) {
      const res = await t.http('POST', '/workers', { body });
      expect(res.status).toBe(401);
      expect(res.json.error).toBe('unauthorized');
    }
    const after = (await t.http('GET', `/workers/${id}`)).json;
    expect(after.labels).toEqual(before.labels);
    expect(after.weight_version).toBe(before.weight_version);
  });

  it('a new engine claiming a weight_version label without the admin bearer is 401 and not registered', async () => {
    const rogue = await spawnSglangSim(['--token-rate', '0']);
    try {
      const res = await t.http('POST', '/workers', { body: { url: rogue.url, labels: { weight_version: '999' } } });
      expect(res.status).toBe(401);
      expect(res.json.error).toBe('unauthorized');
      expect(await listed(t)).not.toContain(rogue.url);
      await sleep(300);
      expect((await rogue.requests()).length).toBe(0);
    } finally {
      await rogue.stop();
    }
  });

  it('another spelling of the known URL is the same worker: same id, one row, nothing changed', async () => {
    const before = (await t.http('GET', `/workers/${id}`)).json;
    for (const url of [
      `HTTP://127.0.0.1:${sim.port}`,
      `http://127.1:${sim.port}`,
      `http://0x7f000001:${sim.port}`,
      `http://[::ffff:127.0.0.1]:${sim.port}/`,
      `http://127.0.0.1.:${sim.port}//`,
    ]) {
      const res = await t.http('POST', '/workers', { body: { url } });
      expect(res.status, url).toBe(202);
      expect(res.json.id, url).toBe(id);
      expect(res.json.url, url).toBe(sim.url);
    }
    expect(await listed(t)).toEqual([sim.url]);
    expect((await t.http('GET', `/workers/${id}`)).json.labels).toEqual(before.labels);
  });

  it('with the admin bearer, a re-registration replaces the labels as before', async () => {
    const res = await t.http('POST', '/workers', { body: { url: sim.url, api_key: 'engine-secret', labels: { team: 'c' } }, headers: ADMIN });
    expect(res.status).toBe(202);
    const row = (await t.http('GET', `/workers/${id}`)).json;
    expect(row.labels.team).toBe('c');
    expect(row.labels).not.toHaveProperty('rl.role');
  });
});

describe('--registration-key', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0']), spawnSglangSim(['--token-rate', '0'])]);
    t = await startTestGateway({ adminKey: 'adm', registrationKey: 'reg' });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('POST /workers and /add_worker without it, or with a wrong one, are 401 and register nothing', async () => {
    for (const headers of [{}, { authorization: 'Bearer nope' }, { authorization: 'reg' }] as Array<Record<string, string>>) {
      const a = await t.http('POST', '/workers', { body: { url: sims[0]!.url }, headers });
      expect(a.status).toBe(401);
      expect(a.json.error).toBe('unauthorized');
      const b = await t.http('POST', `/add_worker?url=${encodeURIComponent(sims[0]!.url)}&timeout_secs=1`, { headers });
      expect(b.status).toBe(401);
      expect(b.json.error).toBe('unauthorized');
    }
    expect(await listed(t)).toEqual([]);
  });

  it('the registration bearer and the admin bearer both register', async () => {
    expect((await t.http('POST', '/workers', { body: { url: sims[0]!.url }, headers: { authorization: 'Bearer reg' } })).status).toBe(202);
    expect((await t.http('POST', '/workers', { body: { url: sims[1]!.url }, headers: { authorization: 'Bearer adm' } })).status).toBe(202);
    const added = await t.http('POST', `/add_worker?url=${encodeURIComponent(sims[2]!.url)}&timeout_secs=20`, { headers: { authorization: 'Bearer reg' } });
    expect(added.status).toBe(200);
    expect((await listed(t)).sort()).toEqual(sims.map((s) => s.url).sort());
  });

  it('reads are not behind it', async () => {
    expect((await t.http('GET', '/workers')).status).toBe(200);
  });

  it('comes from the flag, RLGATE_REGISTRATION_KEY, or --registration-key-file (given once, not empty)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rlgate-regkey-'));
    try {
      const file = join(dir, 'key');
      writeFileSync(file, 'reg-from-file\n');
      expect(loadConfig(['--registration-key-file', file], {}).registrationKey).toBe('reg-from-file');
      expect(loadConfig([], { RLGATE_REGISTRATION_KEY: 'reg-from-env' }).registrationKey).toBe('reg-from-env');
      expect(loadConfig(['--registration-key', 'reg-from-flag'], {}).registrationKey).toBe('reg-from-flag');
      expect(() => loadConfig(['--registration-key-file', file, '--registration-key', 'x'], {})).toThrow(/once/);
      const empty = join(dir, 'empty');
      writeFileSync(empty, '\n');
      expect(() => loadConfig(['--registration-key-file', empty], {})).toThrow(/empty/);
      expect(() => loadConfig(['--registration-key-file', join(dir, 'missing')], {})).toThrow(/cannot read/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
