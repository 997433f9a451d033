// Executes one control call against an engine's HTTP control endpoint (the SGLang server itself,
// or a TokenSpeed control app): one deadline per call, no retries, body read up to BODY_CAP.
// Knows nothing of routes, NATS or breakers: control calls never touch data-plane state.

import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Agent, Dispatcher } from 'undici';
import { BODY_CAP, DEADLINE, deadlineOf, decodeBody } from './control-call.ts';
import { undici } from './libraries.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { HttpPoolConfig } from '../wire/worker-entry.ts';

export interface ControlTarget {
  /** Registry URL: the one named in every message. */
  workerUrl: string;
  /** The worker's own client settings; workers with equal settings share one client. */
  pool?: HttpPoolConfig | null;
  /** Where the call goes: base_url for HTTP workers, the resolved rl.control_url otherwise. */
  controlUrl: string;
  /** The worker's own api key, sent as its bearer; never the caller's credentials. */
  apiKey: string | null;
  /** A pool already connected to the control URL's origin (the engine's own), used instead of ours. */
  dispatcher?: Dispatcher;
}

export class ControlClient {
  // Timeouts are ours (one deadline per call); undici's own header/body timeouts (300 s by
  // default) would cut a legitimate 600 s disk refit short.
  // Made at the first call, so that a gateway loads undici only once it has an engine to call.
  private sharedAgent: Agent | undefined;
  /** One client per distinct pool configuration; a configuration that cannot make a client keeps its reason. */
  private readonly pools = new Map<string, Agent | Error>();

  /**
   * The reason no client can be built for this configuration, or null when one can. Calls for
   * such a worker fail with `no_control_endpoint` and are never sent.
   */
  clientError(pool: HttpPoolConfig | null | undefined): string | null {
    const client = this.clientFor(pool);
    return client instanceof Error ? client.message : null;
  }

  private clientFor(pool: HttpPoolConfig | null | undefined): Agent | Error {
    if (!pool || Object.keys(pool).length === 0) {
      return (this.sharedAgent ??= new (undici().Agent)({ headersTimeout: 0, bodyTimeout: 0, connections: 64, keepAliveTimeout: 30_000 }));
    }
    const key = JSON.stringify(pool);
    let client = this.pools.get(key);
    if (!client) {
      client = buildAgent(pool);
      this.pools.set(key, client);
    }
    return client;
  }

