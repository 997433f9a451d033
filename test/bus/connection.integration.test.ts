// The bus connection against a real nats-server: JSON request/reply, error replies, the
// no-responders vs timeout split, streamed replies ended by a sentinel, ordered subscriptions,
// payloads above NATS's 1 MB default, and the codec's sentinel rules.

import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NoRespondersError, RequestError, TimeoutError } from '@nats-io/transport-node';
import { decode, encode, isSentinel, PayloadDecodeError, SENTINEL } from '../../src/bus/codec.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, connectBus, isInboxSubject, mapRequestError, type Bus } from '../../src/bus/connection.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';

let nats: TestNats;
let server: Bus; // the answering side
let client: Bus; // the asking side, on its own connection

beforeAll(async () => {
  nats = await startTestNats();
  server = await connectBus({ url: nats.url, name: 'test-server' });
  client = await connectBus({ url: nats.url, name: 'test-client' });
});
afterAll(async () => {
  await client?.close();
  await server?.close();
  await nats?.stop();
});

/** A subject nobody else in this file uses. */
const fresh = () => `test.${randomUUID()}`;

describe('request/reply', () => {
  it('round-trips JSON values', async () => {
    const subject = fresh();
    const sub = server.respond(subject, async (data) => ({ echo: data, ok: true }));
    await server.nc.flush();
    const payload = { id: 'w1', n: 3, list: [1, 'two', null], nested: { a: true } };
    await expect(client.request(subject, payload, 2_000)).resolves.toEqual({ echo: payload, ok: true });
    sub.unsubscribe();
  });

  it('sends null when the handler returns nothing', async () => {
    const subject = fresh();
    const sub = server.respond(subject, async () => undefined);
    await server.nc.flush();
    await expect(client.request(subject, 'x', 2_000)).resolves.toBeNull();
    sub.unsubscribe();
  });

  it('turns a handler error into a BusRemoteError carrying its code and context', async () => {
    const subject = fresh();
    const sub = server.respond(subject, async () => {
      throw Object.assign(new Error('no such worker'), {
        code: 'worker_not_found',
        toJSON: () => ({ error: 'worker_not_found', message: 'no such worker', worker_id: 'w9' }),
      });
    });
    await server.nc.flush();
    const err = await client.request(subject, {}, 2_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusRemoteError);
    expect((err as BusRemoteError).code).toBe('worker_not_found');
    expect((err as BusRemoteError).body).toMatchObject({ error: 'worker_not_found', worker_id: 'w9' });
    sub.unsubscribe();
  });

  it('uses internal_error for an error without a code', async () => {
    const subject = fresh();
    const sub = server.respond(subject, async () => {
      throw new Error('kaput');
    });
    await server.nc.flush();
    const err = await client.request(subject, {}, 2_000).catch((e: unknown) => e);
    expect((err as BusRemoteError).code).toBe('internal_error');
    sub.unsubscribe();
  });

  it('throws BusNoResponders when nobody subscribes', async () => {
    const subject = fresh();
    const err = await client.request(subject, {}, 2_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusNoResponders);
    expect((err as BusNoResponders).code).toBe('bus_no_responders');
    expect((err as BusNoResponders).subject).toBe(subject);
  });

  it('throws BusTimeout when a subscriber never answers', async () => {
    const subject = fresh();
    const sub = server.subscribe(subject, () => {});
    await server.nc.flush();
    const err = await client.request(subject, {}, 300).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusTimeout);
    expect((err as BusTimeout).code).toBe('bus_timeout');
    expect((err as BusTimeout).timeoutMs).toBe(300);
    sub.unsubscribe();
  });

  it('carries a 2 MiB payload each way (max_payload raised above the 1 MB default)', async () => {
    expect(client.nc.info?.max_payload).toBeGreaterThanOrEqual(8 * 1024 * 1024);
    const subject = fresh();
    const sub = server.respond(subject, async (data) => ({ body: data, size: (data as string).length }));
    await server.nc.flush();
    const big = 'x'.repeat(2 * 1024 * 1024);
    const reply = await client.request<{ body: string; size: number }>(subject, big, 10_000);
    expect(reply.size).toBe(big.length);
    expect(reply.body).toBe(big);
    sub.unsubscribe();
  });
});

