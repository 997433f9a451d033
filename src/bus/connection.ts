// One NATS connection and the four ways rlgate uses it: publish/subscribe, request/reply with a
// deadline, a request answered by a stream of replies ended by a sentinel, and close. Payloads are
// JSON (codec.ts); subject strings come from subjects.ts and are never built here.
// Request failures become BusNoResponders ("nobody hosts this subject"), BusTimeout ("it stalled")
// or BusUnavailable ("NATS itself is gone": refused at once while disconnected, and failed when the
// connection drops under a request, instead of waiting for a deadline no reply can meet).

import {
  connect,
  createInbox,
  headers as natsHeaders,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  NoRespondersError,
  RequestError,
  TimeoutError,
} from '@nats-io/transport-node';
import { decode, encode, SENTINEL } from './codec.ts';
import type { NatsConnectOptions } from './connect-options.ts';
import { redactUrl } from '../obs/redact-url.ts';

const encoder = new TextEncoder();

/** No subscriber on the subject: the thing addressed is hosted nowhere. */
export class BusNoResponders extends Error {
  override readonly name = 'BusNoResponders';
  readonly code = 'bus_no_responders';
  constructor(
    readonly subject: string,
    options?: ErrorOptions,
  ) {
    super(`no responders on ${subject}`, options);
  }
}

/** Someone is subscribed but did not answer (or did not finish a stream) before the deadline. */
export class BusTimeout extends Error {
  override readonly name = 'BusTimeout';
  readonly code = 'bus_timeout';
  constructor(
    readonly subject: string,
    readonly timeoutMs: number | undefined,
    /** For requestStream: how many replies arrived before the deadline. */
    readonly received = 0,
    options?: ErrorOptions,
  ) {
    super(`no complete reply on ${subject} within ${timeoutMs ?? '?'} ms`, options);
  }
}

/**
 * The connection to NATS is down (nats.js is reconnecting) or closed. Nothing was sent if the
 * request came while disconnected; a request in flight when the connection dropped may have
 * reached its responder, but its reply can no longer arrive.
 */
export class BusUnavailable extends Error {
  override readonly name = 'BusUnavailable';
  readonly code = 'bus_unavailable';
  constructor(
    readonly subject: string,
    detail = 'not connected to NATS (reconnecting); nothing was sent',
    options?: ErrorOptions,
    /** The request had been sent when the connection dropped: its work may have run. */
    readonly inFlight = false,
  ) {
    super(`${detail} (${subject})`, options);
  }
}

/** The responder's handler threw; `code` is the thrown error's `code` (or `internal_error`). */
export class BusRemoteError extends Error {
  override readonly name = 'BusRemoteError';
  constructor(
    readonly subject: string,
    readonly code: string,
    message: string,
    /** The whole error body `{error, message, ...context}` as the responder sent it. */
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }
}

/**
 * nats.js v3 failures → ours. `request()` rejects with a bare TimeoutError, or a RequestError whose
 * cause is NoRespondersError; `requestMany` iterators throw a bare NoRespondersError. Names are
 * checked too, in case a second copy of nats-core makes `instanceof` miss. Other errors pass through.
 */
export function mapRequestError(err: unknown, subject = '?', timeoutMs?: number): Error {
  if (err instanceof BusNoResponders || err instanceof BusTimeout || err instanceof BusUnavailable) return err;
  const name = (e: unknown) => (e instanceof Error ? e.name : '');
  // A request cut short by close() (shutdown) is a bus outage to its caller, not an internal error.
  if (name(err) === 'ClosedConnectionError' || name(err) === 'DrainingConnectionError') {
    return new BusUnavailable(subject, 'the NATS connection is closing', { cause: err });
  }
  const noResponders = (e: unknown) => e instanceof NoRespondersError || name(e) === 'NoResponders';
  const timeout = (e: unknown) => e instanceof TimeoutError || name(e) === 'TimeoutError';
  if (noResponders(err)) return new BusNoResponders(subject, { cause: err });
  if (timeout(err)) return new BusTimeout(subject, timeoutMs, 0, { cause: err });
  if (err instanceof RequestError || name(err) === 'RequestError') {
    const cause = (err as Error).cause;
    if ((err instanceof RequestError && err.isNoResponders()) || noResponders(cause)) {
      return new BusNoResponders(subject, { cause: err });
    }
    if (timeout(cause)) return new BusTimeout(subject, timeoutMs, 0, { cause: err });
  }
  return err instanceof Error ? err : new Error(String(err));
}

