// One attempt of a data-plane request on one HTTP engine, on the hot path: the caller's bytes go
// up untouched through undici's dispatch API and the answer is written straight to the caller's
// socket as it arrives (no intermediate streams, no AbortSignal per request), with the routing
// and version headers added. The one exception is a buffered JSON /generate with RL on, read
// whole so the mixed-version check can see it. It never picks engines or retries (generate.ts).

import type { FastifyReply } from 'fastify';
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { HttpEngineClient } from '../engines/http.ts';
import type { Worker } from '../fleet/worker.ts';
import { GatewayError } from './errors.ts';
import type { DataPlanePath } from './data-plane-input.ts';
import type { RequestWatch } from './request-watch.ts';
import type { Services } from './services.ts';
import { EXPOSED_HEADERS, GATEWAY_ONLY_HEADERS, MIXED_HEADERS, ROUTED_HEADER, WEIGHT_HEADERS, isJsonContentType, isMixedBytes } from './stamping.ts';

const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade', ...GATEWAY_ONLY_HEADERS]);

export type Sent =
  | { kind: 'answered' }
  /** The upstream failed before any response byte: the caller has seen nothing, a retry is safe. */
  | { kind: 'unsent'; error: Error }
  | { kind: 'deadline' };

/** Runs one attempt; resolves once the caller has its answer head (or the whole body), or the attempt failed. */
export function relayToHttpEngine(
  services: Services,
  path: DataPlanePath,
  stream: boolean,
  body: Buffer | null,
  worker: Worker,
  client: HttpEngineClient,
  reply: FastifyReply,
  watch: RequestWatch,
): Promise<Sent> {
  const rl = services.config.rl.enabled;
  services.host.acquire(worker.id);
  let released = false;
  // A caller that goes away says nothing about the engine: neither success nor failure. A
  // request that outlives the deadline counts against the engine.
  const release = (outcome: 'success' | 'failure' | 'neutral') => {
    if (released) return;
    released = true;
    services.host.release(worker.id, outcome);
  };
  const interrupted = (): 'neutral' | 'failure' => (watch.callerGone ? 'neutral' : 'failure');
  const headers: Record<string, string> = worker.apiKey
    ? { 'content-type': 'application/json', authorization: `Bearer ${worker.apiKey}` }
    : { 'content-type': 'application/json' };
  const res = reply.raw;

  return new Promise<Sent>((resolve, reject) => {
    let status = 0;
    let outcome: 'success' | 'failure' = 'success';
    /** Buffered RL /generate: the body is collected here, then sent whole. */
    let chunks: Buffer[] | null = null;
    let head: OutgoingHttpHeaders | null = null;
    let started = false; // a byte of the answer (its head) went to the caller
    let settled = false;
    const settle = (s: Sent) => {
      if (!settled) {
        settled = true;
        resolve(s);
      }
    };
    const fail = (err: unknown) => {
      if (!settled) {
        settled = true;
        reject(err);
      }
    };
    const failedBeforeAnswer = (err: Error) => {
      if (watch.callerGone) return fail(new GatewayError('invalid_request', 'client went away'));
      if (watch.expired) return settle({ kind: 'deadline' });
      if (status === 0) return settle({ kind: 'unsent', error: err });
      // The engine answered a head, then broke off while we were still reading it whole.
      services.metrics.request(path, 502);
      fail(new GatewayError('upstream_unreachable', `upstream \`${worker.url}\` unreachable: ${err.message}`, { worker_id: worker.id, url: worker.url }));
    };

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(controller) {
        if (watch.interrupted) return controller.abort(new Error(watch.callerGone ? 'caller went away' : 'request deadline passed'));
        watch.attach(controller);
      },
      onResponseStart(controller, statusCode, upstreamHeaders) {
        if (statusCode < 200) return; // 1xx: the real head follows
        status = statusCode;
        outcome = statusCode >= 500 ? 'failure' : 'success';
        head = answerHead(services, worker, reply, upstreamHeaders, rl);
        // Streams are never inspected (§13.4): only a buffered 2xx JSON /generate is read whole.
        if (rl && path === '/generate' && !stream && statusCode < 300 && isJsonContentType(upstreamHeaders['content-type'])) {
          chunks = [];
          return;
        }
        reply.hijack();
        res.writeHead(statusCode, head);
        started = true;
        services.metrics.request(path, statusCode);
        settle({ kind: 'answered' });
        res.on('drain', () => controller.resume());
      },
      onResponseData(controller, chunk) {
        if (chunks) chunks.push(chunk);
        else if (!res.write(chunk)) controller.pause(); // the caller's socket is full: wait for 'drain'
      },
      onResponseEnd() {
        watch.attach(null);
        if (chunks) {
          const payload = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
          release(outcome);
          const version = services.view.engine(worker).version;
          if (isMixedBytes(payload, version)) {
            for (const h of MIXED_HEADERS) head![h] = 'true';
            services.metrics.mixedVersion();
          }
          head!['content-length'] = payload.length;
          reply.hijack();
          res.writeHead(status, head!);
          res.end(payload);
          services.metrics.request(path, status);
          return settle({ kind: 'answered' });
        }
        res.end();
        release(outcome);
      },
      onResponseError(_controller, err) {
        watch.attach(null);
        release(watch.interrupted ? interrupted() : 'failure');
        if (!started) return failedBeforeAnswer(err);
        // Mid-stream: the caller already has a status line; all we can do is cut the answer off.
        res.destroy(err);
      },
    };
    client.pool.dispatch({ path, method: 'POST', headers, body }, handler);
  });
}

/** The caller's answer head: the engine's headers minus hop-by-hop and gateway-only ones, plus ours. */
function answerHead(services: Services, worker: Worker, reply: FastifyReply, upstream: IncomingHttpHeaders, rl: boolean): OutgoingHttpHeaders {
  const head: OutgoingHttpHeaders = {};
  for (const k in upstream) {
    const v = upstream[k];
    if (v !== undefined && !HOP_HEADERS.has(k)) head[k] = v;
  }
  head[ROUTED_HEADER] = worker.url;
  if (rl) {
    const version = services.view.engine(worker).version;
    if (version !== undefined) for (const h of WEIGHT_HEADERS) head[h] = version;
  }
  if (reply.request.headers.origin !== undefined) head['access-control-expose-headers'] = EXPOSED_HEADERS;
  return head;
}