describe('requestStream', () => {
  it('delivers every reply in order and resolves at the sentinel', async () => {
    const subject = fresh();
    const sub = server.respondStream(subject, async (data, send) => {
      const { legs } = data as { legs: string[] };
      for (const id of legs) send({ id, outcome: 'ok' });
    });
    await server.nc.flush();
    const got: unknown[] = [];
    const legs = ['e1', 'e2', 'e3', 'e4', 'e5'];
    await client.requestStream(subject, { legs }, { timeoutMs: 5_000, onMessage: (d) => void got.push(d) });
    expect(got).toEqual(legs.map((id) => ({ id, outcome: 'ok' })));
    sub.unsubscribe();
  });

  it('resolves with no messages when the responder sends only the sentinel', async () => {
    const subject = fresh();
    const sub = server.respondStream(subject, async () => {});
    await server.nc.flush();
    const got: unknown[] = [];
    await client.requestStream(subject, {}, { timeoutMs: 5_000, onMessage: (d) => void got.push(d) });
    expect(got).toEqual([]);
    sub.unsubscribe();
  });

  it('throws BusTimeout with the count received when the sentinel never comes', async () => {
    const subject = fresh();
    // A raw responder that streams two replies and then stalls.
    const raw = server.nc.subscribe(subject, {
      callback: (_err, msg) => {
        msg.respond(encode({ leg: 1 }));
        msg.respond(encode({ leg: 2 }));
      },
    });
    await server.nc.flush();
    const got: unknown[] = [];
    const err = await client.requestStream(subject, {}, { timeoutMs: 400, onMessage: (d) => void got.push(d) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusTimeout);
    expect((err as BusTimeout).received).toBe(2);
    expect(got).toEqual([{ leg: 1 }, { leg: 2 }]);
    raw.unsubscribe();
  });

  it('ends at once with an AbortError when its signal aborts, and takes no reply after it', async () => {
    const subject = fresh();
    let respond: ((data: Uint8Array) => void) | undefined;
    const raw = server.nc.subscribe(subject, { callback: (_err, msg) => void (respond = (d) => msg.respond(d)) });
    await server.nc.flush();
    const got: unknown[] = [];
    const ctrl = new AbortController();
    const started = Date.now();
    const pending = client.requestStream(subject, {}, { timeoutMs: 30_000, signal: ctrl.signal, onMessage: (d) => void got.push(d) }).catch((e: unknown) => e);
    setTimeout(() => ctrl.abort(), 100);
    const err = await pending;
    expect((err as Error).name).toBe('AbortError');
    expect(Date.now() - started).toBeLessThan(5_000);
    // A reply that comes after the abort reaches no one.
    respond?.(encode({ leg: 1 }));
    await server.nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    expect(got).toEqual([]);
    raw.unsubscribe();
  });

  it('throws BusNoResponders when nobody subscribes', async () => {
    const err = await client.requestStream(fresh(), {}, { timeoutMs: 2_000, onMessage: () => {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusNoResponders);
  });

  it('throws the responder failure as a BusRemoteError after the replies sent before it', async () => {
    const subject = fresh();
    const sub = server.respondStream(subject, async (_data, send) => {
      send({ leg: 1 });
      throw Object.assign(new Error('replica lost its actors'), { code: 'bus_unavailable' });
    });
    await server.nc.flush();
    const got: unknown[] = [];
    const err = await client.requestStream(subject, {}, { timeoutMs: 5_000, onMessage: (d) => void got.push(d) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BusRemoteError);
    expect((err as BusRemoteError).code).toBe('bus_unavailable');
    expect(got).toEqual([{ leg: 1 }]);
    sub.unsubscribe();
  });
});

describe('publish/subscribe', () => {
  it('hands messages to an async handler one at a time, in publish order', async () => {
    const subject = fresh();
    const seen: number[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    let done!: () => void;
    const all = new Promise<void>((r) => (done = r));
    const sub = server.subscribe(subject, async (data) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setImmediate(r));
      seen.push(data as number);
      inFlight--;
      if (seen.length === 50) done();
    });
    await server.nc.flush();
    for (let i = 0; i < 50; i++) client.publish(subject, i);
    await client.nc.flush();
    await all;
    expect(seen).toEqual([...Array(50).keys()]);
    expect(maxInFlight).toBe(1);
    sub.unsubscribe();
  });

  it('shares a queue group between subscribers: each message reaches one of them', async () => {
    const subject = fresh();
    const a: unknown[] = [];
    const b: unknown[] = [];
    let done!: () => void;
    const all = new Promise<void>((r) => (done = r));
    const check = () => a.length + b.length === 20 && done();
    const s1 = server.subscribe(subject, (d) => void (a.push(d), check()), { queue: 'q' });
    const s2 = server.subscribe(subject, (d) => void (b.push(d), check()), { queue: 'q' });
    await server.nc.flush();
    for (let i = 0; i < 20; i++) client.publish(subject, i);
    await all;
    expect([...a, ...b].sort((x, y) => (x as number) - (y as number))).toEqual([...Array(20).keys()]);
    s1.unsubscribe();
    s2.unsubscribe();
  });

  it('reports a failing handler and keeps delivering', async () => {
    const subject = fresh();
    const failures: string[] = [];
    const bus = await connectBus({
      url: nats.url,
      name: 'test-failing',
      onHandlerError: (err) => failures.push((err as Error).message),
    });
    const seen: unknown[] = [];
    let done!: () => void;
    const second = new Promise<void>((r) => (done = r));
    bus.subscribe(subject, (d) => {
      if (d === 1) throw new Error('handler broke');
      seen.push(d);
      done();
    });
    await bus.nc.flush();
    client.publish(subject, 1);
    client.publish(subject, 2);
    await second;
    expect(failures).toEqual(['handler broke']);
    expect(seen).toEqual([2]);
    await bus.close();
  });
});

describe('close', () => {
  it('drains the connection and can be called twice', async () => {
    const bus = await connectBus({ url: nats.url, name: 'test-close' });
    await bus.close();
    expect(bus.nc.isClosed()).toBe(true);
    await bus.close();
  });

  it('names the url when the first connection fails', async () => {
    const stopped = await startTestNats();
    const url = stopped.url;
    await stopped.stop();
    const err = await connectBus({ url, name: 'test-refused', timeoutMs: 1_000 }).catch((e: unknown) => e);
    expect((err as Error).message).toContain(url);
  });
});

describe('mapRequestError', () => {
  const cases: Array<[string, unknown, unknown]> = [
    ['bare TimeoutError', new TimeoutError(), BusTimeout],
    ['bare NoRespondersError', new NoRespondersError('s'), BusNoResponders],
    ['RequestError caused by NoResponders', new RequestError('x', { cause: new NoRespondersError('s') }), BusNoResponders],
    ['RequestError caused by Timeout', new RequestError('x', { cause: new TimeoutError() }), BusTimeout],
    ['other RequestError', new RequestError('connection closed'), RequestError],
    ['unrelated error', new TypeError('x'), TypeError],
  ];
  it.each(cases)('%s', (_name, input, expected) => {
    expect(mapRequestError(input, 'subj', 10)).toBeInstanceOf(expected as new () => Error);
  });

  it('keeps the original as cause and wraps non-errors', () => {
    const original = new TimeoutError();
    expect(mapRequestError(original).cause).toBe(original);
    expect(mapRequestError('weird')).toBeInstanceOf(Error);
  });
});

describe('codec', () => {
  it('never encodes a value to the empty sentinel', () => {
    for (const v of [undefined, null, '', 0, false, [], {}]) expect(encode(v).length).toBeGreaterThan(0);
    expect(decode(encode(undefined))).toBeNull();
  });

  it('round-trips values and decodes the sentinel to undefined', () => {
    const v = { a: [1, 'é', { b: null }] };
    expect(decode(encode(v))).toEqual(v);
    expect(isSentinel(SENTINEL)).toBe(true);
    expect(decode(SENTINEL)).toBeUndefined();
  });

  it('rejects bytes that are not JSON', () => {
    expect(() => decode(new TextEncoder().encode('{nope'))).toThrow(PayloadDecodeError);
    expect(() => decode(new Uint8Array([0xff, 0xfe]))).toThrow(PayloadDecodeError);
  });
});

describe('reply subjects', () => {
  // The requester names the reply subject and the answer goes out with the answerer's rights: a
  // gateway must not answer on a bucket's or a report's subject for whoever may send a request.
  it('answers inboxes only: a reply subject outside _INBOX… gets nothing, and the refusal is reported', async () => {
    const refused: string[] = [];
    const answerer = await connectBus({ url: nats.url, name: 'test-reply-guard', onHandlerError: (err) => refused.push((err as Error).message) });
    const subject = fresh();
    const handled: unknown[] = [];
    const sub = answerer.respond(subject, async (data) => {
      handled.push(data);
      return { answered: true };
    });
    const stream = answerer.respondStream(`${subject}.stream`, async (_data, send) => send({ item: 1 }));
    await answerer.nc.flush();
    const seen: string[] = [];
    const targets = ['rl.refit.forged.report', '$KV.rlgate_rl_refits.forged', 'not_an_inbox.x'];
    const watchers = targets.map((t) => client.nc.subscribe(t, { callback: (_e, m) => void seen.push(m.subject) }));
    await client.nc.flush();
    for (const t of targets) {
      client.nc.publish(subject, encode({ n: 1 }), { reply: t });
      client.nc.publish(`${subject}.stream`, encode({ n: 1 }), { reply: t });
    }
    await client.nc.flush();
    await new Promise((r) => setTimeout(r, 300));
    expect(seen).toEqual([]);
    expect(handled).toHaveLength(targets.length);
    expect(refused.filter((m) => m.includes('replies go only to inbox subjects')).length).toBeGreaterThanOrEqual(2 * targets.length);
    // An inbox, default or per-user, is answered as before.
    await expect(client.request(subject, 'ok', 2_000)).resolves.toEqual({ answered: true });
    const prefixed = await connectBus({ url: nats.url, name: 'test-reply-prefixed', inboxPrefix: '_INBOX_trainer' });
    await expect(prefixed.request(subject, 'ok', 2_000)).resolves.toEqual({ answered: true });
    for (const w of watchers) w.unsubscribe();
    sub.unsubscribe();
    stream.unsubscribe();
    await prefixed.close();
    await answerer.close();
  });

  it('counts as an inbox only `_INBOX…` followed by literal tokens', () => {
    for (const ok of ['_INBOX.abc.1', '_INBOX_trainer.x7', '_INBOX_team-a.b.c']) expect(isInboxSubject(ok), ok).toBe(true);
    for (const bad of [
      undefined,
      '',
      '_INBOX',
      '_INBOX.',
      '_INBOX.>',
      '_INBOX.*.y',
      '_INBOX_x.a.>',
      'x._INBOX.a',
      '$KV.b.k',
      'rl.refit.a.report',
      '_INBOX.a b',
    ]) {
      expect(isInboxSubject(bad), String(bad)).toBe(false);
    }
  });
});
