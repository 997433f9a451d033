// /generate on a token engine (TokenSpeed gRPC, the ZMQ lane): maps the SGLang request onto a
// TokenRequest, runs it, and answers SGLang's shape — one object for one prompt, SSE chunks when
// streaming, a 200 abort partial when the engine aborts mid-generation (slime retries 5xx from
// scratch). Always streams from the engine so partials survive an abort (slime §5.1). With RL on
// the answer carries the dispatch-time table version (spec §13.4) and, when buffered, the
// mixed-version flag. A `text` prompt is tokenized, and `text` in the answer detokenized, with the
// engine's tokenizer: its own GetTokenizer bundle (gRPC), else the gateway's `--tokenizer-path`.
// A sampling parameter the engine's wire cannot carry is refused, never dropped. One attempt on
// one engine: what the engine cannot serve (`unfit`) or a transport failure before its first event
// (`unsent`) goes back to generate.ts, which may route the request elsewhere. The request's
// deadline and caller (TokenDeadline) are shared with the OpenAI routes.

import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { GenerationError, type TokenEngine, type TokenRequest, type TokenSampling } from '../engines/generation.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import { isTokenizerSource, loadTokenizerPath, type Tokenizer } from '../engines/tokenizer.ts';
import type { Worker } from '../fleet/worker.ts';
import { mergedLabels } from '../fleet/worker.ts';
import { GatewayError, type ErrorContext } from './errors.ts';
import type { Services } from './services.ts';
import { TokenAnswer } from './token-answer.ts';
import { GATEWAY_ONLY_HEADERS, ROUTED_HEADER, isMixedBody, stampMixed, stampWeightVersion } from './stamping.ts';

const SAMPLING_KEYS: ReadonlyArray<keyof TokenSampling> = [
  'max_new_tokens', 'min_new_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'frequency_penalty',
  'presence_penalty', 'repetition_penalty', 'stop_token_ids', 'ignore_eos', 'skip_special_tokens',
  'spaces_between_special_tokens', 'no_stop_trim', 'n', 'sampling_seed', 'json_schema', 'regex', 'ebnf',
];

const NO_TOKENIZER_FIX = 'start the engine with a tokenizer (gRPC engines serve theirs through GetTokenizer) or start the gateway with `--tokenizer-path DIR`';

function hasText(body: Record<string, unknown>): boolean {
  return body.text !== undefined && body.text !== null;
}

/**
 * A 400 about the engine, not the request: `text` where no tokenizer is available, a parameter
 * its wire has no field for. Another eligible engine may still serve the request (generate.ts).
 */
export class EngineCannotServe extends GatewayError {
  constructor(message: string, context: ErrorContext = {}) {
    super('invalid_request', message, context);
  }
}

/** The request's signals, one set for every attempt (generate.ts owns them and the deadline timer). */
export interface AttemptSignals {
  /** The caller went away. */
  caller: AbortSignal;
  /** `--request-timeout-secs` passed, counted from the request's arrival. */
  deadline: AbortSignal;
}

/** How one attempt on one token engine ended. */
export type TokenAttempt =
  | { kind: 'answered'; reply: FastifyReply }
  /** A transport failure before the engine's first event: the caller has seen nothing. */
  | { kind: 'unsent'; error: Error }
  /** The engine cannot take this request; it was never called. */
  | { kind: 'unfit'; error: EngineCannotServe };

export type TokenWire = 'grpc' | 'zmq';

export function wireOf(engine: TokenEngine): TokenWire {
  return engine instanceof GrpcEngineClient ? 'grpc' : 'zmq';
}

/** Sampling fields the gRPC wire carries and the ZMQ lane does not (it sends them as null). */
const NOT_ON_ZMQ: Readonly<Partial<Record<keyof TokenSampling, string>>> = {
  stop: 'string `stop` sequences are not supported on ZMQ engines (the wire carries token ids only): send `stop_token_ids`',
  logit_bias: '`logit_bias` is not supported on ZMQ engines (the wire has no field for it); gRPC and HTTP engines take it',
  structural_tag: '`structural_tag` is not supported on ZMQ engines; gRPC and HTTP engines take it',
  custom_params: '`custom_params` is not supported on ZMQ engines; gRPC and HTTP engines take it',
};

/**
 * Refuses a sampling parameter the request set that `wire` cannot carry, pointing at the
 * request's field (`pointer`): a user's sampling setting is never dropped silently.
 */
