// The gateway joins NATS servers that ask for credentials, one real nats-server per kind: user and
// password (in the URL or a password file), a token (file or URL), an nkey seed, a .creds file
// (operator/JWT mode) and TLS with a client certificate. The server's /connz names the user each
// connection logged in as. A refused login fails the start with an error, logs and a `listening`
// line (for the CLI) that never contain the secret.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { nkeys } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsAuthSettings } from '../../src/bus/connect-options.ts';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import type { Logger } from '../../src/obs/logger.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { CLI } from '../fixtures/entry.ts';
import { makeOperatorSetup } from '../fixtures/nats-jwt.ts';
import { startSecureNats, type SecureNats } from '../fixtures/secure-nats.ts';
import { makeTestCerts, type TestCerts } from '../fixtures/tls-certs.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PASSWORD = 'pw-Zq81-never-printed';
const TOKEN = 'tok-Hh27-never-printed';
const WRONG = 'wrong-Kp55-never-printed';

const dir = mkdtempSync(join(tmpdir(), 'rlgate-nats-creds-'));
const file = (name: string, content: string) => {
  const path = join(dir, name);
  writeFileSync(path, `${content}\n`, { mode: 0o600 });
  return path;
};

/** Every log line the gateway writes, as text. */
function capturingLogger(): { log: Logger; text: () => string } {
  const lines: string[] = [];
  const log = pino({ level: 'trace' }, { write: (s: string) => void lines.push(s) });
  return { log, text: () => lines.join('') };
}

/** The user name nats-server recorded for the gateway's connection (`authorized_user`). */
async function gatewayUser(nats: SecureNats, gw: Gateway): Promise<string | undefined> {
  const res = await fetch(`${nats.monitorUrl}/connz?auth=1`);
  const body = (await res.json()) as { connections?: Array<{ name?: string; authorized_user?: string }> };
  const conn = body.connections?.find((c) => c.name === `rlgate-gateway-${gw.replicaId}`);
  expect(conn, JSON.stringify(body)).toBeDefined();
  return conn?.authorized_user;
}

async function startWith(natsUrl: string, nats: Partial<NatsAuthSettings>) {
  const capture = capturingLogger();
  const gw = await startGateway({ ...testConfig(), natsUrl, nats: { ...testConfig().nats, ...nats } }, { log: capture.log });
  return { gw, logs: capture.text };
}

async function refusedWith(natsUrl: string, nats: Partial<NatsAuthSettings>): Promise<{ err: Error; logs: string }> {
  const capture = capturingLogger();
  try {
    const gw = await startGateway({ ...testConfig(), natsUrl, nats: { ...testConfig().nats, ...nats } }, { log: capture.log });
    await gw.close();
  } catch (err) {
    return { err: err as Error, logs: capture.text() };
  }
  throw new Error('the gateway started although its NATS login should have been refused');
}

/** The message, the causes' messages and the stack: everything an error could show. */
function everything(err: Error): string {
  const parts: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) parts.push(e.message, e.stack ?? '');
  return parts.join('\n');
}

let certs: TestCerts;
const servers: SecureNats[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});
beforeAll(() => {
  certs = makeTestCerts(dir);
});

async function server(conf: string): Promise<SecureNats> {
  const s = await startSecureNats({ conf });
  servers.push(s);
  return s;
}