  async call(target: ControlTarget, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    const started = performance.now();
    const remaining = call.deadline - Date.now();
    const base = target.controlUrl.replace(/\/+$/, '');
    const url = `${base}/${call.path}${call.query ? `?${call.query}` : ''}`;
    if (remaining <= 0) return this.timedOut(target, call, started);

    // A share's signal that already ends at this call's deadline is used as it is (one timer per
    // share); otherwise one controller for both the deadline and the caller's cancel (cheaper
    // than AbortSignal.timeout + AbortSignal.any).
    const shared = signal !== undefined && deadlineOf(signal) === call.deadline;
    let ctrl: AbortController | undefined;
    let timer: NodeJS.Timeout | undefined;
    let timedOutHere = false;
    const onCancel = () => ctrl?.abort();
    if (!shared) {
      const own = (ctrl = new AbortController());
      timer = setTimeout(() => {
        timedOutHere = true;
        own.abort();
      }, remaining);
      if (signal?.aborted) own.abort();
      else signal?.addEventListener('abort', onCancel, { once: true });
    }
    const callSignal = ctrl ? ctrl.signal : signal!;
    // A caller's signal that ends at a share's deadline (itself, or through AbortSignal.any) is a timeout.
    const timedOut = () => timedOutHere || signal?.reason === DEADLINE;
    const body = decodeBody(call.body);
    const headers: Record<string, string> = {};
    if (call.contentType) headers['content-type'] = call.contentType;
    else if (body) headers['content-type'] = 'application/json';
    for (const [k, v] of Object.entries(call.trace ?? {})) headers[k] = v;
    if (target.apiKey) headers.authorization = `Bearer ${target.apiKey}`;

    try {
      const { origin, prefix } = this.originOf(base);
      const agent = target.dispatcher ?? this.clientFor(target.pool);
      if (agent instanceof Error) throw agent;
      const res = await agent.request({
        origin,
        path: `${prefix}/${call.path}${call.query ? `?${call.query}` : ''}`,
        method: call.method,
        headers,
        body: body ?? undefined,
        signal: callSignal,
      });
      const { bytes, truncated } = await readCapped(res.body);
      const latencyMs = Math.max(0, Math.round(performance.now() - started));
      const contentType = String(res.headers['content-type'] ?? '');
      return { kind: 'answer', status: res.statusCode, latencyMs, body: decodeAnswer(bytes, truncated, contentType), truncated };
    } catch (err) {
      if (timedOut()) return this.timedOut(target, call, started);
      const latencyMs = Math.max(0, Math.round(performance.now() - started));
      return {
        kind: 'unreachable',
        latencyMs,
        message: `upstream \`${target.workerUrl}\` unreachable: error sending request for url (${url}): ${describe(err)}`,
      };
    } finally {
      if (!shared) {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onCancel);
      }
    }
  }

  private readonly origins = new Map<string, { origin: string; prefix: string }>();

  /** Origin and path prefix of a control base URL, parsed once per distinct base. */
  private originOf(base: string): { origin: string; prefix: string } {
    let o = this.origins.get(base);
    if (!o) {
      const u = new URL(base);
      o = { origin: u.origin, prefix: u.pathname.replace(/\/+$/, '') };
      if (this.origins.size > 4096) this.origins.clear();
      this.origins.set(base, o);
    }
    return o;
  }

  private timedOut(target: ControlTarget, call: ControlCall, started: number): ControlOutcome {
    return {
      kind: 'timeout',
      latencyMs: Math.max(0, Math.round(performance.now() - started)),
      message: `upstream \`${target.workerUrl}\` timed out after ${call.timeoutSecs}s`,
    };
  }

  async close(): Promise<void> {
    const agents = [this.sharedAgent, ...this.pools.values()].filter((p): p is Agent => p !== undefined && !(p instanceof Error));
    await Promise.all(agents.map((a) => a.close()));
  }
}

function buildAgent(pool: HttpPoolConfig): Agent | Error {
  let ca: string | undefined;
  if (pool.ca_cert_path !== undefined) {
    try {
      ca = readFileSync(pool.ca_cert_path, 'utf8');
    } catch (err) {
      return new Error(`cannot read CA bundle ${pool.ca_cert_path}: ${(err as Error).message}`);
    }
    // Node's TLS accepts a bundle with no certificate in it silently; check it ourselves.
    const blocks = ca.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
    if (blocks.length === 0) return new Error(`bad CA bundle ${pool.ca_cert_path}: no PEM certificate in it`);
    for (const block of blocks) {
      try {
        new X509Certificate(block);
      } catch (err) {
        return new Error(`bad CA bundle ${pool.ca_cert_path}: ${(err as Error).message}`);
      }
    }
  }
  return new (undici().Agent)({
    headersTimeout: 0,
    bodyTimeout: 0,
    connections: pool.max_connections ?? 64,
    keepAliveTimeout: 30_000,
    ...(ca ? { connect: { ca } } : {}),
  });
}

async function readCapped(stream: AsyncIterable<Uint8Array> & { destroy(): void }): Promise<{ bytes: Buffer; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = Buffer.from(chunk);
    if (size + buf.length > BODY_CAP) {
      chunks.push(buf.subarray(0, BODY_CAP - size));
      stream.destroy();
      return { bytes: Buffer.concat(chunks, BODY_CAP), truncated: true };
    }
    chunks.push(buf);
    size += buf.length;
  }
  return { bytes: Buffer.concat(chunks, size), truncated: false };
}

/** SMG's answer body: truncated → string; json content-type that parses → value; else lossy text. */
function decodeAnswer(bytes: Buffer, truncated: boolean, contentType: string): unknown {
  const text = bytes.toString('utf8');
  if (truncated) return text;
  if (contentType.includes('json') && bytes.length > 0) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return text;
}

function describe(err: unknown): string {
  if (err instanceof undici().errors.UndiciError) return `${err.code}: ${err.message}`;
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code;
  const message = e.cause?.message ?? e.message ?? String(err);
  return code ? `${code}: ${message}` : message;
}
