// The users and permissions of deploy/nats/accounts.conf, loaded into a real single-node
// nats-server (the file as shipped, after this fixture's loopback listen/monitor/store lines):
// the trainer may ask for refits, follow their reports and read the refits bucket (its refit's
// journal) but not queue a refit past the doors, command engines or write or read any other
// bucket, the operator may follow state and read the engines bucket but publish nothing that
// changes anything, nor read the workers bucket (it holds API keys), and the gateway may do all
// of it. Each user reads replies under its own inbox prefix only (_INBOX_<user>), which every
// client here gives, and rlgate's connection honours it. A denied publish does not throw in
// nats.js v3: the violation arrives on nc.status(); a request rejects with it as the cause.

import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kvm } from '@nats-io/kv';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsConnectOptions } from '../../src/bus/connect-options.ts';
import { connectBus } from '../../src/bus/connection.ts';
import { startSecureNats, type SecureNats } from '../fixtures/secure-nats.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ACCOUNTS = readFileSync(join(REPO_ROOT, 'deploy/nats/accounts.conf'), 'utf8');
const PASSWORDS = {
  gateway: `gw-${randomBytes(6).toString('hex')}`,
  trainer: `tr-${randomBytes(6).toString('hex')}`,
  operator: `op-${randomBytes(6).toString('hex')}`,
};
const text = new TextEncoder();

interface Client {
  nc: NatsConnection;
  /** Resolves with the permission violation the server reports for `subject` (5 s at most). */
  violation(subject: string | RegExp, operation: 'publish' | 'subscription'): Promise<Error>;
}

let nats: SecureNats;
const clients: Client[] = [];
let gateway: Client;
let trainer: Client;
let operator: Client;

/** The inbox prefix accounts.conf lets each user read. */
const inbox = (user: keyof typeof PASSWORDS) => `_INBOX_${user}`;

/** A file holding the user's password, for rlgate's own settings. */
function passwordFile(user: keyof typeof PASSWORDS): string {
  const path = join(nats.dir, `${user}-password`);
  writeFileSync(path, PASSWORDS[user]);
  return path;
}

