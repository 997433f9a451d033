// SGLang-shaped HTTP engines: discovery (server info, model info, with the deprecated aliases
// as fallbacks), liveness, and the connection pool the data plane relays through. Never parses
// routes of our own API and never touches NATS.

import { Pool } from 'undici';
import type { EngineClient, EngineFacts } from './engine-client.ts';

export class HttpEngineClient implements EngineClient {
  readonly mode = 'http' as const;
  /** Data-plane pool. Timeouts are the relay's business (long rollouts), not undici's. */
  readonly pool: Pool;
  private readonly origin: string;
  private readonly authHeader: Record<string, string>;

  constructor(
    readonly url: string,
    apiKey: string | null,
    opts: { connections?: number } = {},
  ) {
    this.origin = new URL(url).origin;
    this.pool = new Pool(this.origin, {
      connections: opts.connections ?? 256,
      headersTimeout: 0,
      bodyTimeout: 0,
      keepAliveTimeout: 60_000,
      pipelining: 1,
    });
    this.authHeader = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  }

  async discover(signal: AbortSignal): Promise<EngineFacts> {
    const serverInfo = await this.getJsonWithFallback(['/server_info', '/get_server_info'], signal);
    if (!serverInfo) throw new Error(`${this.url} answered neither /server_info nor /get_server_info`);
    const modelInfo = await this.getJsonWithFallback(['/model_info', '/get_model_info'], signal);
    return { serverInfo, modelInfo, paused: await this.readPaused(signal) };
  }

  async probe(signal: AbortSignal, quiet = false): Promise<void | { paused?: boolean }> {
    // SGLang's /health runs a generation on newer builds; a paused engine would hold it.
    const path = quiet ? '/model_info' : '/health';
    const res = await this.pool.request({ path, method: 'GET', headers: this.authHeader, signal });
    await res.body.dump();
    await connectionFree();
    if (res.statusCode >= 500 || (quiet && res.statusCode >= 300 && res.statusCode !== 404)) throw new Error(`${path} answered ${res.statusCode}`);
    // A paused engine that admits requests again was resumed behind our back, or restarted.
    if (quiet) return { paused: await this.readPaused(signal) };
  }

  /** `/ready` (newest SGLang builds) is 503 while the engine admits no request: paused. Older builds: unknown. */
  private async readPaused(signal: AbortSignal): Promise<boolean | undefined> {
    const res = await this.pool.request({ path: '/ready', method: 'GET', headers: this.authHeader, signal });
    await res.body.dump();
    await connectionFree();
    if (res.statusCode === 200) return false;
    if (res.statusCode === 503) return true;
    return undefined;
  }

  poolFor(url: string): Pool | undefined {
    return url.startsWith(this.origin) && (url.length === this.origin.length || url[this.origin.length] === '/') ? this.pool : undefined;
  }

  async close(): Promise<void> {
    await this.pool.close();
  }

  /** New path first, deprecated alias second (spec/engines.md §1.1). 404/405 means "try next". */
  private async getJsonWithFallback(paths: string[], signal: AbortSignal): Promise<Record<string, unknown> | null> {
    for (const path of paths) {
      const res = await this.pool.request({ path, method: 'GET', headers: this.authHeader, signal });
      if (res.statusCode === 404 || res.statusCode === 405) {
        await res.body.dump();
        await connectionFree();
        continue;
      }
      if (res.statusCode >= 300) {
        await res.body.dump();
        throw new Error(`${path} answered ${res.statusCode}`);
      }
      const value = (await res.body.json()) as unknown;
      await connectionFree();
      if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
      throw new Error(`${path} did not answer a JSON object`);
    }
    return null;
  }
}

/**
 * Resolves once undici has put the connection of the request just read back in its pool: a
 * request sent in the same tick finds it still busy and opens a second connection, which the
 * engine then keeps (one socket per engine is the budget at 10,000 engines).
 */
export function connectionFree(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
