// What the read-only `operator` user of deploy/nats/accounts.conf can see while gateways work:
// a real nats-server on the shipped file, two gateway replicas connected as `gateway` under the
// inbox prefix `_INBOX_gateway` (one runs refits, the other owns an engine, so the refit's calls
// cross the bus), two SGLang simulators that require API keys, registered with their keys, and a
// refit asked over NATS by the `trainer` user under `_INBOX_trainer`. The operator subscribes to
// everything it may read (its own inbox prefix, engine state, refit events and reports, the
// engines and refits buckets' subjects, and a watch of both buckets) and tries the inboxes it may
// not: no API key, admin key or NATS password appears in any message it receives, and the shared
// `_INBOX.>` and the other users' prefixes are permission violations.

import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kvm } from '@nats-io/kv';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsConnectOptions, noNatsAuth } from '../../src/bus/connect-options.ts';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import { startGateway, type Gateway } from '../../src/gateway/gateway.ts';
import { silentLogger } from '../../src/obs/logger.ts';
import { testConfig } from '../fixtures/gateway.ts';
import { startSecureNats, type SecureNats } from '../fixtures/secure-nats.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ACCOUNTS = readFileSync(join(REPO_ROOT, 'deploy/nats/accounts.conf'), 'utf8');
const secret = (what: string) => `${what}-${randomBytes(8).toString('hex')}`;
const PASSWORDS = { gateway: secret('gw-pw'), trainer: secret('tr-pw'), operator: secret('op-pw') };
const API_KEYS = [secret('sk-engine-a'), secret('sk-engine-b')];
const ADMIN_KEY = secret('admin');
const SECRETS = [...Object.values(PASSWORDS), ...API_KEYS, ADMIN_KEY];

interface Seen {
  /** The subscription it came through. */
  via: string;
  subject: string;
  text: string;
}

