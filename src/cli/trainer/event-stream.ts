// Follows one refit's events over HTTP: `GET /v1/rl/refits/{id}/events` (server-sent events) on
// the gateway, from the refit's first event, handing each one on as it comes, until the `report`
// event or until told to stop. The route answers 404 until the refit is queued, and a dropped
// stream is opened again after the last event seen (`Last-Event-ID`): both are retried quietly,
// since progress is a view and the refit's answer never depends on it.

import { request } from 'undici';

const RETRY_MS = 250;

export interface FollowOptions {
  /** Gateway base URL, without a trailing slash. */
  gateway: string;
  refitId: string;
  /** The admin key's authorization header, when the gateway has one. */
  headers?: Record<string, string>;
  onEvent(event: unknown): void;
  signal: AbortSignal;
}

/** Resolves after the `report` event, or when `signal` aborts; never rejects. */
export async function followRefitEvents(opts: FollowOptions): Promise<void> {
  let lastId: string | undefined;
  const url = `${opts.gateway}/v1/rl/refits/${encodeURIComponent(opts.refitId)}/events`;
  while (!opts.signal.aborted) {
    try {
      const res = await request(url, {
        headers: { ...opts.headers, accept: 'text/event-stream', ...(lastId ? { 'last-event-id': lastId } : {}) },
        signal: opts.signal,
      });
      if (res.statusCode !== 200) {
        await res.body.dump();
      } else {
        const ended = await readEvents(res.body, (id, data) => {
          if (id !== undefined) lastId = id;
          let event: unknown;
          try {
            event = JSON.parse(data);
          } catch {
            return false;
          }
          opts.onEvent(event);
          return (event as { type?: unknown } | null)?.type === 'report';
        });
        if (ended) return;
      }
    } catch {
      if (opts.signal.aborted) return;
    }
    await pause(RETRY_MS, opts.signal);
  }
}

/**
 * Reads `text/event-stream` frames (`id:`, `data:` lines, a blank line ends one; comments and
 * `event:` are skipped: the JSON says its type). Resolves true once `onFrame` says it was the last.
 */
async function readEvents(body: AsyncIterable<Buffer>, onFrame: (id: string | undefined, data: string) => boolean): Promise<boolean> {
  const decoder = new TextDecoder();
  let pending = '';
  let id: string | undefined;
  let data: string[] = [];
  for await (const chunk of body) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl).replace(/\r$/, '');
      pending = pending.slice(nl + 1);
      if (line === '') {
        if (data.length > 0 && onFrame(id, data.join('\n'))) return true;
        id = undefined;
        data = [];
      } else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      else if (line.startsWith('id:')) id = line.slice(3).trim();
    }
  }
  return false;
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