/** `inboxPrefix` null: the client's default, `_INBOX`. */
async function login(user: keyof typeof PASSWORDS, inboxPrefix: string | null = inbox(user)): Promise<Client> {
  const nc = await connect({ servers: nats.url, user, pass: PASSWORDS[user], name: `perm-${user}`, inboxPrefix: inboxPrefix ?? undefined });
  const seen: Array<Error & { subject?: string; operation?: string }> = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === 'error') seen.push(s.error as Error & { subject?: string });
  })();
  const client: Client = {
    nc,
    async violation(subject, operation) {
      const deadline = Date.now() + 5_000;
      for (;;) {
        const matches = (s = '') => (typeof subject === 'string' ? s === subject : subject.test(s));
        const v = seen.find((e) => e.name === 'PermissionViolationError' && matches(e.subject) && e.operation === operation);
        if (v) return v;
        if (Date.now() > deadline) throw new Error(`no ${operation} violation for ${subject}; saw ${seen.map((e) => e.message).join('; ') || 'none'}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
  clients.push(client);
  return client;
}

/** A subscription's next message (5 s at most). */
async function next(sub: AsyncIterable<Msg>): Promise<Msg> {
  const it = sub[Symbol.asyncIterator]();
  const timeout = new Promise<never>((_, rej) => setTimeout(() => rej(new Error('no message within 5 s')), 5_000).unref());
  const r = await Promise.race([it.next(), timeout]);
  if (r.done) throw new Error('subscription ended without a message');
  return r.value;
}

beforeAll(async () => {
  nats = await startSecureNats({
    conf: ACCOUNTS,
    env: {
      RLGATE_NATS_GATEWAY_PASSWORD: PASSWORDS.gateway,
      RLGATE_NATS_TRAINER_PASSWORD: PASSWORDS.trainer,
      RLGATE_NATS_OPERATOR_PASSWORD: PASSWORDS.operator,
    },
  });
  gateway = await login('gateway');
  trainer = await login('trainer');
  operator = await login('operator');
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.nc.close().catch(() => undefined)));
  await nats?.stop();
});

describe('deploy/nats/accounts.conf', () => {
  it('a wrong password is refused', async () => {
    await expect(connect({ servers: nats.url, user: 'trainer', pass: PASSWORDS.gateway })).rejects.toThrow(/authorization/i);
  });

  it("the trainer can request a refit (request/reply); a gateway answers on the trainer's inbox", async () => {
    const answering = gateway.nc.subscribe('rl.refit.request', { callback: (_e, m) => void m.respond(text.encode('{"status":200}')) });
    await gateway.nc.flush();
    const reply = await trainer.nc.request('rl.refit.request', text.encode('{}'), { timeout: 5_000 });
    expect(reply.string()).toBe('{"status":200}');
    expect(reply.subject.startsWith(`${inbox('trainer')}.`)).toBe(true);
    answering.unsubscribe();
  });

  it('the trainer cannot queue a refit past the doors: rl.refit.submit is a violation and reaches no gateway', async () => {
    const submits = gateway.nc.subscribe('rl.refit.submit');
    await gateway.nc.flush();
    trainer.nc.publish('rl.refit.submit', text.encode('{"weight_version":"FORGEDQ"}'));
    await trainer.violation('rl.refit.submit', 'publish');
    gateway.nc.publish('rl.refit.submit', text.encode('{"from":"gateway"}'));
    // Messages arrive in order: the gateway's own is the first one it sees.
    expect((await next(submits)).string()).toBe('{"from":"gateway"}');
    submits.unsubscribe();
  });

  it('the trainer cannot command an engine: a publish is reported on status, a request rejects', async () => {
    trainer.nc.publish('rl.engine.x.cmd', text.encode('{}'));
    expect((await trainer.violation('rl.engine.x.cmd', 'publish')).message).toMatch(/permissions violation/i);
    const err = await trainer.nc.request('rl.engine.x.cmd', text.encode('{}'), { timeout: 5_000 }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.cause).toMatchObject({ name: 'PermissionViolationError', operation: 'publish', subject: 'rl.engine.x.cmd' });
  });

  it('the trainer follows refit reports', async () => {
    const reports = trainer.nc.subscribe('rl.refit.r1.report');
    await trainer.nc.flush();
    gateway.nc.publish('rl.refit.r1.report', text.encode('{"id":"r1"}'));
    expect((await next(reports)).string()).toBe('{"id":"r1"}');
    reports.unsubscribe();
  });

  it('the trainer cannot follow engine state', async () => {
    trainer.nc.subscribe('rl.engine.x.state');
    await trainer.violation('rl.engine.x.state', 'subscription');
  });

  it('the operator follows engine state and refit events', async () => {
    const states = operator.nc.subscribe('rl.engine.*.state');
    const events = operator.nc.subscribe('rl.refit.*.events');
    await operator.nc.flush();
    gateway.nc.publish('rl.engine.x.state', text.encode('{"state":"serving"}'));
    gateway.nc.publish('rl.refit.r1.events', text.encode('{"type":"phase"}'));
    expect((await next(states)).string()).toBe('{"state":"serving"}');
    expect((await next(events)).string()).toBe('{"type":"phase"}');
    states.unsubscribe();
    events.unsubscribe();
  });

  it('the operator cannot command an engine or ask for a refit', async () => {
    operator.nc.publish('rl.engine.x.cmd', text.encode('{}'));
    await operator.violation('rl.engine.x.cmd', 'publish');
    operator.nc.publish('rl.refit.request', text.encode('{}'));
    await operator.violation('rl.refit.request', 'publish');
  });

  it('the gateway can command engines and follow their state', async () => {
    const cmds = gateway.nc.subscribe('rl.engine.*.cmd');
    const states = gateway.nc.subscribe('rl.engine.*.state');
    await gateway.nc.flush();
    gateway.nc.publish('rl.engine.x.cmd', text.encode('pause'));
    gateway.nc.publish('rl.engine.x.state', text.encode('paused'));
    expect((await next(cmds)).string()).toBe('pause');
    expect((await next(states)).string()).toBe('paused');
    cmds.unsubscribe();
    states.unsubscribe();
  });

  describe('inboxes', () => {
    it("each user may read its own inbox prefix only: not _INBOX.>, not another user's", async () => {
      for (const [me, client] of [
        ['gateway', gateway],
        ['trainer', trainer],
        ['operator', operator],
      ] as const) {
        for (const other of ['_INBOX', ...(['gateway', 'trainer', 'operator'] as const).filter((u) => u !== me).map(inbox)]) {
          client.nc.subscribe(`${other}.>`);
          await client.violation(`${other}.>`, 'subscription');
        }
      }
    });

    it("a client that does not give its prefix gets no reply: the shared _INBOX is nobody's", async () => {
      const bare = await login('operator', null);
      await expect(bare.nc.request('$JS.API.STREAM.INFO.KV_rlgate_rl_engines', text.encode(''), { timeout: 2_000 })).rejects.toThrow();
      await bare.violation(/^_INBOX\./, 'subscription');
      // rlgate's connection says so at once, naming the setting, instead of failing its first request.
      const settings = { user: 'operator', passwordFile: passwordFile('operator') };
      await expect(connectBus({ ...natsConnectOptions(nats.url, settings), name: 'perm-bare' })).rejects.toThrow(
        /may not read replies under `_INBOX`.*--nats-inbox-prefix/,
      );
      await expect(connectBus({ ...natsConnectOptions(nats.url, { ...settings, inboxPrefix: inbox('gateway') }), name: 'perm-other' })).rejects.toThrow(
        /under `_INBOX_gateway`/,
      );
    });

    it("rlgate's connection answers under --nats-inbox-prefix: requests, streamed requests and KV reads", async () => {
      const settings = { user: 'gateway', passwordFile: passwordFile('gateway'), inboxPrefix: inbox('gateway') };
      const [a, b] = await Promise.all(['a', 'b'].map((n) => connectBus({ ...natsConnectOptions(nats.url, settings), name: `perm-bus-${n}` })));
      try {
        const stream = b!.respondStream('rl.replica.b.cmd', async (_req, send) => {
          send({ leg: 1 });
          send({ leg: 2 });
        });
        const single = b!.respond('rl.engine.x.cmd', async () => ({ ok: true }));
        await b!.nc.flush();
        const replies: unknown[] = [];
        await a!.requestStream('rl.replica.b.cmd', {}, { timeoutMs: 5_000, onMessage: (r) => void replies.push(r) });
        expect(replies).toEqual([{ leg: 1 }, { leg: 2 }]);
        expect(await a!.request('rl.engine.x.cmd', {}, 5_000)).toEqual({ ok: true });
        const kv = await new Kvm(a!.nc).create('rlgate_rl_owners', { history: 1 });
        await kv.put('w1', '{"replica":"a"}');
        expect((await kv.get('w1'))?.string()).toBe('{"replica":"a"}');
        const watch = await kv.watch();
        expect(((await next(watch as unknown as AsyncIterable<Msg>)) as unknown as { key: string }).key).toBe('w1');
        watch.stop();
        stream.unsubscribe();
        single.unsubscribe();
      } finally {
        await Promise.all([a!.close(), b!.close()]);
      }
    });
  });

  describe('KV buckets', () => {
    beforeAll(async () => {
      const kvm = new Kvm(gateway.nc);
      await (await kvm.create('rlgate_rl_engines', { history: 1 })).put('e1', '{"state":"serving"}');
      await (await kvm.create('rlgate_rl_workers', { history: 1 })).put('w1', '{"api_key":"sk-secret"}');
      await (await kvm.create('rlgate_rl_refits', { history: 1 })).put('step-1', '{"status":"done"}');
    });

    it("the trainer reads and watches the refits bucket (its refit's journal)", async () => {
      const kv = await new Kvm(trainer.nc).open('rlgate_rl_refits');
      expect((await kv.get('step-1'))?.string()).toBe('{"status":"done"}');
      const watch = await kv.watch({ key: 'step-1' });
      const first = await next(watch as unknown as AsyncIterable<Msg>);
      expect((first as unknown as { key: string }).key).toBe('step-1');
      watch.stop();
    });

    it('the trainer cannot write the refits bucket', async () => {
      const kv = await new Kvm(trainer.nc).open('rlgate_rl_refits');
      await expect(kv.put('step-1', '{"status":"forged"}')).rejects.toThrow();
      await trainer.violation('$KV.rlgate_rl_refits.step-1', 'publish');
      await expect(kv.delete('step-1')).rejects.toThrow();
      expect((await (await new Kvm(gateway.nc).open('rlgate_rl_refits')).get('step-1'))?.string()).toBe('{"status":"done"}');
    });

    it('the operator reads and watches the engines bucket', async () => {
      const kv = await new Kvm(operator.nc).open('rlgate_rl_engines');
      expect((await kv.get('e1'))?.string()).toBe('{"state":"serving"}');
      const watch = await kv.watch();
      const first = await next(watch as unknown as AsyncIterable<Msg>);
      expect((first as unknown as { key: string }).key).toBe('e1');
      watch.stop();
    });

    it('the operator cannot write the engines bucket', async () => {
      const kv = await new Kvm(operator.nc).open('rlgate_rl_engines');
      await expect(kv.put('e1', '{"state":"forged"}')).rejects.toThrow();
      await operator.violation('$KV.rlgate_rl_engines.e1', 'publish');
      expect((await (await new Kvm(gateway.nc).open('rlgate_rl_engines')).get('e1'))?.string()).toBe('{"state":"serving"}');
    });

    it('neither the operator nor the trainer can read the workers bucket (it holds API keys)', async () => {
      await expect(new Kvm(operator.nc).open('rlgate_rl_workers').then((kv) => kv.get('w1'))).rejects.toThrow();
      // open() asks nothing; get() is a JetStream API request for the bucket's stream.
      await operator.violation('$JS.API.STREAM.MSG.GET.KV_rlgate_rl_workers', 'publish');
      await expect(new Kvm(operator.nc).open('rlgate_rl_workers').then((kv) => kv.watch())).rejects.toThrow();
      // The v3 client names the consumer and the filter in the subject (…CREATE.<stream>.<name>.<filter>).
      await operator.violation(/^\$JS\.API\.CONSUMER\.CREATE\.KV_rlgate_rl_workers(\.|$)/, 'publish');
      operator.nc.subscribe('$KV.rlgate_rl_workers.>');
      await operator.violation('$KV.rlgate_rl_workers.>', 'subscription');
      await expect(new Kvm(trainer.nc).open('rlgate_rl_engines').then((kv) => kv.get('e1'))).rejects.toThrow();
      await expect(new Kvm(trainer.nc).open('rlgate_rl_workers').then((kv) => kv.get('w1'))).rejects.toThrow();
      await trainer.violation('$JS.API.STREAM.MSG.GET.KV_rlgate_rl_workers', 'publish');
      await expect(new Kvm(trainer.nc).open('rlgate_rl_workers').then((kv) => kv.watch())).rejects.toThrow();
      await trainer.violation(/^\$JS\.API\.CONSUMER\.CREATE\.KV_rlgate_rl_workers(\.|$)/, 'publish');
    });
  });
});
