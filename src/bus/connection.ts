// One NATS connection and the four ways rlgate uses it: publish/subscribe, request/reply with a
// deadline, a request answered by a stream of replies ended by a sentinel, and close. Payloads are
// JSON (codec.ts); subject strings come from subjects.ts and are never built here.
// Request failures become BusNoResponders ("nobody hosts this subject") or BusTimeout ("it stalled").

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
  if (err instanceof BusNoResponders || err instanceof BusTimeout) return err;
  const name = (e: unknown) => (e instanceof Error ? e.name : '');
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
}

export interface Bus {
  readonly nc: NatsConnection;
  /** One request, one JSON reply. Throws BusNoResponders, BusTimeout or BusRemoteError. */
  request<T>(subject: string, payload: unknown, timeoutMs: number): Promise<T>;
  publish(subject: string, payload: unknown): void;
  /** Messages are handled one at a time, in order (state events must not overtake each other). */
  subscribe(
    subject: string,
    handler: (data: unknown, msg: Msg) => void | Promise<void>,
    opts?: { queue?: string },
  ): BusSubscription;
  /** A request/reply service. Requests are handled concurrently; a throw becomes an error reply. */
  respond(
    subject: string,
    handler: (data: unknown) => Promise<unknown>,
    opts?: { queue?: string },
  ): BusSubscription;
  /**
   * The answering side of requestStream: `send` one reply per item (replies sent in the same
   * event-loop turn travel as one message holding a JSON array), then a sentinel is sent.
   */
  respondStream(
    subject: string,
    handler: (data: unknown, send: (reply: unknown) => void) => Promise<void>,
    opts?: { queue?: string },
  ): BusSubscription;
  /**
   * One request, many replies, ended by an empty-payload sentinel. Resolves at the sentinel.
   * Rejects with BusTimeout (with `received`) if the deadline comes first — the replies that did
   * arrive were already given to onMessage — and with BusNoResponders or BusRemoteError.
   */
  requestStream(subject: string, payload: unknown, opts: RequestStreamOptions): Promise<void>;
  /** Drains: pending handlers' replies and buffered publishes go out, then the socket closes. */
  close(): Promise<void>;
}

export interface ConnectBusOptions {
  /** One server; or `servers` (a cluster) with `authenticator` and `tls`, from natsConnectOptions(). */
  url?: string;
  servers?: string[];
  authenticator?: NatsConnectOptions['authenticator'];
  tls?: NatsConnectOptions['tls'];
  /** Connection name shown by the server's /connz (e.g. `rlgate-gateway-<replica>`). */
  name: string;
  /** Deadline for the first connection (default 5 s). */
  timeoutMs?: number;
  /** Where handler failures that have no one to answer go (default: process.emitWarning). */
  onHandlerError?: (err: unknown, subject: string) => void;
}