describe('the operator user while gateways take keyed registrations and run a refit', () => {
  let nats: SecureNats;
  let sims: SimProcess[] = [];
  const gateways: Gateway[] = [];
  let trainer: Bus | undefined;
  let operator: NatsConnection | undefined;
  const seen: Seen[] = [];
  const violations: string[] = [];

  const passwordFile = (user: keyof typeof PASSWORDS) => {
    const path = join(nats.dir, `${user}-password`);
    writeFileSync(path, PASSWORDS[user]);
    return path;
  };
  const admin = { authorization: `Bearer ${ADMIN_KEY}` };
  const http = async (gw: Gateway, method: 'GET' | 'POST', path: string, body?: unknown) => {
    const res = await request(`${gw.url}${path}`, {
      method,
      headers: { ...admin, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.body.text();
    return { status: res.statusCode, text, json: (text ? JSON.parse(text) : undefined) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any -- assertions read it
  };

  beforeAll(async () => {
    nats = await startSecureNats({
      conf: ACCOUNTS,
      env: {
        RLGATE_NATS_GATEWAY_PASSWORD: PASSWORDS.gateway,
        RLGATE_NATS_TRAINER_PASSWORD: PASSWORDS.trainer,
        RLGATE_NATS_OPERATOR_PASSWORD: PASSWORDS.operator,
      },
    });
    sims = await Promise.all(API_KEYS.map((key) => spawnSglangSim(['--token-rate', '0', '--api-key', key])));

    // The operator listens before any gateway starts: it sees the fleet from its first record.
    operator = await connect({ servers: nats.url, user: 'operator', pass: PASSWORDS.operator, name: 'operator', inboxPrefix: '_INBOX_operator' });
    void (async () => {
      for await (const s of operator!.status()) if (s.type === 'error') violations.push(String((s.error as Error & { subject?: string }).subject));
    })();
    const record = (via: string, m: Msg) =>
      seen.push({
        via,
        subject: m.subject,
        text: `${m.string()} ${JSON.stringify(m.headers ? [...m.headers.keys()].map((k) => [k, m.headers!.get(k)]) : [])}`,
      });
    const mayRead = ['_INBOX_operator.>', 'rl.engine.*.state', 'rl.refit.*.events', 'rl.refit.*.report', '$KV.rlgate_rl_engines.>', '$KV.rlgate_rl_refits.>'];
    const mayNot = ['_INBOX.>', '_INBOX_gateway.>', '_INBOX_trainer.>'];
    for (const subject of [...mayRead, ...mayNot]) {
      operator.subscribe(subject, {
        callback: (err, m) => {
          if (!err) record(subject, m);
        },
      });
    }
    await operator.flush();

    const nats_ = { ...noNatsAuth(), user: 'gateway', passwordFile: passwordFile('gateway'), inboxPrefix: '_INBOX_gateway' };
    const cfg = testConfig({ natsUrl: nats.url, nats: nats_, adminKey: ADMIN_KEY, leaseSecs: 2 });
    // `owner` takes no refits: the refit runs on `front`, and its calls to owner's engine cross NATS.
    gateways.push(await startGateway({ ...cfg, replicaId: 'front' }, { log: silentLogger() }));
    gateways.push(await startGateway({ ...cfg, rl: { ...cfg.rl, enabled: false }, replicaId: 'owner' }, { log: silentLogger() }));
    trainer = await connectBus({
      ...natsConnectOptions(nats.url, { user: 'trainer', passwordFile: passwordFile('trainer'), inboxPrefix: '_INBOX_trainer' }),
      name: 'trainer',
    });
  });
  afterAll(async () => {
    await trainer?.close();
    await operator?.close().catch(() => undefined);
    for (const g of gateways.reverse()) await g.close();
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
  });

  it('sees the fleet and the refit, and no API key, admin key or password in any message', async () => {
    const [front, owner] = gateways as [Gateway, Gateway];
    for (const [i, gw] of [front, owner].entries()) {
      const r = await http(gw, 'POST', '/workers', { url: sims[i]!.url, api_key: API_KEYS[i] });
      expect(r.status, r.text).toBe(202);
    }
    // Both replicas see both engines ready (the registrations crossed the workers bucket).
    const deadline = Date.now() + 20_000;
    for (;;) {
      const views = gateways.map((g) => g.services.view.rows());
      if (views.every((rows) => rows.length === 2 && rows.every((w) => w.health === 'ready'))) break;
      if (Date.now() > deadline)
        throw new Error(`engines not ready on both replicas: ${JSON.stringify(views.map((rows) => rows.map((w) => [w.url, w.state])))}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(new Set(front.services.view.rows().map((w) => w.owner))).toEqual(new Set(['front', 'owner']));
    // The operator's own reads, as `rlgate watch` makes them.
    const kvm = new Kvm(operator!);
    const watches = await Promise.allSettled(['rlgate_rl_engines', 'rlgate_rl_refits'].map(async (b) => (await kvm.open(b)).watch()));

    const answer = await trainer!.request<{ status: number; report: { status: string } }>(
      'rl.refit.request',
      { refit_id: 'keyed-1', weight_version: 'keyed-1', source: { kind: 'disk', model_path: '/ckpt' } },
      20_000,
    );
    expect(answer.status).toBe(200);
    // Each engine got its calls with its own key: the keys were there to be leaked.
    for (const [i, s] of sims.entries()) {
      const loads = (await s.requests()).filter((q) => q.path === '/update_weights_from_disk');
      expect(loads.map((q) => q.headers.authorization)).toEqual([`Bearer ${API_KEYS[i]}`]);
    }
    await new Promise((r) => setTimeout(r, 300)); // the last state events and bucket writes
    for (const w of watches) if (w.status === 'fulfilled') w.value.stop();

    for (const m of seen) {
      for (const s of SECRETS) expect(m.text.includes(s), `${m.subject} carries a secret`).toBe(false);
      expect(m.text, m.subject).not.toMatch(/Bearer|"apiKey"\s*:\s*"/);
    }
    // It did listen: state, events, the report and its bucket watches all reached it.
    expect(watches.map((w) => w.status)).toEqual(['fulfilled', 'fulfilled']);
    const on = (re: RegExp) => seen.filter((m) => re.test(m.subject)).length;
    expect(on(/^rl\.engine\.[^.]+\.state$/)).toBeGreaterThan(0);
    expect(on(/^rl\.refit\.keyed-1\.events$/)).toBeGreaterThan(0);
    expect(on(/^rl\.refit\.keyed-1\.report$/)).toBe(1);
    expect(on(/^_INBOX_operator\./)).toBeGreaterThan(0);
    expect(on(/^\$KV\.rlgate_rl_engines\./)).toBeGreaterThan(0);
    // Nothing came through another user's inbox, nor from a bucket it may not read.
    expect(seen.filter((m) => m.via.startsWith('_INBOX.') || m.via.startsWith('_INBOX_gateway.') || m.via.startsWith('_INBOX_trainer.'))).toEqual([]);
    expect(seen.filter((m) => /^\$KV\.rlgate_rl_(workers|owners|replicas|owed)\./.test(m.subject)).map((m) => m.subject)).toEqual([]);
  });

  it("may not subscribe to the shared _INBOX.> nor to another user's prefix", () => {
    expect(violations).toEqual(expect.arrayContaining(['_INBOX.>', '_INBOX_gateway.>', '_INBOX_trainer.>']));
  });
});