describe('user and password', () => {
  let nats: SecureNats;
  beforeAll(async () => {
    nats = await server(`authorization { users: [ { user: "trainer-gw", password: "${PASSWORD}" } ] }`);
  });

  it('from --nats-user and --nats-password-file', async () => {
    const { gw, logs } = await startWith(nats.url, { user: 'trainer-gw', passwordFile: file('password', PASSWORD) });
    try {
      expect(await gatewayUser(nats, gw)).toBe('trainer-gw');
      expect(logs()).not.toContain(PASSWORD);
    } finally {
      await gw.close();
    }
  });

  it('from the URL: the gateway reports and logs the URL with its user info masked', async () => {
    const url = `nats://trainer-gw:${PASSWORD}@127.0.0.1:${nats.port}`;
    const { gw, logs } = await startWith(url, {});
    try {
      expect(await gatewayUser(nats, gw)).toBe('trainer-gw');
      expect(gw.natsUrl).toBe(`nats://***@127.0.0.1:${nats.port}`);
      expect(logs()).toContain(`nats://***@127.0.0.1:${nats.port}`);
      expect(logs()).not.toContain(PASSWORD);
    } finally {
      await gw.close();
    }
  });

  it('a wrong password is refused, and neither the error nor the logs contain it', async () => {
    const inUrl = await refusedWith(`nats://trainer-gw:${WRONG}@127.0.0.1:${nats.port}`, {});
    // The servers reach nats.js without their user info, so the error names the bare server.
    expect(inUrl.err.message).toContain(`cannot connect to NATS at nats://127.0.0.1:${nats.port}`);
    expect(inUrl.err.message).toMatch(/authorization/i);
    expect(everything(inUrl.err)).not.toContain(WRONG);
    expect(inUrl.logs).not.toContain(WRONG);

    const inFile = await refusedWith(nats.url, { user: 'trainer-gw', passwordFile: file('wrong-password', WRONG) });
    expect(inFile.err.message).toMatch(/authorization/i);
    expect(everything(inFile.err)).not.toContain(WRONG);
    expect(inFile.logs).not.toContain(WRONG);
  });

  it('no credentials at all are refused', async () => {
    const { err } = await refusedWith(nats.url, {});
    expect(err.message).toMatch(/authorization/i);
  });

  it('`rlgate gateway` prints a listening line and logs without the password', async () => {
    const url = `nats://trainer-gw:${PASSWORD}@127.0.0.1:${nats.port}`;
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_') && k !== 'NATS_URL') env[k] = v;
    const proc = spawn(process.execPath, [...CLI, 'gateway', '--port', '0', '--log-level', 'debug'], {
      cwd: REPO_ROOT,
      env: { ...env, RLGATE_NATS_URL: url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
    // 'exit' may come before the last of stderr is read from the pipe; 'close' comes after it.
    const closed = new Promise<void>((res) => proc.once('close', () => res()));
    const guard = setTimeout(() => proc.kill('SIGKILL'), 45_000);
    try {
      const line = await new Promise<string>((res, rej) => {
        createInterface({ input: proc.stdout }).once('line', res);
        void exited.then((code) => rej(new Error(`gateway exited (${code}) before listening:\n${stderr}`)));
      });
      const listening = JSON.parse(line) as { event: string; nats_url: string };
      expect(listening.event).toBe('listening');
      expect(listening.nats_url).toBe(`nats://***@127.0.0.1:${nats.port}`);
      expect(line).not.toContain(PASSWORD);
      proc.kill('SIGTERM');
      await closed; // stderr is complete
      expect(stderr).toContain('gateway listening'); // the logs were really read
      expect(stderr).not.toContain(PASSWORD);
    } finally {
      clearTimeout(guard);
      proc.kill('SIGKILL');
    }
  }, 60_000);
});

describe('token', () => {
  let nats: SecureNats;
  beforeAll(async () => {
    nats = await server(`authorization { token: "${TOKEN}" }`);
  });

  it('from --nats-token-file', async () => {
    const { gw, logs } = await startWith(nats.url, { tokenFile: file('token', TOKEN) });
    try {
      // Token logins have no user name; the connection being listed at all is the proof.
      await gatewayUser(nats, gw);
      expect(logs()).not.toContain(TOKEN);
    } finally {
      await gw.close();
    }
  });

  it('from the URL (nats://TOKEN@host), masked in what the gateway reports', async () => {
    const { gw, logs } = await startWith(`nats://${TOKEN}@127.0.0.1:${nats.port}`, {});
    try {
      await gatewayUser(nats, gw);
      expect(gw.natsUrl).not.toContain(TOKEN);
      expect(logs()).not.toContain(TOKEN);
    } finally {
      await gw.close();
    }
  });

  it('a wrong token is refused without being shown', async () => {
    const { err, logs } = await refusedWith(nats.url, { tokenFile: file('wrong-token', WRONG) });
    expect(err.message).toMatch(/authorization/i);
    expect(everything(err)).not.toContain(WRONG);
    expect(logs).not.toContain(WRONG);
  });
});

describe('nkey seed', () => {
  const user = nkeys.createUser();
  const other = nkeys.createUser();
  let nats: SecureNats;
  beforeAll(async () => {
    nats = await server(`authorization { users: [ { nkey: "${user.getPublicKey()}" } ] }`);
  });

  it('from --nats-nkey-seed', async () => {
    const seed = new TextDecoder().decode(user.getSeed());
    const { gw, logs } = await startWith(nats.url, { nkeySeedFile: file('user.nk', seed) });
    try {
      expect(await gatewayUser(nats, gw)).toBe(user.getPublicKey());
      expect(logs()).not.toContain(seed);
    } finally {
      await gw.close();
    }
  });

  it('a seed the server does not know is refused without being shown', async () => {
    const seed = new TextDecoder().decode(other.getSeed());
    const { err, logs } = await refusedWith(nats.url, { nkeySeedFile: file('other.nk', seed) });
    expect(err.message).toMatch(/authorization/i);
    expect(everything(err)).not.toContain(seed);
    expect(logs).not.toContain(seed);
  });

  it('a file that holds no seed is a settings error naming the file only', async () => {
    const { err } = await refusedWith(nats.url, { nkeySeedFile: file('not-a-seed.nk', WRONG) });
    expect(err.message).toContain('not-a-seed.nk');
    expect(everything(err)).not.toContain(WRONG);
  });
});

describe('.creds file (operator mode)', () => {
  const setup = makeOperatorSetup();
  let nats: SecureNats;
  beforeAll(async () => {
    nats = await server(setup.serverConf);
  });

  it('from --nats-creds', async () => {
    const { gw, logs } = await startWith(nats.url, { credsFile: file('user.creds', setup.creds) });
    try {
      await gatewayUser(nats, gw);
      expect(logs()).not.toContain(setup.userSeed);
    } finally {
      await gw.close();
    }
  });

  it('the seed alone, without the JWT, is refused', async () => {
    const { err } = await refusedWith(nats.url, { nkeySeedFile: file('seed-only.nk', setup.userSeed) });
    expect(err.message).toMatch(/authorization|authentication/i);
    expect(everything(err)).not.toContain(setup.userSeed);
  });
});

describe('TLS with a client certificate', () => {
  let nats: SecureNats;
  beforeAll(async () => {
    nats = await server(
      ['tls {', `  cert_file: "${certs.serverCert}"`, `  key_file: "${certs.serverKey}"`, `  ca_file: "${certs.caFile}"`, '  verify: true', '}'].join('\n'),
    );
  });

  it('with --nats-tls-ca, --nats-tls-cert and --nats-tls-key', async () => {
    const { gw } = await startWith(nats.url, { tlsCa: certs.caFile, tlsCert: certs.clientCert, tlsKey: certs.clientKey });
    try {
      await gatewayUser(nats, gw);
      const res = await fetch(`${nats.monitorUrl}/connz?auth=1`);
      const body = (await res.json()) as { connections: Array<{ name?: string; tls_version?: string }> };
      expect(body.connections.find((c) => c.name === `rlgate-gateway-${gw.replicaId}`)?.tls_version).toMatch(/^1\.[23]$/);
    } finally {
      await gw.close();
    }
  });

  it('without the client certificate the handshake is refused', async () => {
    const { err } = await refusedWith(nats.url, { tlsCa: certs.caFile });
    expect(err.message).toMatch(/cannot connect to NATS/);
  });

  it('without the CA the server certificate is not trusted', async () => {
    const { err } = await refusedWith(nats.url, { tlsCert: certs.clientCert, tlsKey: certs.clientKey });
    expect(err.message).toMatch(/certificate/i);
  });
});