export function checkWire(sampling: TokenSampling, wire: TokenWire, pointer: (k: keyof TokenSampling) => string): void {
  if (wire === 'grpc') return;
  for (const [k, why] of Object.entries(NOT_ON_ZMQ) as Array<[keyof TokenSampling, string]>) {
    if (sampling[k] !== undefined) throw new EngineCannotServe(why, { field: pointer(k) });
  }
}

/** SGLang's `logit_bias`: token id (a decimal string) → finite bias; empty or null is none. */
export function logitBiasOf(v: unknown, field: string): Record<string, number> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new GatewayError('invalid_request', '`logit_bias` must be an object of token id → bias', { field });
  const out: Record<string, number> = {};
  for (const [k, b] of Object.entries(v as Record<string, unknown>)) {
    if (!/^\d+$/.test(k) || !Number.isSafeInteger(Number(k))) throw new GatewayError('invalid_request', `\`logit_bias\` keys are token ids: \`${k}\` is not one`, { field });
    if (typeof b !== 'number' || !Number.isFinite(b)) throw new GatewayError('invalid_request', `\`logit_bias\` of token ${k} must be a finite number`, { field });
    out[k] = b;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

const CONSTRAINTS = ['regex', 'json_schema', 'ebnf', 'structural_tag'] as const;

/** At most one grammar constraint (SGLang refuses more; gRPC's `oneof` would keep only one). */
export function checkConstraints(s: TokenSampling, pointer: (k: keyof TokenSampling) => string): void {
  const set = CONSTRAINTS.filter((k) => s[k] !== undefined);
  for (const k of set) {
    if (typeof s[k] !== 'string') throw new GatewayError('invalid_request', `\`${k}\` must be a string`, { field: pointer(k) });
  }
  if (set.length > 1) throw new GatewayError('invalid_request', `only one of \`regex\`, \`json_schema\`, \`ebnf\` and \`structural_tag\` can be set (got ${set.join(', ')})`, { field: pointer(set[1]!) });
}

/**
 * Refuses what a token engine cannot honour, before any engine is called (spec slime §8.4). A
 * `text` prompt is tokenized with `tokenizer`; without one it is refused, saying how to get one.
 */
export function tokenRequestOf(body: Record<string, unknown>, tokenizer?: Tokenizer, whyNoTokenizer?: string): TokenRequest {
  let ids = body.input_ids;
  if (hasText(body)) {
    if (typeof body.text !== 'string') throw new GatewayError('invalid_request', '`text` must be one string: gRPC and ZMQ engines take one prompt per request', { field: '/text' });
    if (ids !== undefined && ids !== null) throw new GatewayError('invalid_request', 'give either `text` or `input_ids`, not both', { field: '/text' });
    if (!tokenizer) {
      const why = whyNoTokenizer ? ` (${whyNoTokenizer})` : '';
      throw new EngineCannotServe(`\`text\` needs the engine's tokenizer and none is available for this worker${why}: send \`input_ids\`, ${NO_TOKENIZER_FIX}`, { field: '/text' });
    }
    ids = tokenizer.encode(body.text);
    if ((ids as number[]).length === 0) throw new GatewayError('invalid_request', '`text` tokenized to no tokens', { field: '/text' });
  }
  if (!Array.isArray(ids) || ids.length === 0) throw new GatewayError('invalid_request', '`input_ids` must be a non-empty list of token ids', { field: '/input_ids' });
  if (Array.isArray(ids[0])) throw new GatewayError('invalid_request', 'gRPC and ZMQ engines take one prompt per request: `input_ids` must be a flat list', { field: '/input_ids' });
  if (body.return_routed_experts === true) {
    throw new GatewayError('invalid_request', '`return_routed_experts` has no field on the TokenSpeed wire', { field: '/return_routed_experts' });
  }
  const sp = (body.sampling_params ?? {}) as Record<string, unknown>;
  if (Array.isArray(sp)) throw new GatewayError('invalid_request', 'one prompt takes one `sampling_params` object', { field: '/sampling_params' });
  const sampling: TokenSampling = {};
  for (const k of SAMPLING_KEYS) if (sp[k] !== undefined && sp[k] !== null) (sampling as Record<string, unknown>)[k] = sp[k];
  const stop = stopStringsOf(sp.stop, '`sampling_params.stop`', '/sampling_params/stop');
  if (stop) sampling.stop = stop;
  const bias = logitBiasOf(sp.logit_bias, '/sampling_params/logit_bias');
  if (bias) sampling.logit_bias = bias;
  if (sp.structural_tag !== undefined && sp.structural_tag !== null) sampling.structural_tag = sp.structural_tag as string;
  if (sp.custom_params !== undefined && sp.custom_params !== null) {
    if (typeof sp.custom_params !== 'object' || Array.isArray(sp.custom_params)) {
      throw new GatewayError('invalid_request', '`sampling_params.custom_params` must be an object', { field: '/sampling_params/custom_params' });
    }
    sampling.custom_params = sp.custom_params as Record<string, unknown>;
  }
  checkConstraints(sampling, (k) => `/sampling_params/${k}`);
  // proto3 plain bools: SGLang's defaults must be sent explicitly (slime sends false).
  sampling.skip_special_tokens ??= true;
  sampling.spaces_between_special_tokens ??= true;
  return {
    rid: typeof body.rid === 'string' && body.rid ? body.rid : randomUUID().replace(/-/g, ''),
    inputIds: ids as number[],
    sampling,
    returnLogprob: body.return_logprob === true,
    topLogprobsNum: typeof body.top_logprobs_num === 'number' ? body.top_logprobs_num : 0,
    stream: true,
  };
}

export async function tokenRelay(
  services: Services,
  worker: Worker,
  engine: TokenEngine,
  body: Record<string, unknown>,
  reply: FastifyReply,
  signals: AttemptSignals,
): Promise<TokenAttempt> {
  const startedAt = performance.now();
  const abort = new AbortController();
  const deadline = new TokenDeadline(services.config.requestTimeoutSecs, signals, abort);
  // `text` in needs the tokenizer; `input_ids` in only wants it for `text` out (best effort).
  const { tokenizer, why } = await tokenizerFor(services, engine, abort.signal);
  if (deadline.expired) throw deadline.timeout(services, '/generate', worker);
  let req: TokenRequest;
  try {
    req = tokenRequestOf(body, tokenizer, why);
    checkWire(req.sampling, wireOf(engine), (k) => `/sampling_params/${k}`);
  } catch (err) {
    deadline.clear();
    if (err instanceof EngineCannotServe) return { kind: 'unfit', error: err };
    throw err;
  }
  const streamToCaller = body.stream === true;
  const e = services.view.engine(worker);
  const skipSpecialTokens = req.sampling.skip_special_tokens !== false;
  const answer = new TokenAnswer({
    rid: req.rid,
    dispatchVersion: e.version ?? mergedLabels(worker).weight_version ?? 'default',
    returnLogprob: req.returnLogprob,
    synthesizeLogprobs: services.config.synthesizeLogprobs,
    startedAt,
    trimStop: req.sampling.no_stop_trim !== true,
    ...(tokenizer ? { detokenize: (ids: number[]) => tokenizer.decode(ids, { skipSpecialTokens }) } : {}),
  });
  reply.header(ROUTED_HEADER, worker.url);
  // The header and the attributed `meta_info.weight_version` come from the same read.
  const rl = services.config.rl.enabled;
  if (rl) stampWeightVersion(reply, e.version);
  services.host.acquire(worker.id);
  let outcome: 'success' | 'failure' | 'neutral' = 'success';
  let streaming = false;
  const events = deadline.race(engine.generate(req, abort.signal)[Symbol.asyncIterator]());

  try {
    if (!streamToCaller) {
      let got = 0;
      try {
        for (let r = await events.next(); !r.done; r = await events.next()) {
          answer.push(r.value);
          got++;
          if (answer.lacksLogprobs) break;
        }
      } catch (err) {
        if (deadline.expired) {
          outcome = 'failure';
          if (got === 0) throw deadline.timeout(services, '/generate', worker);
          answer.abort(deadline.message);
        } else if (got === 0 && isUnsent(err, signals)) {
          outcome = 'failure';
          return unsent(reply, err as Error);
        } else {
          const verdict = failure(err, got === 0, signals.caller.aborted);
          outcome = verdict.outcome;
          if (!verdict.partial) throw verdict.error;
          answer.abort(verdict.message);
        }
      }
      if (answer.lacksLogprobs) {
        outcome = 'neutral';
        stopEngine(abort, events);
        throw logprobsUnavailable();
      }
      const out = answer.answer();
      if (rl && isMixedBody(out, e.version)) {
        stampMixed(reply);
        services.metrics.mixedVersion();
      }
      services.metrics.request('/generate', 200);
      return { kind: 'answered', reply: reply.code(200).header('content-type', 'application/json').send(out) };
    }

    // Streamed: the first event decides between an error answer, another engine and a 200 stream.
    let first: IteratorResult<unknown>;
    try {
      first = await events.next();
    } catch (err) {
      if (deadline.expired) {
        outcome = 'failure';
        throw deadline.timeout(services, '/generate', worker);
      }
      if (isUnsent(err, signals)) {
        outcome = 'failure';
        return unsent(reply, err as Error);
      }
      const verdict = failure(err, true, signals.caller.aborted);
      outcome = verdict.outcome;
      if (!verdict.partial) throw verdict.error;
      answer.abort(verdict.message);
      first = { done: true, value: undefined };
    }
    const out = new PassThrough();
    streaming = true;
    reply.code(200).header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    void (async () => {
      const emit = (index: number) => out.write(`data: ${answer.json(index)}\n\n`);
      // The first chunk without logprobs ends the stream with an error event (the 200 is sent).
      const emitOrRefuse = (index: number): boolean => {
        if (!answer.lacksLogprobs) return emit(index), true;
        outcome = 'neutral';
        stopEngine(abort, events);
        const e = logprobsUnavailable();
        out.write(`data: ${JSON.stringify({ error: { object: 'error', type: e.code, code: e.status, message: e.message } })}\n\n`);
        return false;
      };
      try {
        let going = first.done || emitOrRefuse(answer.push(first.value as Parameters<TokenAnswer['push']>[0]));
        while (going) {
          const r = await events.next();
          if (r.done) break;
          going = emitOrRefuse(answer.push(r.value));
        }
        if (!going) {
          out.end('data: [DONE]\n\n');
          return;
        }
      } catch (err) {
        const verdict = deadline.expired ? deadline.verdict() : failure(err, false, signals.caller.aborted);
        outcome = verdict.outcome;
        answer.abort(verdict.message);
        emit(0);
      }
      if (first.done && !answer.done) emit(0);
      out.end('data: [DONE]\n\n');
    })().finally(() => {
      deadline.clear();
      services.host.release(worker.id, outcome);
    });
    services.metrics.request('/generate', 200);
    return { kind: 'answered', reply: reply.send(out) };
  } finally {
    // A stream hands the release to its writer; an answer (or error) before it releases here.
    if (!streaming) {
      deadline.clear();
      services.host.release(worker.id, outcome);
    }
  }
}

/**
 * A failure before the engine's first event that says nothing about the request: the engine is
 * unreachable (gRPC UNAVAILABLE, connection refused, the ZMQ lane down). Neither the caller
 * going away nor the deadline, nor a refusal or an engine abort, qualifies.
 */
export function isUnsent(err: unknown, signals: AttemptSignals): boolean {
  return err instanceof GenerationError && err.code === 'unavailable' && err.beforeFirstEvent && !signals.caller.aborted && !signals.deadline.aborted;
}

/** The `unsent` outcome: nothing of this attempt stays on the reply another engine will answer. */
export function unsent(reply: FastifyReply, error: Error): TokenAttempt {
  for (const h of GATEWAY_ONLY_HEADERS) reply.removeHeader(h);
  return { kind: 'unsent', error };
}

/**
 * The request's deadline (`--request-timeout-secs`, one for every attempt: generate.ts arms it) and
 * its caller, on one engine call: when either fires the engine request is cancelled (`abort`), and
 * when the deadline passes any pending read of the event stream rejects at once, so a stalled
 * engine cannot hold the caller. Before the first event that is a 504; after it, an abort partial.
 * Either way the engine is charged a failure. `clear()` detaches it from both signals.
 */
export class TokenDeadline {
  expired = false;
  private readonly fired: Promise<never>;
  private readonly onDeadline: () => void;
  private readonly onCaller: () => void;

  constructor(readonly secs: number, private readonly signals: AttemptSignals, abort: AbortController) {
    let fire!: (err: Error) => void;
    this.fired = new Promise<never>((_, reject) => (fire = reject));
    this.fired.catch(() => undefined);
    this.onDeadline = () => {
      this.expired = true;
      fire(new Error(this.message));
      abort.abort();
    };
    this.onCaller = () => abort.abort();
    if (signals.deadline.aborted) this.onDeadline();
    else signals.deadline.addEventListener('abort', this.onDeadline, { once: true });
    if (signals.caller.aborted) this.onCaller();
    else signals.caller.addEventListener('abort', this.onCaller, { once: true });
  }

  get message(): string {
    return `timed out after ${this.secs}s`;
  }

  clear(): void {
    this.signals.deadline.removeEventListener('abort', this.onDeadline);
    this.signals.caller.removeEventListener('abort', this.onCaller);
  }

  /** `it` whose reads give up when the deadline passes (the engine is cancelled separately). */
  race<T>(it: AsyncIterator<T>): AsyncIterator<T> {
    return {
      next: () => (this.expired ? this.fired : Promise.race([it.next(), this.fired])),
      return: (v?: unknown) => it.return?.(v) ?? Promise.resolve({ done: true, value: undefined }),
    };
  }

  /** The 504 for a deadline that passed before any event (counted like the HTTP relay's). */
  timeout(services: Services, path: string, worker: Worker): GatewayError {
    this.clear();
    services.metrics.request(path, 504);
    return new GatewayError('upstream_timeout', `request to \`${worker.url}\` ${this.message}`, { worker_id: worker.id, url: worker.url });
  }

  /** After the first event: an abort partial, and a failure against the engine. */
  verdict(): { outcome: 'failure'; message: string } {
    return { outcome: 'failure', message: this.message };
  }
}

/** SGLang's (and OpenAI's) `stop`: one string or a list of them; empty means none. */
export function stopStringsOf(stop: unknown, name: string, field: string): string[] | undefined {
  if (stop === undefined || stop === null) return undefined;
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list) || !list.every((x) => typeof x === 'string')) {
    throw new GatewayError('invalid_request', `${name} must be a string or a list of strings`, { field });
  }
  const kept = list.filter((x) => x !== '');
  return kept.length > 0 ? kept : undefined;
}

