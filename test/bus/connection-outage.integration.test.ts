// The bus connection when its nats-server goes away and comes back on the same port: `connected`
// and the status events follow it, requests (ours, and nc.request as JetStream and KV use it)
// fail at once with BusUnavailable instead of waiting out their deadline, calls in flight fail
// when the connection drops, close() does not hang on a dead server, and it all works again
// after the reconnect.

import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { BusUnavailable, connectBus, mapRequestError, type Bus, type BusStatus } from '../../src/bus/connection.ts';
import { startEmbeddedNats, type EmbeddedNats } from '../../src/bus/server.ts';
import { until } from '../fixtures/gateway-process.ts';

// The bound for a call while the bus is down, and for noticing a restarted server.
const BOUND_MS = 2_000;
// Long enough that a call that waited for its deadline instead of failing could not pass.
const LONG_TIMEOUT_MS = 30_000;

let servers: EmbeddedNats[] = [];
let buses: Bus[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.close({ timeoutMs: 500 })));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function server(port = 0): Promise<EmbeddedNats> {
  const s = await startEmbeddedNats({ port, restart: false });
  servers.push(s);
  return s;
}

async function bus(url: string, name: string): Promise<Bus> {
  const b = await connectBus({ url, name });
  buses.push(b);
  return b;
}

/** The rejection of `p` (fails the test if it resolves), and how long it took. */
async function rejection(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const started = Date.now();
  try {
    await p;
  } catch (err) {
    return { err, ms: Date.now() - started };
  }
  throw new Error('expected a rejection');
}

describe('a bus whose server goes away', () => {
  it('reports the disconnect, refuses requests at once, and works again after the server restarts on its port', async () => {
    const first = await server();
    const client = await bus(first.url, 'client');
    const events: BusStatus[] = [];
    client.onStatus((s) => events.push(s));
    expect(client.connected).toBe(true);

    await first.stop();
    await until('the disconnect', BOUND_MS, async () => !client.connected);
    expect(events).toEqual([expect.objectContaining({ connected: false, event: 'disconnect' })]);

    const subject = `test.${randomUUID()}`;
    const req = await rejection(client.request(subject, { x: 1 }, LONG_TIMEOUT_MS));
    expect(req.err).toBeInstanceOf(BusUnavailable);
    expect((req.err as BusUnavailable).code).toBe('bus_unavailable');
    expect((req.err as BusUnavailable).subject).toBe(subject);
    expect(req.ms).toBeLessThan(BOUND_MS);

    const stream = await rejection(client.requestStream(subject, {}, { timeoutMs: LONG_TIMEOUT_MS, onMessage: () => {} }));
    expect(stream.err).toBeInstanceOf(BusUnavailable);
    expect(stream.ms).toBeLessThan(BOUND_MS);

    // What JetStream and KV call underneath: refused too, so a bucket write fails at once.
    const raw = await rejection(client.nc.request(subject, new Uint8Array(), { timeout: LONG_TIMEOUT_MS }));
    expect(raw.err).toBeInstanceOf(BusUnavailable);
    expect(raw.ms).toBeLessThan(BOUND_MS);

    // Back on the same port: picked up without anyone asking.
    const second = await server(first.port);
    await until('the reconnect', BOUND_MS, async () => client.connected);
    expect(events.map((e) => e.event)).toEqual(['disconnect', 'reconnect']);
    expect(events[1]).toMatchObject({ connected: true, event: 'reconnect' });

    const responder = await bus(second.url, 'responder');
    responder.respond(subject, async (data) => ({ echo: data }));
    await responder.nc.flush();
    await expect(client.request(subject, { x: 2 }, 2_000)).resolves.toEqual({ echo: { x: 2 } });
  }, 30_000);

  it('fails a request and a stream in flight as soon as the connection drops', async () => {
    const s = await server();
    const responder = await bus(s.url, 'responder');
    const client = await bus(s.url, 'client');
    const subject = `test.${randomUUID()}`;
    // The responder holds every request: only the drop can end the calls before their deadline.
    responder.respond(subject, () => new Promise(() => {}));
    responder.respondStream(`${subject}.stream`, (_data, send) => {
      send({ first: true });
      return new Promise(() => {});
    });
    await responder.nc.flush();

    const received: unknown[] = [];
    const pending = rejection(client.request(subject, {}, LONG_TIMEOUT_MS));
    const streaming = rejection(client.requestStream(`${subject}.stream`, {}, { timeoutMs: LONG_TIMEOUT_MS, onMessage: (m) => void received.push(m) }));
    await until('the first streamed reply', 5_000, async () => received.length === 1);

    await s.stop();
    const [req, stream] = await Promise.all([pending, streaming]);
    expect(req.err).toBeInstanceOf(BusUnavailable);
    expect((req.err as Error).message).toMatch(/lost the connection to NATS/);
    expect(stream.err).toBeInstanceOf(BusUnavailable);
    expect(received).toEqual([{ first: true }]);
  }, 30_000);

  it('closes at once while disconnected instead of draining against a dead server', async () => {
    const s = await server();
    const client = await connectBus({ url: s.url, name: 'client' });
    const events: BusStatus[] = [];
    client.onStatus((e) => events.push(e));
    await s.stop();
    await until('the disconnect', BOUND_MS, async () => !client.connected);
    const started = Date.now();
    await client.close();
    expect(Date.now() - started).toBeLessThan(BOUND_MS);
    expect(client.nc.isClosed()).toBe(true);
    expect(events.at(-1)).toMatchObject({ connected: false, event: 'close' });
    await expect(client.request('test.after-close', {}, 1_000)).rejects.toBeInstanceOf(BusUnavailable);
  }, 30_000);
});

describe('mapRequestError', () => {
  it('keeps BusUnavailable and turns a closed or draining connection into it', () => {
    const err = new BusUnavailable('a.b');
    expect(mapRequestError(err, 'a.b')).toBe(err);
    for (const name of ['ClosedConnectionError', 'DrainingConnectionError']) {
      const mapped = mapRequestError(Object.assign(new Error('closed'), { name }), 'a.b');
      expect(mapped).toBeInstanceOf(BusUnavailable);
      expect((mapped as BusUnavailable).subject).toBe('a.b');
    }
  });
});
