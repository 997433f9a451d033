// Executes one control call against an engine's HTTP control endpoint (the SGLang server itself,
// or a TokenSpeed control app): one deadline per call, no retries, body read up to BODY_CAP.
// Knows nothing of routes, NATS or breakers: control calls never touch data-plane state.

import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Agent, Dispatcher } from 'undici';
import { BODY_CAP, DEADLINE, deadlineOf, decodeBody, unwatchAbort, watchAbort } from './control-call.ts';
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

  /**
   * Sends one call and returns its outcome; never throws. `signal` cancels it (a ShareDeadline's
   * signal that ends at the call's deadline also times it out: no timer of its own). `opts.headers`
   * are the engine's own name/value pairs (the fencing headers), sent last: they win over a trace
   * header of the same name, and the worker's bearer wins over both.
   */
  call(target: ControlTarget, call: ControlCall, signal?: AbortSignal, opts?: CallOptions): Promise<ControlOutcome> {
    const started = performance.now();
    const remaining = call.deadline - Date.now();
    if (remaining <= 0) return Promise.resolve(timedOut(target, call, started));
    const handler = new CallHandler(target, call, started, signal, opts?.flight);
    const done = handler.outcome;
    const prepared = prepare(call);
    let at: { origin: string; prefix: string };
    try {
      at = this.originOf(target.controlUrl);
    } catch (err) {
      handler.onError(err);
      return done;
    }
    const agent = target.dispatcher ?? this.clientFor(target.pool);
    if (agent instanceof Error) {
      handler.onError(agent);
      return done;
    }
    // A share's signal that already ends at this call's deadline is watched as it is (one timer
    // per share); otherwise one timer of the call's own.
    if (signal === undefined || deadlineOf(signal) !== call.deadline) handler.armTimer(remaining);
    if (signal?.aborted) handler.handleEvent();
    else if (signal) watchAbort(signal, handler);
    agent.dispatch(
      {
        origin: at.origin,
        path: at.prefix.length === 0 ? prepared.path : at.prefix + prepared.path,
        method: call.method,
        headers: headersFor(prepared, target.apiKey, opts?.headers),
        body: prepared.body ?? undefined,
      },
      handler,
    );
    return done;
  }

  private readonly origins = new Map<string, { origin: string; prefix: string }>();

  /** Origin and path prefix of a control URL, parsed once per distinct URL. */
  private originOf(controlUrl: string): { origin: string; prefix: string } {
    let o = this.origins.get(controlUrl);
    if (!o) {
      const u = new URL(controlUrl.replace(/\/+$/, ''));
      o = { origin: u.origin, prefix: u.pathname.replace(/\/+$/, '') };
      if (this.origins.size > 4096) this.origins.clear();
      this.origins.set(controlUrl, o);
    }
    return o;
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

/** What a caller adds to one call. */
export interface CallOptions {
  /** The engine's own header name/value pairs (the fencing headers), flat: [name, value, ...]. */
  headers?: readonly string[];
  /** The caller's handle on the call in flight, to abort it from elsewhere (a lease's lapse). */
  flight?: ControlFlight;
}

/** One call in flight, as its caller holds it: abort() ends it, and its reason stays readable after. */
export class ControlFlight {
  /** Why it was aborted; undefined while it was not. */
  reason: unknown = undefined;
  /** The request it stands for, once sent. */
  handler: { cancel(reason: unknown): void } | undefined = undefined;

  abort(reason: unknown): void {
    if (this.reason !== undefined) return;
    this.reason = reason;
    this.handler?.cancel(reason);
  }
}

/** What every leg of one call shares, worked out once per call object: its path and query, body, headers. */
interface PreparedCall {
  /** `/path?query`, appended to the control URL's own path prefix. */
  path: string;
  body: Buffer | null;
  /** The call's own headers (content type, trace) as a flat name/value list. */
  pairs: string[];
  /** Header names the call sets, to know when an engine's own header must replace one. */
  names: ReadonlySet<string>;
}

const preparedCalls = new WeakMap<ControlCall, PreparedCall>();

function prepare(call: ControlCall): PreparedCall {
  let p = preparedCalls.get(call);
  if (p) return p;
  const body = decodeBody(call.body);
  const headers: Record<string, string> = {};
  if (call.contentType) headers['content-type'] = call.contentType;
  else if (body) headers['content-type'] = 'application/json';
  if (call.trace) for (const k of Object.keys(call.trace)) headers[k] = call.trace[k]!;
  const pairs: string[] = [];
  for (const k of Object.keys(headers)) pairs.push(k, headers[k]!);
  p = { path: `/${call.path}${call.query ? `?${call.query}` : ''}`, body, pairs, names: new Set(Object.keys(headers)) };
  preparedCalls.set(call, p);
  return p;
}

/**
 * The headers of one leg: the call's, then the engine's own pairs, then the worker's bearer; a
 * later one replaces an earlier one of the same name (a trace header never overrides them).
 */
function headersFor(p: PreparedCall, apiKey: string | null, engine: readonly string[] | undefined): string[] {
  const auth = apiKey ? `Bearer ${apiKey}` : undefined;
  let clash = auth !== undefined && p.names.has('authorization');
  if (engine) for (let i = 0; i < engine.length && !clash; i += 2) clash = p.names.has(engine[i]!);
  if (!clash) {
    const out = engine ? p.pairs.concat(engine) : p.pairs.slice();
    if (auth !== undefined) out.push('authorization', auth);
    return out;
  }
  const merged = new Map<string, string>();
  for (let i = 0; i < p.pairs.length; i += 2) merged.set(p.pairs[i]!, p.pairs[i + 1]!);
  if (engine) for (let i = 0; i < engine.length; i += 2) merged.set(engine[i]!, engine[i + 1]!);
  if (auth !== undefined) merged.set('authorization', auth);
  return [...merged].flat();
}

/** A deadline this call set itself (no share signal carried it). */
const OWN_DEADLINE = Object.freeze({ ownDeadline: true });

/**
 * One request on undici's dispatcher API: the answer is collected up to BODY_CAP as it comes, with
 * no response stream, no parsed header object and no listener of its own on the caller's signal
 * (it is the watcher itself). Settles exactly once.
 */
class CallHandler {
  readonly outcome: Promise<ControlOutcome>;
  private resolve!: (o: ControlOutcome) => void;
  private abortFn: ((err?: Error) => void) | undefined;
  /** A cancel that came before undici gave the abort function: applied when it does. */
  private early: unknown = undefined;
  private timer: NodeJS.Timeout | undefined;
  private ownTimeout = false;
  private status = 0;
  private contentType = '';
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private done = false;

  constructor(
    private readonly target: ControlTarget,
    private readonly call: ControlCall,
    private readonly started: number,
    private readonly signal: AbortSignal | undefined,
    private readonly flight: ControlFlight | undefined,
  ) {
    this.outcome = new Promise((resolve) => (this.resolve = resolve));
    if (flight) {
      flight.handler = this;
      if (flight.reason !== undefined) this.cancel(flight.reason);
    }
  }

  armTimer(ms: number): void {
    this.timer = setTimeout(() => {
      this.ownTimeout = true;
      this.cancel(OWN_DEADLINE);
    }, ms);
  }

  /** The caller's signal aborted. */
  handleEvent(): void {
    this.cancel(this.signal?.reason ?? new Error('aborted'));
  }

  cancel(reason: unknown): void {
    if (this.done) return;
    // undici hands the reason on to onError as it is: a non-Error reason is fine there.
    if (this.abortFn) this.abortFn(reason as Error);
    else if (this.early === undefined) this.early = reason;
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.early !== undefined) return abort(this.early as Error);
    this.abortFn = abort;
  }

  onHeaders(status: number, rawHeaders: Buffer[]): boolean {
    if (status < 200) return true; // informational: the answer follows
    this.status = status;
    // Repeated content types read as one, comma-joined (as a parsed header object would give them).
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!;
      if (name.length === 12 && name.toString('latin1').toLowerCase() === 'content-type') {
        const value = rawHeaders[i + 1]!.toString('latin1');
        this.contentType = this.contentType ? `${this.contentType},${value}` : value;
      }
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.done) return false;
    if (this.size + chunk.length > BODY_CAP) {
      this.chunks.push(chunk.subarray(0, BODY_CAP - this.size));
      this.size = BODY_CAP;
      this.answer(true);
      // The rest is not read: the connection goes (after this parser callback has returned).
      const abort = this.abortFn;
      if (abort) queueMicrotask(() => abort(new Error('body cap reached')));
      return false;
    }
    this.chunks.push(chunk);
    this.size += chunk.length;
    return true;
  }

  onComplete(): void {
    this.answer(false);
  }

  onError(err: unknown): void {
    if (this.done) return;
    if (this.ownTimeout || this.signal?.reason === DEADLINE) return this.settle(timedOut(this.target, this.call, this.started));
    const base = this.target.controlUrl.replace(/\/+$/, '');
    const url = `${base}/${this.call.path}${this.call.query ? `?${this.call.query}` : ''}`;
    this.settle({
      kind: 'unreachable',
      latencyMs: Math.max(0, Math.round(performance.now() - this.started)),
      message: `upstream \`${this.target.workerUrl}\` unreachable: error sending request for url (${url}): ${describe(err)}`,
    });
  }

  private answer(truncated: boolean): void {
    if (this.done) return;
    const bytes = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    const latencyMs = Math.max(0, Math.round(performance.now() - this.started));
    this.settle({ kind: 'answer', status: this.status, latencyMs, body: decodeAnswer(bytes, truncated, this.contentType), truncated });
  }

  private settle(o: ControlOutcome): void {
    this.done = true;
    clearTimeout(this.timer);
    if (this.signal) unwatchAbort(this.signal, this);
    if (this.flight) this.flight.handler = undefined;
    this.resolve(o);
  }
}

function timedOut(target: ControlTarget, call: ControlCall, started: number): ControlOutcome {
  return {
    kind: 'timeout',
    latencyMs: Math.max(0, Math.round(performance.now() - started)),
    message: `upstream \`${target.workerUrl}\` timed out after ${call.timeoutSecs}s`,
  };
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