// Error replies keep the success payload untouched: a header marks them, the body is the envelope.
const ERROR_HEADER = 'Rlgate-Error';
// Marks the last batch of a stream, standing in for the empty sentinel message.
const END_HEADER = 'Rlgate-End';

function endHeaders(): MsgHdrs {
  const h = natsHeaders();
  h.set(END_HEADER, '1');
  return h;
}

function errorReply(err: unknown): { data: Uint8Array; headers: MsgHdrs } {
  const e = err as { code?: unknown; message?: unknown; toJSON?: () => unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : 'internal_error';
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const json = typeof e?.toJSON === 'function' ? e.toJSON() : undefined;
  const body = { ...(json && typeof json === 'object' ? json : {}), error: code, message };
  const h = natsHeaders();
  h.set(ERROR_HEADER, code);
  return { data: encode(body), headers: h };
}

function remoteError(subject: string, msg: Msg): BusRemoteError | undefined {
  const code = msg.headers?.get(ERROR_HEADER);
  if (!code) return undefined;
  const body = decode(msg.data) as Record<string, unknown>;
  return new BusRemoteError(subject, code, String(body?.message ?? code), body ?? {});
}

export interface BusSubscription {
  unsubscribe(): void;
}

export interface RequestStreamOptions {
  /** Deadline for the whole stream, sentinel included. */
  timeoutMs: number;
  /** Called once per reply, in arrival order, awaited before the next one. */
  onMessage(data: unknown): void | Promise<void>;
  /** Ends the wait (rejecting with an AbortError) and drops the stream's reply route. */
  signal?: AbortSignal;
}

/** A change of the connection, as `onStatus` listeners receive it. */
export interface BusStatus {
  connected: boolean;
  /** `disconnect`: lost, nats.js reconnects; `reconnect`: back; `close`: closed for good. */
  event: 'disconnect' | 'reconnect' | 'close';
  /** The server the event concerns, when nats.js names one. */
  server?: string;
}

export interface Bus {
  readonly nc: NatsConnection;
  /** The prefix this user may read replies under (`--nats-inbox-prefix`); undefined: `_INBOX`. */
  readonly inboxPrefix: string | undefined;
  /** False from the moment the connection drops until nats.js has re-established it, and after close. */
  readonly connected: boolean;
  /** Calls `listener` on every disconnect, reconnect and the final close. Returns the unsubscribe. */
  onStatus(listener: (status: BusStatus) => void): () => void;
  /**
   * One request, one JSON reply. Throws BusNoResponders, BusTimeout, BusRemoteError, or
   * BusUnavailable (at once while disconnected, or as soon as the connection drops under it).
   */
  request<T>(subject: string, payload: unknown, timeoutMs: number): Promise<T>;
  publish(subject: string, payload: unknown): void;
  /** Messages are handled one at a time, in order (state events must not overtake each other). */
  subscribe(subject: string, handler: (data: unknown, msg: Msg) => void | Promise<void>, opts?: { queue?: string }): BusSubscription;
  /** A request/reply service. Requests are handled concurrently; a throw becomes an error reply. */
  respond(subject: string, handler: (data: unknown) => Promise<unknown>, opts?: { queue?: string }): BusSubscription;
  /**
   * The answering side of requestStream: `send` one reply per item (replies sent in the same
   * event-loop turn travel as one message holding a JSON array), then a sentinel is sent.
   */
  respondStream(subject: string, handler: (data: unknown, send: (reply: unknown) => void) => Promise<void>, opts?: { queue?: string }): BusSubscription;
  /**
   * One request, many replies, ended by an empty-payload sentinel. Resolves at the sentinel.
   * Rejects with BusTimeout (with `received`) if the deadline comes first — the replies that did
   * arrive were already given to onMessage — and with BusNoResponders, BusRemoteError or
   * BusUnavailable (as `request`).
   */
  requestStream(subject: string, payload: unknown, opts: RequestStreamOptions): Promise<void>;
  /**
   * Drains (pending handlers' replies and buffered publishes go out, then the socket closes), for
   * at most `timeoutMs` (default 5 s); then, or at once while disconnected, closes without draining:
   * a drain waits on the server, and a dead server would make it wait forever.
   */
  close(opts?: { timeoutMs?: number }): Promise<void>;
}

export interface ConnectBusOptions {
  /** One server; or `servers` (a cluster) with `authenticator` and `tls`, from natsConnectOptions(). */
  url?: string;
  servers?: string[];
  authenticator?: NatsConnectOptions['authenticator'];
  tls?: NatsConnectOptions['tls'];
  /**
   * First tokens of every reply subject of this connection (nats.js's `_INBOX` when absent): its
   * requests, JetStream and KV deliveries and our streamed requests all answer under it.
   */
  inboxPrefix?: NatsConnectOptions['inboxPrefix'];
  /** Connection name shown by the server's /connz (e.g. `rlgate-gateway-<replica>`). */
  name: string;
  /** Deadline for the first connection (default 5 s). */
  timeoutMs?: number;
  /** Where handler failures that have no one to answer go (default: process.emitWarning). */
  onHandlerError?: (err: unknown, subject: string) => void;
  /**
   * Ping period (default nats.js's 2 minutes). Two pings unanswered and the connection is dropped
   * and redialled: without it a silent cut (packets dropped, no reset) goes unnoticed for minutes.
   */
  pingIntervalMs?: number;
}

// Between reconnect attempts: short, so a restarted server is picked up within about a second
// (nats.js waits 2 s by default), with jitter so that replicas do not dial in lockstep.
const RECONNECT_WAIT_MS = 250;
const RECONNECT_JITTER_MS = 250;
const CLOSE_DRAIN_MS = 5_000;

/**
 * A reply subject an answer may go to: under an inbox (`_INBOX.` or a per-user prefix such as
 * `_INBOX_trainer.`), as every NATS client makes them.
 */
export function isInboxSubject(subject: string | undefined): boolean {
  return subject !== undefined && /^_INBOX[A-Za-z0-9_-]*(\.[^\s.*>]+)+$/.test(subject);
}

export async function connectBus(opts: ConnectBusOptions): Promise<Bus> {
  const where = redactUrl(opts.servers?.join(',') ?? opts.url ?? '?');
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: opts.servers ?? opts.url,
      authenticator: opts.authenticator,
      tls: opts.tls,
      inboxPrefix: opts.inboxPrefix,
      name: opts.name,
      timeout: opts.timeoutMs ?? 5_000,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: RECONNECT_WAIT_MS,
      reconnectJitter: RECONNECT_JITTER_MS,
      waitOnFirstConnect: false,
      ...(opts.pingIntervalMs !== undefined ? { pingInterval: opts.pingIntervalMs, maxPingOut: 2 } : {}),
      // Every request (each KV write is one) would otherwise build an Error for its async stack
      // trace: a visible share of the gateway's CPU at thousands of engines. Our errors name the
      // subject instead (mapRequestError).
      noAsyncTraces: true,
    });
  } catch (err) {
    throw new Error(`cannot connect to NATS at ${where}: ${(err as Error).message}`, { cause: err });
  }
  // A user that may not read replies under this prefix would see every request refused later,
  // whichever comes first: say so at connect, naming the setting.
  const refused = await inboxRefused(nc, opts.inboxPrefix);
  if (refused) {
    await nc.close().catch(() => undefined);
    throw new Error(
      `cannot use NATS at ${where}: this user may not read replies under \`${opts.inboxPrefix ?? '_INBOX'}\` (${refused.message}); set --nats-inbox-prefix to the prefix it may subscribe to (deploy/nats/accounts.conf: _INBOX_<user>)`,
      { cause: refused },
    );
  }
  return new NatsBus(nc, opts);
}

