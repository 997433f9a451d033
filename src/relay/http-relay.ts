// One attempt of a data-plane request on one HTTP engine, on the hot path: the caller's bytes go
// up untouched through undici's dispatch API and the answer is written straight to the caller's
// socket as it arrives (no intermediate streams, no AbortSignal per request), with the routing
// and version headers added. The one exception is a buffered JSON /generate with RL on, read
// whole so the mixed-version check can see it. It never picks engines or retries (generate.ts).

import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { HttpEngineClient } from '../engines/http.ts';
import type { RequestOutcome } from '../fleet/policies/policy.ts';
import type { Worker } from '../fleet/worker.ts';
import { GatewayError } from '../api/errors.ts';
import type { DataPlanePath } from './data-plane-input.ts';
import type { RequestWatch } from './request-watch.ts';
import type { RelayServices } from './relay-services.ts';
import { streamedChunk } from '../obs/request-timing.ts';
import { readAnswerCounts } from './answer-counts.ts';
import {
  ADMITTED_HEADER,
  EXPOSED_HEADERS,
  GATEWAY_ONLY_HEADERS,
  MIXED_HEADERS,
  ROUTED_HEADER,
  STALE_HEADER,
  WEIGHT_HEADERS,
  isJsonContentType,
  isMixedBytes,
} from './stamping.ts';

const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade', ...GATEWAY_ONLY_HEADERS]);

/**
 * Where an attempt writes its answer: fastify's reply (the routes in http/generate.ts) or the hot
 * path's bare response (http/hot-path.ts). `hijack` tells fastify the answer is written by hand.
 */
export interface AnswerTarget {
  readonly raw: ServerResponse;
  readonly request: { readonly headers: IncomingHttpHeaders };
  hijack(): unknown;
}

export type Sent =
  | { kind: 'answered' }
  /** The upstream failed before any response byte: the caller has seen nothing, a retry is safe. */
  | { kind: 'unsent'; error: Error }
  | { kind: 'deadline' };

/** Runs one attempt; resolves once the caller has its answer head (or the whole body), or the attempt failed. */
export function relayToHttpEngine(
  services: RelayServices,
  path: DataPlanePath,
  stream: boolean,
  body: Buffer | null,
  worker: Worker,
  client: HttpEngineClient,
  reply: AnswerTarget,
  watch: RequestWatch,
  outcome: RequestOutcome,
  /** The engine's table version as the request is sent (RL on): the answer's admitted version. */
  admitted: string | undefined,
): Promise<Sent> {
  return new Promise<Sent>((resolve, reject) => {
    const attempt = new HttpAttempt(services, path, stream, worker, reply, watch, outcome, admitted, resolve, reject);
    services.host.acquire(worker.id);
    client.pool.dispatch({ path, method: 'POST', headers: upstreamHeaders(worker.apiKey), body }, attempt);
  });
}

const JSON_HEADERS: Readonly<Record<string, string>> = { 'content-type': 'application/json' };
/** One headers object per engine key, made once: undici only reads them. */
const keyedHeaders = new Map<string, Readonly<Record<string, string>>>();

function upstreamHeaders(apiKey: string | null | undefined): Readonly<Record<string, string>> {
  if (!apiKey) return JSON_HEADERS;
  let h = keyedHeaders.get(apiKey);
  if (!h) {
    // Keys are few (one per engine at most); a table grown past any real fleet's is started over.
    if (keyedHeaders.size >= 4096) keyedHeaders.clear();
    h = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
    keyedHeaders.set(apiKey, h);
  }
  return h;
}

/**
 * undici's handler for one attempt. A class, not an object of closures: the hot path allocates
 * one object per attempt and defines no functions per request.
 */
class HttpAttempt implements Dispatcher.DispatchHandler {
  private status = 0;
  private outcome: 'success' | 'failure' = 'success';
  /** Buffered RL /generate: the body is collected here, then sent whole. */
  private chunks: Buffer[] | null = null;
  private head: OutgoingHttpHeaders | null = null;
  private version: string | undefined;
  /** A byte of the answer (its head) went to the caller. */
  private started = false;
  private settled = false;
  private released = false;
  /** The answer's last two chunks: its counts are read off them at the end (answer-counts.ts). */
  private last: Buffer | undefined;
  private prev: Buffer | undefined;

