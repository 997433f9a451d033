// The timing of one data-plane request, from its handler's start (the whole body read) until the
// caller's response closes: one observation of the request histogram by route, model, answering
// worker and status, and for a streamed 2xx answer the time to its first event and between its
// events. The relays reach it through the response (`streamedEvent(res)`), as request-watch.ts
// does, so no relay signature carries it. It never changes what the caller gets.

import type { ServerResponse } from 'node:http';
import type { Counter, Histogram } from 'prom-client';

/** The series a timing writes (obs/metrics.ts owns them and their names). */
export interface DataPlaneSeries {
  duration: Histogram<'route' | 'model' | 'worker' | 'status'>;
  ttft: Histogram<'route' | 'model' | 'worker'>;
  itl: Histogram<'route' | 'model' | 'worker'>;
  attempts: Counter<'worker' | 'model'>;
}

/**
 * The status of a caller that went away before any answer head: nginx's "client closed request",
 * so such requests are neither counted as answered nor lost.
 */
export const CALLER_GONE_STATUS = '499';

export class RequestTiming {
  private readonly started = performance.now();
  /** When the last streamed event went out; 0 before the first. */
  private last = 0;
  /**
   * The stream series' labels, built once per attempt rather than per event (a streamed answer
   * has one per token). Empty worker and model until an attempt is routed: a request refused
   * before routing has neither.
   */
  private labels: { route: string; model: string; worker: string };

  constructor(
    private readonly series: DataPlaneSeries,
    private readonly route: string,
    res: ServerResponse,
  ) {
    this.labels = { route, model: '', worker: '' };
    // A module-level listener with the timing on the response: no closure per request.
    (res as TimedResponse)[TIMING] = this;
    res.once('close', onClose);
  }

  /** An attempt routed to this worker (a retry moves the request's labels to the new worker). */
  attempt(worker: { url: string; modelId: string }): void {
    this.labels = { route: this.route, model: worker.modelId, worker: worker.url };
    this.series.attempts.inc({ worker: worker.url, model: worker.modelId });
  }

  /**
   * One event of a streamed 2xx answer went to the caller. The first is the time to first token
   * whatever it holds; after it only events with new tokens time a gap (a completion or the
   * `[DONE]` terminator right after the last token is no inter-token latency).
   */
  event(tokens: boolean): void {
    const now = performance.now();
    if (this.last === 0) this.series.ttft.observe(this.labels, (now - this.started) / 1000);
    else if (tokens) this.series.itl.observe(this.labels, (now - this.last) / 1000);
    else return;
    this.last = now;
  }

  /** @internal the caller's response closed. */
  closed(res: ServerResponse): void {
    const status = res.headersSent ? String(res.statusCode) : CALLER_GONE_STATUS;
    this.series.duration.observe({ ...this.labels, status }, (performance.now() - this.started) / 1000);
  }
}

/** An event of a streamed 2xx token-engine answer on `res` went out; `tokens`: it brought new ones. */
export function streamedEvent(res: ServerResponse, tokens: boolean): void {
  (res as TimedResponse)[TIMING]?.event(tokens);
}

const DONE = Buffer.from('data: [DONE]\n\n');

/**
 * A chunk of a streamed 2xx HTTP answer on `res` went out: the bytes are relayed untouched, so a
 * chunk stands for an event, and the bare SSE terminator for none.
 */
export function streamedChunk(res: ServerResponse, chunk: Buffer): void {
  (res as TimedResponse)[TIMING]?.event(!(chunk.length === DONE.length && chunk.equals(DONE)));
}

const TIMING = Symbol('rlgate.requestTiming');
type TimedResponse = ServerResponse & { [TIMING]?: RequestTiming };

function onClose(this: TimedResponse): void {
  const timing = this[TIMING];
  this[TIMING] = undefined;
  timing?.closed(this);
}
