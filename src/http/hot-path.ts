// The data plane's own door, below fastify: `POST /generate` (and `PUT`), `POST
// /v1/chat/completions` and `POST /v1/completions` in their common shape (a JSON body of known
// length or chunked, no browser origin, a fleet of HTTP engines only) are served straight off
// node:http's 'request' event by the same relay as the fastify routes (generate.ts), without
// fastify's request and reply objects, hook chain, router and body parser. Everything else (another
// route or method, an odd content type or length, an origin header, a fleet with token engines, a
// closing gateway, a full in-flight cap) goes to fastify untouched, which answers it as it always
// has; so every refusal on this door is one the relay throws, mapped by error-answer.ts as fastify's
// error handler maps it. It never routes or relays itself.

import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import type { FastifyServerOptions } from 'fastify';
import type { DataPlanePath } from '../relay/data-plane-input.ts';
import type { AnswerTarget } from '../relay/http-relay.ts';
import type { Logger } from '../obs/logger.ts';
import { RETRY_AFTER_SECS, type InFlightCap } from './bounds.ts';
import { errorAnswer } from './error-answer.ts';
import { relay } from './generate.ts';
import type { Services } from './services.ts';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** The content types sent by every client we know of; any other JSON spelling goes to fastify. */
const PLAIN_JSON = new Set(['application/json', 'application/json; charset=utf-8', 'application/json;charset=utf-8']);
/** A decimal length without sign or leading zeros (fastify's own reading of anything else is kept). */
const LENGTH = /^[1-9][0-9]{0,15}$/;

/** The hot path's answer target: the bare response, written by hand (no fastify reply to hijack). */
class BareTarget implements AnswerTarget {
  constructor(
    readonly raw: ServerResponse,
    readonly request: IncomingMessage,
  ) {}
  hijack(): void {}
}

export class HotPath {
  /** Set when the app starts closing: fastify then answers every request 503 (return503OnClosing). */
  closing = false;
  private fleetGeneration = -1;
  private httpOnlyFleet = false;
  private readonly log: Logger;

  constructor(
    private readonly services: Services,
    private readonly cap: InFlightCap,
  ) {
    this.log = services.log.child({ component: 'http' });
  }

  /**
   * fastify's `serverFactory`: the node:http server fastify would make (the same options and
   * timeouts, lib/server.js), whose requests this door sees first.
   */
  server(fastify: Handler, options: FastifyServerOptions & { http?: ServerOptions }): Server {
    const server = createServer(options.http ?? {}, (req, res) => {
      if (!this.serve(req, res)) fastify(req, res);
    });
    if (options.keepAliveTimeout !== undefined) server.keepAliveTimeout = options.keepAliveTimeout;
    if (options.requestTimeout !== undefined) server.requestTimeout = options.requestTimeout;
    server.setTimeout(options.connectionTimeout ?? 0);
    if (options.maxRequestsPerSocket !== undefined && options.maxRequestsPerSocket > 0) server.maxRequestsPerSocket = options.maxRequestsPerSocket;
    return server;
  }

  /** Serves the request if it is the data plane's common shape; false leaves it to fastify, untouched. */
  serve(req: IncomingMessage, res: ServerResponse): boolean {
    const path = dataPlanePath(req.method, req.url);
    if (path === undefined || this.closing) return false;
    const h = req.headers;
    if (h.origin !== undefined) return false;
    const type = h['content-type'];
    if (type === undefined || !(PLAIN_JSON.has(type) || PLAIN_JSON.has(type.toLowerCase()))) return false;
    const length = h['content-length'];
    if (length === undefined ? h['transfer-encoding'] !== 'chunked' : !LENGTH.test(length) || Number(length) > this.services.config.maxBodyBytes) return false;
    if (this.cap.full || !this.httpEnginesOnly()) return false;
    this.readBody(path, req, res);
    return true;
  }

  /** Whether every registered engine is an HTTP one, refreshed when the registry changes. */
  private httpEnginesOnly(): boolean {
    const { registry } = this.services;
    if (registry.generation !== this.fleetGeneration) {
      this.fleetGeneration = registry.generation;
      this.httpOnlyFleet = registry.all().every((w) => w.connectionMode === 'http');
    }
    return this.httpOnlyFleet;
  }

  /** Reads the body as fastify's raw-body parser does (limit included), then relays. */
  private readBody(path: DataPlanePath, req: IncomingMessage, res: ServerResponse): void {
    const limit = this.services.config.maxBodyBytes;
    let first: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    let received = 0;
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) {
        stop();
        // Nothing more is read into memory; the rest of the body is let through and dropped.
        this.fail(res, Object.assign(new Error('request body too large'), { code: 'FST_ERR_CTP_BODY_TOO_LARGE' }));
        return;
      }
      if (first === undefined) first = chunk;
      else (chunks ??= [first]).push(chunk);
    };
    const onEnd = (err?: Error & { statusCode?: number }) => {
      stop();
      if (err) {
        if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
        return this.fail(res, err);
      }
      this.run(path, req, res, chunks ? Buffer.concat(chunks, received) : (first ?? null));
    };
    const stop = () => {
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onEnd);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onEnd);
    req.resume();
  }

  private run(path: DataPlanePath, req: IncomingMessage, res: ServerResponse, body: Buffer | null): void {
    // The cap counts from a read body, as its preHandler hook does on the fastify routes.
    if (this.cap.full) {
      const e = this.cap.refusal();
      return this.answer(res, e.status, e.toJSON(), RETRY_AFTER_SECS);
    }
    this.cap.take(res);
    relay(this.services, path, req.headers, body, new BareTarget(res, req), undefined).catch((err: unknown) => this.fail(res, err));
  }

  private fail(res: ServerResponse, err: unknown): void {
    // An answer already under way can only be cut off (fastify's hijacked replies are, too).
    if (res.headersSent) return void res.destroy();
    const a = errorAnswer(err, this.services.config.maxBodyBytes);
    if (a.internal) this.log.error({ err, method: res.req.method, url: res.req.url }, 'unhandled error');
    this.answer(res, a.status, a.body);
  }

  /** A JSON answer as fastify's reply.send writes one. */
  private answer(res: ServerResponse, status: number, body: Record<string, unknown>, retryAfter?: number): void {
    const text = JSON.stringify(body);
    res.statusCode = status;
    if (retryAfter !== undefined) res.setHeader('retry-after', String(retryAfter));
    res.setHeader('content-type', 'application/json; charset=utf-8');
    res.setHeader('content-length', Buffer.byteLength(text));
    res.end(text);
  }
}

/** The data-plane route a method and URL name exactly (no query, no other spelling), if any. */
function dataPlanePath(method: string | undefined, url: string | undefined): DataPlanePath | undefined {
  if (method === 'POST') {
    if (url === '/generate' || url === '/v1/chat/completions' || url === '/v1/completions') return url;
    return undefined;
  }
  return method === 'PUT' && url === '/generate' ? url : undefined;
}