  constructor(
    private readonly services: RelayServices,
    private readonly path: DataPlanePath,
    private readonly stream: boolean,
    private readonly worker: Worker,
    private readonly reply: AnswerTarget,
    private readonly watch: RequestWatch,
    private readonly answer: RequestOutcome,
    private readonly admitted: string | undefined,
    private readonly resolve: (s: Sent) => void,
    private readonly reject: (err: unknown) => void,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.watch.interrupted) return controller.abort(new Error(this.watch.callerGone ? 'caller went away' : 'request deadline passed'));
    this.watch.attach(controller);
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, upstream: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: the real head follows
    const { services, path } = this;
    const rl = services.config.rl.enabled;
    this.status = statusCode;
    this.outcome = statusCode >= 500 ? 'failure' : 'success';
    // One read of the table version for the stamped header and the mixed check alike.
    this.version = rl ? services.view.engine(this.worker).version : undefined;
    this.head = answerHead(this.worker, this.reply, upstream, rl, this.version, this.admitted);
    // Streams are never inspected: only a buffered 2xx JSON /generate is read whole.
    if (rl && path === '/generate' && !this.stream && statusCode < 300 && isJsonContentType(upstream['content-type'])) {
      this.chunks = [];
      return;
    }
    this.reply.hijack();
    const res = this.reply.raw;
    res.writeHead(statusCode, this.head);
    this.started = true;
    services.metrics.request(path, statusCode);
    this.settle({ kind: 'answered' });
    // The caller's socket drained: let the engine's bytes flow again.
    res.on('drain', () => controller.resume());
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.stream && this.status < 300) streamedChunk(this.reply.raw, chunk);
    this.prev = this.last;
    this.last = chunk;
    if (this.chunks) this.chunks.push(chunk);
    else if (!this.reply.raw.write(chunk)) controller.pause(); // the caller's socket is full: wait for 'drain'
  }

  onResponseEnd(): void {
    this.watch.attach(null);
    const res = this.reply.raw;
    if (this.status >= 200 && this.status < 300) {
      this.answer.answered = true;
      readAnswerCounts([this.last, this.prev], this.answer);
    }
    if (!this.chunks) {
      res.end();
      this.release(this.outcome);
      return;
    }
    const { services, path, status } = this;
    const payload = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.release(this.outcome);
    const head = this.head!;
    // Mixed: the body names another version than the engine holds, or a refit of the engine
    // landed while it ran (admitted on one version, answered on another).
    const straddled = this.admitted !== undefined && this.version !== undefined && this.admitted !== this.version;
    if (straddled || isMixedBytes(payload, this.version)) {
      for (const h of MIXED_HEADERS) head[h] = 'true';
      services.metrics.mixedVersion();
    }
    if (this.watch.stale) head[STALE_HEADER] = this.watch.stale;
    head['content-length'] = payload.length;
    this.reply.hijack();
    res.writeHead(status, head);
    res.end(payload);
    services.metrics.request(path, status);
    this.settle({ kind: 'answered' });
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    const { watch } = this;
    watch.attach(null);
    this.release(watch.interrupted ? (watch.callerGone ? 'neutral' : 'failure') : 'failure');
    // Mid-stream: the caller already has a status line; all we can do is cut the answer off.
    if (this.started) return void this.reply.raw.destroy(err);
    if (watch.callerGone) return this.fail(new GatewayError('invalid_request', 'client went away'));
    if (watch.expired) return this.settle({ kind: 'deadline' });
    if (this.status === 0) return this.settle({ kind: 'unsent', error: err });
    // The engine answered a head, then broke off while we were still reading it whole.
    this.services.metrics.request(this.path, 502);
    const { url, id } = this.worker;
    this.fail(new GatewayError('upstream_unreachable', `upstream \`${url}\` unreachable: ${err.message}`, { worker_id: id, url }));
  }

  /** A caller that goes away says nothing about the engine; outliving the deadline counts against it. */
  private release(outcome: 'success' | 'failure' | 'neutral'): void {
    if (this.released) return;
    this.released = true;
    this.services.host.release(this.worker.id, outcome);
  }

  private settle(s: Sent): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve(s);
  }

  private fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }
}

/** The caller's answer head: the engine's headers minus hop-by-hop and gateway-only ones, plus ours. */
function answerHead(
  worker: Worker,
  reply: AnswerTarget,
  upstream: IncomingHttpHeaders,
  rl: boolean,
  version: string | undefined,
  admitted: string | undefined,
): OutgoingHttpHeaders {
  const head: OutgoingHttpHeaders = {};
  for (const k in upstream) {
    const v = upstream[k];
    if (v !== undefined && !HOP_HEADERS.has(k)) head[k] = v;
  }
  head[ROUTED_HEADER] = worker.url;
  if (rl && version !== undefined) for (const h of WEIGHT_HEADERS) head[h] = version;
  if (rl && admitted !== undefined) head[ADMITTED_HEADER] = admitted;
  if (reply.request.headers.origin !== undefined) head['access-control-expose-headers'] = EXPOSED_HEADERS;
  return head;
}
