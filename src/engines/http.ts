// SGLang-shaped HTTP engines: discovery (server info, model info, with the deprecated aliases
// as fallbacks), liveness, the control connection control calls share, and the connection pool
// the data plane relays through. Never parses
// routes of our own API and never touches NATS.

import type { Client, Dispatcher, Pool } from 'undici';
import type { EngineClient, EngineFacts } from './engine-client.ts';
import { undici } from './libraries.ts';

export class HttpEngineClient implements EngineClient {
  readonly mode = 'http' as const;
  /**
   * The control connection: discovery, probes and control calls, one at a time (an engine's
   * control calls are serialised anyway). One socket per engine, and no pool's fixed queue
   * (16 KB each in undici) for an engine that serves no rollout.
   */
  private readonly control: Client;
  private dataPool: Pool | undefined;
  private readonly origin: string;
  private readonly authHeader: Record<string, string>;

  constructor(
    readonly url: string,
    apiKey: string | null,
    private readonly opts: { connections?: number } = {},
  ) {
    this.origin = new URL(url).origin;
    this.control = new (undici().Client)(this.origin, { headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 60_000, pipelining: 1 });
    this.authHeader = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  }

  /** Data-plane pool, made on the first routed request. Timeouts are the relay's business (long rollouts), not undici's. */
  get pool(): Pool {
    this.dataPool ??= new (undici().Pool)(this.origin, {
      connections: this.opts.connections ?? 256,
      headersTimeout: 0,
      bodyTimeout: 0,
      keepAliveTimeout: 60_000,
      pipelining: 1,
    });
    return this.dataPool;
  }

  async discover(signal: AbortSignal): Promise<EngineFacts> {
    const serverInfo = await this.getJsonWithFallback(['/server_info', '/get_server_info'], signal);
    if (!serverInfo) throw new Error(`${this.url} answered neither /server_info nor /get_server_info`);
    const modelInfo = await this.getJsonWithFallback(['/model_info', '/get_model_info'], signal);
    return { serverInfo, modelInfo, paused: await this.readPaused(signal) };
  }

  async probe(signal: AbortSignal, quiet = false): Promise<void | { paused?: boolean; skipped?: boolean }> {
    // A control call holds the connection (a wake-up may take a while): the probe would only
    // queue behind it and time out, which says nothing about the engine. Skipped this round.
    if (this.control.stats.size > 0) return { skipped: true };
    // SGLang's /health runs a generation on newer builds; a paused engine would hold it.
    const path = quiet ? '/model_info' : '/health';
    const status = await this.statusOf(path, signal);
    if (status >= 500 || (quiet && status >= 300 && status !== 404)) throw new Error(`${path} answered ${status}`);
    // A paused engine that admits requests again was resumed behind our back, or restarted.
    if (quiet) return { paused: await this.readPaused(signal) };
  }

  /** `/ready` (newest SGLang builds) is 503 while the engine admits no request: paused. Older builds: unknown. */
  private async readPaused(signal: AbortSignal): Promise<boolean | undefined> {
    const status = await this.statusOf('/ready', signal);
    if (status === 200) return false;
    if (status === 503) return true;
    return undefined;
  }

  /**
   * GET `path` on the control connection for its status alone; the body is read and dropped. The
   * probes' path: a fleet of thousands is probed up to 100 times a second, and undici's request()
   * would make a response stream and a parsed header object for each answer only to discard them.
   */
  private statusOf(path: string, signal: AbortSignal): Promise<number> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      this.control.dispatch({ path, method: 'GET', headers: this.authHeader }, new StatusHandler(signal, resolve, reject));
    });
  }

  poolFor(url: string): Dispatcher | undefined {
    // A probe holding the connection (a paused engine holds a generating /health until it is
    // resumed) would hold the call behind it: the call then goes on a connection of its own.
    if (this.control.stats.size > 0) return undefined;
    return url.startsWith(this.origin) && (url.length === this.origin.length || url[this.origin.length] === '/') ? this.control : undefined;
  }

  async pauseState(signal: AbortSignal): Promise<boolean | undefined> {
    const res = await this.pool.request({ path: '/ready', method: 'GET', headers: this.authHeader, signal });
    await res.body.dump();
    if (res.statusCode === 200) return false;
    if (res.statusCode === 503) return true;
    return undefined;
  }

  async close(): Promise<void> {
    await Promise.all([this.control.close(), this.dataPool?.close()]);
  }

  /** New path first, deprecated alias second. 404/405 means "try next". */
  private async getJsonWithFallback(paths: string[], signal: AbortSignal): Promise<Record<string, unknown> | null> {
    for (const path of paths) {
      const res = await this.control.request({ path, method: 'GET', headers: this.authHeader, signal });
      if (res.statusCode === 404 || res.statusCode === 405) {
        await res.body.dump();
        continue;
      }
      if (res.statusCode >= 300) {
        await res.body.dump();
        throw new Error(`${path} answered ${res.statusCode}`);
      }
      const value = (await res.body.json()) as unknown;
      if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
      throw new Error(`${path} did not answer a JSON object`);
    }
    return null;
  }
}

/**
 * One request on undici's dispatcher API whose answer is its status: no response stream, no header
 * object, the body discarded as it comes. The caller's signal aborts it; settles once.
 */
class StatusHandler {
  private abortFn: ((err?: Error) => void) | undefined;
  private status = 0;
  private done = false;

  constructor(
    private readonly signal: AbortSignal,
    private readonly resolve: (status: number) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    signal.addEventListener('abort', this);
  }

  /** The signal aborted: the handler is its own listener, so a probe adds no closure. */
  handleEvent(): void {
    if (this.abortFn) this.abortFn(this.signal.reason);
    else this.settle(this.signal.reason);
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.done) return abort(this.signal.reason);
    this.abortFn = abort;
  }

  onHeaders(status: number): boolean {
    if (status >= 200) this.status = status; // below: informational, the answer follows
    return true;
  }

  onData(): boolean {
    return true;
  }

  onComplete(): void {
    this.settle(undefined);
  }

  onError(err: unknown): void {
    this.settle(err ?? new Error('request failed'));
  }

  private settle(err: unknown): void {
    if (this.done) return;
    this.done = true;
    this.signal.removeEventListener('abort', this);
    if (err === undefined) this.resolve(this.status);
    else this.reject(err);
  }
}
