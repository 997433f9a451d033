// What one client may hold of the gateway: how long it may take to send a request (headers, then
// the whole request), how many connections may be open, and how many generations may run at once.
// Receiving is bounded by Node's own timers (headersTimeout, requestTimeout), which stop once the
// request is fully read: an answer, streamed or not, is never cut by them. It never routes.

import type { IncomingMessage, ServerOptions, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { GatewayError } from '../api/errors.ts';
import type { GatewayConfig } from '../config/gateway-config.ts';

/** How often Node looks for requests past their receive timeouts (its default is 30 s). */
const CHECK_INTERVAL_MS = 1000;
/** What a refused generation is told to wait: held requests are long, a second is a polite retry. */
export const RETRY_AFTER_SECS = 1;

/**
 * The routes the in-flight cap counts: generations hold for as long as an engine generates, and
 * how many come is the outside's choice. Control calls, /health, /metrics and the registry are
 * never refused by it: a paused fleet holds its generations in flight, and refusing the resume
 * that would release them would wedge the gateway until they time out.
 */
const CAPPED_ROUTES: ReadonlySet<string> = new Set(['/generate', '/v1/chat/completions', '/v1/completions']);

type BoundOptions = Pick<FastifyServerOptions, 'requestTimeout' | 'clientErrorHandler'> & { http: ServerOptions };

/** The fastify options that bound receiving a request, and the 408 written when one is late. */
export function receiveBounds(config: GatewayConfig): BoundOptions {
  const requestTimeout = config.requestBodyTimeoutSecs * 1000;
  return {
    requestTimeout,
    // Node checks these at construction (header ≤ request); fastify sets requestTimeout again after.
    http: { requestTimeout, headersTimeout: config.requestHeaderTimeoutSecs * 1000, connectionsCheckingInterval: CHECK_INTERVAL_MS },
    clientErrorHandler(err, socket) {
      answerClientError(err as NodeJS.ErrnoException, socket, config);
    },
  };
}

/** Each connection's latest answer (its `req` is the request), read when a request is late. */
const latest = new WeakMap<Socket, ServerResponse>();

/** Follows which request each connection is on, so that a late request already answered is told apart. */
export function followAnswers(app: FastifyInstance): void {
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => latest.set(req.socket, res));
}

/**
 * A request Node could not read (late, malformed, headers too big) gets the catalogue's envelope
 * and the connection is closed: the rest of that request can no longer be told apart from the next.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket, config: GatewayConfig): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // A request answered before its body was all received (a 415 or a 503 from a hook, which read no
  // body) whose body then stalls: the caller has its answer, and a second one would be read as the
  // answer to its next request. The connection is only closed.
  const last = latest.get(socket);
  if (last && !last.req.complete && last.headersSent) {
    socket.destroySoon();
    return;
  }
  let status: number;
  let reason: string;
  let body: Record<string, unknown>;
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    status = 408;
    reason = 'Request Timeout';
    body = new GatewayError(
      'request_timeout',
      `the request was not received in time: headers within ${config.requestHeaderTimeoutSecs}s, the whole request within ${config.requestBodyTimeoutSecs}s`,
      {
        header_timeout_secs: config.requestHeaderTimeoutSecs,
        body_timeout_secs: config.requestBodyTimeoutSecs,
      },
    ).toJSON();
  } else if (err.code === 'HPE_HEADER_OVERFLOW') {
    status = 431;
    reason = 'Request Header Fields Too Large';
    body = { error: 'invalid_request', message: 'the request headers are too large' };
  } else {
    status = 400;
    reason = 'Bad Request';
    body = { error: 'invalid_request', message: 'the request is not valid HTTP' };
  }
  // Nothing was written on this socket for this request yet (answered requests are handled above).
  if (socket.writable) {
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroySoon();
}

/**
 * The generations running at once, against `--max-in-flight` (0: no cap). One count for the
 * fastify routes (capConnections' hooks) and the hot path (hot-path.ts) alike.
 */
export class InFlightCap {
  private count = 0;
  /** Bound once: 'close' listeners on every capped answer share it. */
  private readonly release = () => {
    this.count--;
  };

  constructor(readonly max: number) {}

  get full(): boolean {
    return this.max > 0 && this.count >= this.max;
  }

  /** Counts one generation until its answer closes (written, or the caller went away). */
  take(res: ServerResponse): void {
    if (this.max <= 0) return;
    this.count++;
    res.once('close', this.release);
  }

  /** The refusal of a generation past the cap: 503 `overloaded`, retry after a second. */
  refusal(): GatewayError {
    return new GatewayError('overloaded', `the gateway is handling its most generations at once (${this.max}); retry after ${RETRY_AFTER_SECS}s`, {
      limit: this.max,
      retryable: true,
    });
  }
}

/**
 * The connection cap and the in-flight cap. Node closes a connection past `maxConnections` as it
 * accepts it, before any byte is read: it cannot be answered, so the caller sees a closed socket.
 */
export function capConnections(app: FastifyInstance, config: GatewayConfig, cap: InFlightCap): void {
  if (config.maxConnections > 0) app.server.maxConnections = config.maxConnections;
  if (cap.max <= 0) return;
  const refuse = (reply: FastifyReply) => {
    const e = cap.refusal();
    reply.code(e.status).header('retry-after', String(RETRY_AFTER_SECS)).send(e.toJSON());
  };
  const capped = (req: FastifyRequest) => {
    const route = req.routeOptions?.url;
    return route !== undefined && CAPPED_ROUTES.has(route);
  };
  // Refused before the body is read when the cap is already full: a refusal costs no parsing.
  app.addHook('onRequest', (req, reply, done) => {
    if (capped(req) && cap.full) return refuse(reply);
    done();
  });
  // Counted only once the body is read: a client that sends its body slowly (or never) holds no
  // slot, so slow clients cannot fill the cap and starve generations until the body timeout. 'close'
  // fires once the answer is written or the caller went away, hijacked (relayed) answers included.
  app.addHook('preHandler', (req, reply, done) => {
    if (!capped(req)) return done();
    if (cap.full) return refuse(reply);
    cap.take(reply.raw);
    done();
  });
}
