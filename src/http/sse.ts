// A server-sent events answer (text/event-stream) on a fastify reply: the stream is written to the
// raw socket, a comment every 15 s keeps proxies from closing a quiet stream, and `closed` tells
// the route when the client went away. Events are `id`, `event`, `data` (one JSON line).

import type { FastifyReply, FastifyRequest } from 'fastify';

const KEEP_ALIVE_MS = 15_000;

export interface SseStream {
  send(event: string, data: unknown, id?: number | string): void;
  end(): void;
  /** Aborted when the client disconnects or the stream ends. */
  readonly closed: AbortSignal;
}

export function openSse(req: FastifyRequest, reply: FastifyReply): SseStream {
  const done = new AbortController();
  reply.hijack();
  const res = reply.raw;
  const headers: Record<string, string> = {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    // nginx and similar proxies buffer answers unless told not to.
    'x-accel-buffering': 'no',
  };
  // Hijacked answers skip fastify's hooks: keep the request id the other answers carry.
  const rid = reply.getHeader('x-request-id');
  if (typeof rid === 'string') headers['x-request-id'] = rid;
  res.writeHead(200, headers);
  res.write(': stream open\n\n');
  const ping = setInterval(() => res.write(': keep-alive\n\n'), KEEP_ALIVE_MS);
  const close = () => {
    if (done.signal.aborted) return;
    clearInterval(ping);
    done.abort();
  };
  req.raw.on('close', close);
  res.on('close', close);
  return {
    send(event, data, id) {
      if (done.signal.aborted) return;
      res.write(`${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    },
    end() {
      if (done.signal.aborted) return;
      close();
      res.end();
    },
    closed: done.signal,
  };
}

/** The `Last-Event-ID` a reconnecting client sends (a stream sequence), or 0. */
export function lastEventId(req: FastifyRequest): number {
  const raw = req.headers['last-event-id'];
  const n = typeof raw === 'string' ? Number(raw) : NaN;
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}