/**
 * The worker's tokenizer: the engine's own (GetTokenizer), else `--tokenizer-path`. Never throws:
 * without one, `why` says what was tried, for the refusal of a `text` prompt.
 */
export async function tokenizerFor(services: Services, engine: TokenEngine, signal: AbortSignal): Promise<{ tokenizer?: Tokenizer; why?: string }> {
  const tried: string[] = [];
  if (isTokenizerSource(engine)) {
    try {
      return { tokenizer: await engine.tokenizer(signal) };
    } catch (err) {
      tried.push((err as Error).message);
    }
  }
  const path = services.config.tokenizerPath;
  if (path) {
    try {
      return { tokenizer: await loadTokenizerPath(path) };
    } catch (err) {
      tried.push((err as Error).message);
    }
  } else {
    tried.push('no --tokenizer-path is set');
  }
  return { why: tried.join('; ') };
}

/** The refusal of `return_logprob` on an engine that gives no logprobs, naming both ways out. */
export function logprobsUnavailable(): GatewayError {
  return new GatewayError(
    'logprobs_unavailable',
    '`return_logprob` was requested but the engine returned no logprobs: start the engine with `--enable-output-logprobs`, or start the gateway with `--synthesize-logprobs` to answer 0.0 per token (only safe when the trainer recomputes logprobs)',
  );
}