/** A connected NATS connection with rlgate's request, stream and respond paths (see Bus). */
class NatsBus implements Bus {
  readonly nc: NatsConnection;
  // The connection's state as nats.js reports it. Requests and streams in flight register in
  // `inFlight` so a drop fails them at once: their replies would go to an inbox the server no
  // longer routes to us.
  #connected = true;
  // host:port only (nats.js keeps credentials out of it), so it is safe in messages and logs.
  #server: string | undefined;
  readonly #listeners = new Set<(status: BusStatus) => void>();
  readonly #inFlight = new Set<(detail: string) => void>();
  readonly #report: (err: unknown, subject: string) => void;
  readonly #inboxPrefix: string | undefined;
  // Streamed requests share one wildcard inbox subscription (as nats.js muxes plain requests),
  // so a fan-out costs no SUB/UNSUB round of its own; replies are routed by the last token.
  readonly #streams = new Map<string, (msg: Msg) => void>();
  #streamSeq = 0;
  #streamBase: string | undefined;
  #closing: Promise<void> | undefined;

  /** The prefix this user may read replies under (`--nats-inbox-prefix`); undefined: `_INBOX`. */
  get inboxPrefix(): string | undefined {
    return this.#inboxPrefix;
  }

  constructor(nc: NatsConnection, opts: ConnectBusOptions) {
    this.nc = nc;
    this.#server = nc.getServer() || undefined;
    this.#inboxPrefix = opts.inboxPrefix;
    this.#report =
      opts.onHandlerError ?? ((err: unknown, subject: string) => process.emitWarning(`bus handler on ${subject} failed: ${(err as Error)?.stack ?? err}`));
    void this.#followStatus().catch((err) => this.#report(err, 'bus status'));
    void nc.closed().then(() => this.#dropped('close'));
    // Every request over this connection, JetStream's and KV's included (they call nc.request
    // themselves), is refused while disconnected and failed when the connection drops under it.
    // Otherwise nats.js queues it, drops it at the next dial (or sends it after a reconnect, to an
    // engine whose caller gave up), and the caller waits out its whole timeout for nothing.
    const natsRequest = nc.request.bind(nc);
    nc.request = (subject, payload, requestOpts) => {
      if (!this.#connected) return Promise.reject(new BusUnavailable(subject, this.#notConnected()));
      return this.#whileConnected(subject, natsRequest(subject, payload, requestOpts));
    };
  }

  get connected(): boolean {
    return this.#connected;
  }

  onStatus(listener: (status: BusStatus) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async request<T>(subject: string, payload: unknown, timeoutMs: number): Promise<T> {
    let msg: Msg;
    try {
      msg = await this.nc.request(subject, encode(payload), { timeout: timeoutMs }); // fails fast: see the constructor
    } catch (err) {
      throw mapRequestError(err, subject, timeoutMs);
    }
    const remote = remoteError(subject, msg);
    if (remote) throw remote;
    return decode(msg.data) as T;
  }

  publish(subject: string, payload: unknown): void {
    this.nc.publish(subject, encode(payload));
  }

  subscribe(subject: string, handler: (data: unknown, msg: Msg) => void | Promise<void>, opts: { queue?: string } = {}): BusSubscription {
    const sub = this.nc.subscribe(subject, { queue: opts.queue });
    void (async () => {
      for await (const msg of sub) {
        try {
          await handler(decode(msg.data), msg);
        } catch (err) {
          this.#report(err, msg.subject);
        }
      }
    })().catch((err) => this.#report(err, subject));
    return { unsubscribe: () => sub.unsubscribe() };
  }

  respond(subject: string, handler: (data: unknown) => Promise<unknown>, opts: { queue?: string } = {}): BusSubscription {
    return this.#serve(subject, opts.queue, async (msg) => {
      try {
        const value = await handler(decode(msg.data));
        if (msg.reply) this.#answer(msg, encode(value));
      } catch (e) {
        if (!msg.reply) return this.#report(e, msg.subject);
        const r = errorReply(e);
        this.#answer(msg, r.data, r.headers);
      }
    });
  }

  respondStream(subject: string, handler: (data: unknown, send: (reply: unknown) => void) => Promise<void>, opts: { queue?: string } = {}): BusSubscription {
    return this.#serve(subject, opts.queue, async (msg) => {
      // Replies that finish together travel together: one message carries a JSON array of every
      // reply sent in the same turn of the event loop (a fast fan-out of N legs is a couple of
      // messages, not N), flushed early before a batch nears max_payload.
      let open = true; // replies sent after the sentinel would reach nobody
      let batch: string[] = [];
      let bytes = 0;
      let scheduled = false;
      const limit = Math.max(64 * 1024, Math.floor((this.nc.info?.max_payload ?? 1024 * 1024) / 2));
      const flush = (last = false) => {
        scheduled = false;
        if (batch.length === 0) return false;
        const payload = encoder.encode(`[${batch.join(',')}]`);
        batch = [];
        bytes = 0;
        this.#answer(msg, payload, last ? endHeaders() : undefined);
        return true;
      };
      const send = (reply: unknown) => {
        if (!open) return;
        const text = JSON.stringify(reply) ?? 'null';
        const size = Buffer.byteLength(text);
        if (bytes > 0 && bytes + size > limit) flush();
        batch.push(text);
        bytes += size;
        if (!scheduled) {
          scheduled = true;
          setImmediate(flush);
        }
      };
      let failed = false;
      try {
        await handler(decode(msg.data), send);
      } catch (e) {
        failed = true;
        flush();
        const r = errorReply(e);
        this.#answer(msg, r.data, r.headers);
      } finally {
        open = false;
        // The last batch carries the end marker itself; a bare sentinel only when there is
        // nothing left to send (one message fewer per replica on every fan-out).
        if (failed || !flush(true)) this.#answer(msg, SENTINEL);
      }
    });
  }