export async function connectBus(opts: ConnectBusOptions): Promise<Bus> {
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: opts.servers ?? opts.url,
      authenticator: opts.authenticator,
      tls: opts.tls,
      name: opts.name,
      timeout: opts.timeoutMs ?? 5_000,
      reconnect: true,
      maxReconnectAttempts: -1,
      waitOnFirstConnect: false,
    });
  } catch (err) {
    throw new Error(`cannot connect to NATS at ${redactUrl(opts.servers?.join(',') ?? opts.url ?? '?')}: ${(err as Error).message}`, { cause: err });
  }
  const report =
    opts.onHandlerError ??
    ((err: unknown, subject: string) =>
      process.emitWarning(`bus handler on ${subject} failed: ${(err as Error)?.stack ?? err}`));
  const safeRespond = (msg: Msg, data: Uint8Array, headers?: MsgHdrs) => {
    try {
      msg.respond(data, headers ? { headers } : undefined);
    } catch (err) {
      report(err, msg.subject); // e.g. reply over max_payload, or connection closed
    }
  };

  // Streamed requests share one wildcard inbox subscription (as nats.js muxes plain requests),
  // so a fan-out costs no SUB/UNSUB round of its own; replies are routed by the last token.
  const streams = new Map<string, (msg: Msg) => void>();
  let streamSeq = 0;
  let inboxPrefix: string | undefined;
  const streamInbox = (): string => {
    if (inboxPrefix) return inboxPrefix;
    inboxPrefix = createInbox();
    nc.subscribe(`${inboxPrefix}.*`, {
      callback: (err, msg) => {
        if (err) return report(err, `${inboxPrefix}.*`);
        const id = msg.subject.slice(inboxPrefix!.length + 1);
        streams.get(id)?.(msg);
      },
    });
    return inboxPrefix;
  };

  const bus: Bus = {
    nc,

    async request<T>(subject: string, payload: unknown, timeoutMs: number): Promise<T> {
      let msg: Msg;
      try {
        msg = await nc.request(subject, encode(payload), { timeout: timeoutMs });
      } catch (err) {
        throw mapRequestError(err, subject, timeoutMs);
      }
      const remote = remoteError(subject, msg);
      if (remote) throw remote;
      return decode(msg.data) as T;
    },

    publish(subject, payload) {
      nc.publish(subject, encode(payload));
    },

    subscribe(subject, handler, subOpts = {}) {
      const sub = nc.subscribe(subject, { queue: subOpts.queue });
      void (async () => {
        for await (const msg of sub) {
          try {
            await handler(decode(msg.data), msg);
          } catch (err) {
            report(err, msg.subject);
          }
        }
      })().catch((err) => report(err, subject));
      return { unsubscribe: () => sub.unsubscribe() };
    },

    respond(subject, handler, subOpts = {}) {
      const sub = nc.subscribe(subject, {
        queue: subOpts.queue,
        callback: (err, msg) => {
          if (err) {
            report(err, subject);
            return;
          }
          void (async () => {
            try {
              const value = await handler(decode(msg.data));
              if (msg.reply) safeRespond(msg, encode(value));
            } catch (e) {
              if (!msg.reply) return report(e, msg.subject);
              const r = errorReply(e);
              safeRespond(msg, r.data, r.headers);
            }
          })();
        },
      });
      return { unsubscribe: () => sub.unsubscribe() };
    },

    respondStream(subject, handler, subOpts = {}) {
      const sub = nc.subscribe(subject, {
        queue: subOpts.queue,
        callback: (err, msg) => {
          if (err) {
            report(err, subject);
            return;
          }
          void (async () => {
            // Replies that finish together travel together: one message carries a JSON array of
            // every reply sent in the same turn of the event loop (a fast fan-out of N legs is a
            // couple of messages, not N), flushed early before a batch nears max_payload.
            let open = true; // replies sent after the sentinel would reach nobody
            let batch: string[] = [];
            let bytes = 0;
            let scheduled = false;
            const limit = Math.max(64 * 1024, Math.floor((nc.info?.max_payload ?? 1024 * 1024) / 2));
            const flush = (last = false) => {
              scheduled = false;
              if (batch.length === 0) return false;
              const payload = encoder.encode(`[${batch.join(',')}]`);
              batch = [];
              bytes = 0;
              safeRespond(msg, payload, last ? endHeaders() : undefined);
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
              safeRespond(msg, r.data, r.headers);
            } finally {
              open = false;
              // The last batch carries the end marker itself; a bare sentinel only when there is
              // nothing left to send (one message fewer per replica on every fan-out).
              if (failed || !flush(true)) safeRespond(msg, SENTINEL);
            }
          })();
        },
      });
      return { unsubscribe: () => sub.unsubscribe() };
    },

    requestStream(subject, payload, streamOpts) {
      const { timeoutMs, onMessage } = streamOpts;
      const inbox = streamInbox();
      const id = `${++streamSeq}`;
      return new Promise<void>((resolve, reject) => {
        let received = 0;
        let chain: Promise<void> = Promise.resolve();
        let done = false;
        const finish = (err?: Error) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          streams.delete(id);
          if (err) reject(err);
          else resolve();
        };
        const timer = setTimeout(() => finish(new BusTimeout(subject, timeoutMs, received)), timeoutMs);
        streams.set(id, (msg) => {
          if (msg.data.length === 0) {
            // An empty message is either the server's "no responders" status or our sentinel.
            if (msg.headers?.code === 503) return finish(new BusNoResponders(subject));
            chain.then(() => finish(), (e: Error) => finish(e));
            return;
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
          if (msg.headers?.get(END_HEADER)) chain.then(() => finish(), (e: Error) => finish(e));
          else chain.catch((e: Error) => finish(e));
        });
        try {
          nc.publish(subject, encode(payload), { reply: `${inbox}.${id}` });
        } catch (e) {
          finish(mapRequestError(e, subject, timeoutMs));
        }
      });
    },

    async close() {
      if (nc.isClosed() || nc.isDraining()) return nc.closed().then(() => undefined);
      await nc.drain();
    },
  };
  return bus;
}
