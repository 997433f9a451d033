// The life of one caller's data-plane request across its attempts: one deadline for every
// attempt (`--request-timeout-secs`) and whether the caller went away. The HTTP relay's running
// attempt is aborted through its undici controller; token relays, which need AbortSignals, get
// them made on first ask, so an HTTP request never pays for an AbortController.

import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { AttemptSignals } from './token-relay.ts';

export class RequestWatch {
  callerGone = false;
  expired = false;
  /**
   * The request went past its `max-staleness` bound while it ran (stale-guard.ts): `aborted` (it
   * was cut off) or `marked` (it finishes, and its buffered answer says so in `x-rlgate-stale`).
   */
  stale: 'aborted' | 'marked' | undefined;
  /** Why it went stale, for the abort partial a token engine's answer ends with. */
  staleMessage = '';
  private current: Dispatcher.DispatchController | null = null;
  private controllers: { caller: AbortController; deadline: AbortController; stale: AbortController } | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(res: ServerResponse, timeoutMs: number) {
    // Module-level listeners with the watch as argument or on the response: no closure per request.
    this.timer = setTimeout(onDeadline, timeoutMs, this).unref();
    (res as WatchedResponse)[WATCH] = this;
    res.once('close', onClose);
  }

  /** @internal the request's deadline passed. */
  expire(): void {
    this.expired = true;
    this.current?.abort(new Error('request deadline passed'));
    this.controllers?.deadline.abort();
  }

  /** @internal the caller's response closed, finished or not. */
  closed(finished: boolean): void {
    clearTimeout(this.timer);
    if (finished) return;
    this.callerGone = true;
    this.current?.abort(new Error('caller went away'));
    this.controllers?.caller.abort();
  }

  /**
   * The request is past its staleness bound. Marked, it goes on; aborted, a token engine's
   * generation is cancelled (its answer ends as an abort partial). An HTTP engine is asked to abort
   * it by the caller of this (by rid), so that its own abort answer comes back as SGLang writes it.
   */
  goneStale(action: 'abort' | 'mark', message: string): void {
    this.stale = action === 'abort' ? 'aborted' : 'marked';
    this.staleMessage = message;
    if (action === 'abort') this.controllers?.stale.abort();
  }

  get interrupted(): boolean {
    return this.callerGone || this.expired;
  }

  /** The HTTP attempt running now (null between attempts). */
  attach(c: Dispatcher.DispatchController | null): void {
    this.current = c;
  }

  /** The same facts as AbortSignals, for the token relays. */
  signals(): AttemptSignals {
    if (!this.controllers) {
      this.controllers = { caller: new AbortController(), deadline: new AbortController(), stale: new AbortController() };
      if (this.callerGone) this.controllers.caller.abort();
      if (this.expired) this.controllers.deadline.abort();
      if (this.stale === 'aborted') this.controllers.stale.abort();
    }
    return { caller: this.controllers.caller.signal, deadline: this.controllers.deadline.signal, stale: this.controllers.stale.signal, watch: this };
  }
}

const WATCH = Symbol('rlgate.requestWatch');
type WatchedResponse = ServerResponse & { [WATCH]?: RequestWatch };

function onDeadline(watch: RequestWatch): void {
  watch.expire();
}

function onClose(this: WatchedResponse): void {
  this[WATCH]?.closed(this.writableFinished);
}