  requestStream(subject: string, payload: unknown, opts: RequestStreamOptions): Promise<void> {
    const { timeoutMs, onMessage, signal } = opts;
    if (!this.#connected) return Promise.reject(new BusUnavailable(subject, this.#notConnected()));
    if (signal?.aborted) return Promise.reject(new DOMException('aborted', 'AbortError'));
    const inbox = this.#streamInbox();
    const id = `${++this.#streamSeq}`;
    return new Promise<void>((resolve, reject) => {
      let received = 0;
      let chain: Promise<void> = Promise.resolve();
      let done = false;
      const onDrop = (detail: string) => finish(new BusUnavailable(subject, detail, undefined, true));
      const onAbort = () => finish(new DOMException('aborted', 'AbortError'));
      const finish = (err?: Error) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.#streams.delete(id);
        this.#inFlight.delete(onDrop);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const finishAfterChain = () =>
        chain.then(
          () => finish(),
          (e: Error) => finish(e),
        );
      this.#inFlight.add(onDrop);
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => finish(new BusTimeout(subject, timeoutMs, received)), timeoutMs);
      this.#streams.set(id, (msg) => {
        if (msg.data.length === 0) {
          // An empty message is either the server's "no responders" status or our sentinel.
          if (msg.headers?.code === 503) return finish(new BusNoResponders(subject));
          return void finishAfterChain();
        }
        const remote = remoteError(subject, msg);
        if (remote) return finish(remote);
        let items: unknown;
        try {
          items = decode(msg.data);
        } catch (e) {
          return finish(e as Error);
        }
        for (const item of Array.isArray(items) ? items : [items]) {
          received++;
          chain = chain.then(() => onMessage(item));
        }
        if (msg.headers?.get(END_HEADER)) void finishAfterChain();
        else chain.catch((e: Error) => finish(e));
      });
      try {
        this.nc.publish(subject, encode(payload), { reply: `${inbox}.${id}` });
      } catch (e) {
        finish(mapRequestError(e, subject, timeoutMs));
      }
    });
  }

  close(opts: { timeoutMs?: number } = {}): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#connected && !this.nc.isClosed()) {
        const drained = await within(
          this.nc.drain().then(
            () => true,
            () => false,
          ),
          opts.timeoutMs ?? CLOSE_DRAIN_MS,
        );
        if (drained) return;
      }
      await this.nc.close().catch(() => undefined);
    })();
    return this.#closing;
  }

  /** A subscription whose every message runs `handle` concurrently; subscription errors are reported. */
  #serve(subject: string, queue: string | undefined, handle: (msg: Msg) => Promise<void>): BusSubscription {
    const sub = this.nc.subscribe(subject, {
      queue,
      callback: (err, msg) => {
        if (err) return this.#report(err, subject);
        void handle(msg);
      },
    });
    return { unsubscribe: () => sub.unsubscribe() };
  }

  #answer(msg: Msg, data: Uint8Array, headers?: MsgHdrs): void {
    // The requester names the reply subject, and the answer goes out with this connection's
    // rights: a gateway answering on `$KV.…` or `rl.refit.<id>.report` would write a bucket or
    // forge a report for whoever may send a request. Replies go to inboxes only.
    if (!isInboxSubject(msg.reply)) {
      this.#report(new Error(`refused to answer on \`${msg.reply ?? ''}\`: replies go only to inbox subjects (_INBOX…)`), msg.subject);
      return;
    }
    try {
      msg.respond(data, headers ? { headers } : undefined);
    } catch (err) {
      this.#report(err, msg.subject); // e.g. reply over max_payload, or connection closed
    }
  }

  async #followStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === 'disconnect') {
        this.#server = s.server;
        this.#dropped('disconnect');
      } else if (s.type === 'reconnect') {
        this.#server = s.server;
        this.#connected = true;
        this.#emit({ connected: true, event: 'reconnect', server: this.#server });
      }
    }
  }

  #emit(status: BusStatus): void {
    for (const l of [...this.#listeners]) {
      try {
        l(status);
      } catch (err) {
        this.#report(err, 'bus status listener');
      }
    }
  }

  #at(): string {
    return this.#server ? ` at ${this.#server}` : '';
  }

  #dropped(event: 'disconnect' | 'close'): void {
    const wasConnected = this.#connected;
    this.#connected = false;
    const detail = event === 'close' ? 'the NATS connection closed before the reply came' : `lost the connection to NATS${this.#at()} before the reply came`;
    for (const fail of [...this.#inFlight]) fail(detail);
    if (wasConnected || event === 'close') this.#emit({ connected: false, event, server: this.#server });
  }

  #notConnected(): string {
    return this.nc.isClosed() ? 'the NATS connection is closed; nothing was sent' : `not connected to NATS${this.#at()} (reconnecting); nothing was sent`;
  }

  /** `pending`, unless the connection drops first: then BusUnavailable naming `subject`. */
  #whileConnected<T>(subject: string, pending: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const fail = (detail: string) => {
        this.#inFlight.delete(fail);
        pending.catch(() => {}); // it still settles later (its own timeout); nobody listens then
        reject(new BusUnavailable(subject, detail, undefined, true));
      };
      this.#inFlight.add(fail);
      pending.then(
        (v) => {
          this.#inFlight.delete(fail);
          resolve(v);
        },
        (e) => {
          this.#inFlight.delete(fail);
          reject(e);
        },
      );
    });
  }

  #streamInbox(): string {
    if (this.#streamBase) return this.#streamBase;
    // Under the connection's prefix: a server that lets a user subscribe to its own prefix only
    // would refuse (and another user could read) a bare `_INBOX`.
    const base = createInbox(this.#inboxPrefix);
    this.#streamBase = base;
    this.nc.subscribe(`${base}.*`, {
      callback: (err, msg) => {
        if (err) return this.#report(err, `${base}.*`);
        this.#streams.get(msg.subject.slice(base.length + 1))?.(msg);
      },
    });
    return base;
  }
}

/** The server's refusal of a subscription under the inbox prefix, or undefined: a flush waits for its answer. */
async function inboxRefused(nc: NatsConnection, prefix: string | undefined): Promise<Error | undefined> {
  let refused: Error | undefined;
  const probe = nc.subscribe(createInbox(prefix), {
    callback: (err) => {
      if (err) refused = err;
    },
  });
  await nc.flush().catch(() => undefined);
  if (!probe.isClosed()) probe.unsubscribe();
  return refused;
}

/** `pending`'s value, or false once `ms` have passed (the timer does not hold the process open). */
function within(pending: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  return Promise.race([pending, expired]).finally(() => clearTimeout(timer));
}