/** Cancels the engine-side generation we stopped reading. */
function stopEngine(abort: AbortController, events: AsyncIterator<unknown>): void {
  abort.abort();
  void events.return?.(undefined)?.catch(() => undefined);
}

/**
 * An engine-side abort becomes a partial answer; anything else an error of ours. A caller that
 * went away (`callerGone`) says nothing about the engine: no breaker failure, on any wire.
 */
export function failure(err: unknown, beforeFirst: boolean, callerGone = false): { partial: boolean; outcome: 'failure' | 'neutral'; message: string; error: GatewayError } {
  if (callerGone) return { partial: true, outcome: 'neutral', message: 'cancelled by the client', error: new GatewayError('invalid_request', 'client went away') };
  if (err instanceof GenerationError) {
    if (err.code === 'aborted') return { partial: true, outcome: 'neutral', message: err.message, error: new GatewayError('internal_error', err.message) };
    if (err.code === 'invalid_argument') {
      return { partial: false, outcome: 'neutral', message: err.message, error: new GatewayError('invalid_request', `the engine refused the request: ${err.message}`) };
    }
    if (!beforeFirst) return { partial: true, outcome: 'failure', message: err.message, error: new GatewayError('upstream_unreachable', err.message) };
    return { partial: false, outcome: 'failure', message: err.message, error: new GatewayError('upstream_unreachable', `engine failed: ${err.message}`) };
  }
  return { partial: false, outcome: 'failure', message: String(err), error: new GatewayError('upstream_unreachable', `engine failed: ${(err as Error)?.message ?? err}`) };
}
