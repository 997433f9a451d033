// /generate on a token engine (TokenSpeed gRPC, the ZMQ lane): maps the SGLang request onto a
// TokenRequest, runs it, and answers SGLang's shape — one object for one prompt, SSE chunks when
// streaming, a 200 abort partial when the engine aborts mid-generation (slime retries 5xx from
// scratch). Always streams from the engine so partials survive an abort (slime §5.1). With RL on
// the answer carries the dispatch-time table version (spec §13.4) and, when buffered, the
// mixed-version flag. A `text` prompt is tokenized, and `text` in the answer detokenized, with the
// engine's tokenizer: its own GetTokenizer bundle (gRPC), else the gateway's `--tokenizer-path`.
// `--request-timeout-secs` bounds it as it bounds the HTTP relay (TokenDeadline, shared with the
// OpenAI routes).

import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { GenerationError, type TokenEngine, type TokenRequest, type TokenSampling } from '../engines/generation.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import { isTokenizerSource, loadTokenizerPath, type Tokenizer } from '../engines/tokenizer.ts';
import type { Worker } from '../fleet/worker.ts';
import { mergedLabels } from '../fleet/worker.ts';
import { GatewayError } from './errors.ts';
import type { Services } from './services.ts';
import { TokenAnswer } from './token-answer.ts';
import { ROUTED_HEADER, isMixedBody, stampMixed, stampWeightVersion } from './stamping.ts';

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
      throw new GatewayError('invalid_request', `\`text\` needs the engine's tokenizer and none is available for this worker${why}: send \`input_ids\`, ${NO_TOKENIZER_FIX}`, { field: '/text' });
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
  const stop = stopStringsOf(sp.stop);
  if (stop) sampling.stop = stop;
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
): Promise<FastifyReply> {
  const startedAt = performance.now();
  const abort = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  const deadline = new TokenDeadline(services.config.requestTimeoutSecs, abort);
  // `text` in needs the tokenizer; `input_ids` in only wants it for `text` out (best effort).
  const { tokenizer, why } = await tokenizerFor(services, engine, abort.signal);
  if (deadline.expired) throw deadline.timeout(services, '/generate', worker);
  let req: TokenRequest;
  try {
    req = tokenRequestOf(body, tokenizer, why);
    // Only the gRPC wire carries string stops (SamplingParams.stop); the ZMQ lane has no field.
    if (req.sampling.stop && !(engine instanceof GrpcEngineClient)) {
      throw new GatewayError('invalid_request', 'string `stop` sequences are not supported on ZMQ engines (the wire carries token ids only): send `stop_token_ids`', { field: '/sampling_params/stop' });
    }
  } catch (err) {
    deadline.clear();
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
        } else {
          const verdict = failure(err, got === 0);
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
      return reply.code(200).header('content-type', 'application/json').send(out);
    }

    // Streamed: the first event decides between an error answer and a 200 stream.
    let first: IteratorResult<unknown>;
    try {
      first = await events.next();
    } catch (err) {
      if (deadline.expired) {
        outcome = 'failure';
        throw deadline.timeout(services, '/generate', worker);
      }
      const verdict = failure(err, true);
      outcome = verdict.outcome;
      if (!verdict.partial) throw verdict.error;
      answer.abort(verdict.message);
      first = { done: true, value: undefined };
    }
    const out = new PassThrough();
    streaming = true;
    reply.code(200).header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    void (async () => {
      const emit = (index: number) => out.write(`data: ${JSON.stringify(answer.object(index))}\n\n`);
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
        const verdict = deadline.expired ? deadline.verdict() : failure(err, false);
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
    return reply.send(out);
  } finally {
    // A stream hands the release to its writer; an answer (or error) before it releases here.
    if (!streaming) {
      deadline.clear();
      services.host.release(worker.id, outcome);
    }
  }
}

/**
 * The request's deadline on a token engine (`--request-timeout-secs`, as the HTTP relay keeps
 * it): when it passes, the engine request is cancelled (its abort signal) and any pending read of
 * the event stream rejects at once, so a stalled engine cannot hold the caller. Before the first
 * event that is a 504; after it, an abort partial. Either way the engine is charged a failure.
 */
export class TokenDeadline {
  expired = false;
  private readonly timer: NodeJS.Timeout;
  private readonly fired: Promise<never>;

  constructor(readonly secs: number, abort: AbortController) {
    let fire!: (err: Error) => void;
    this.fired = new Promise<never>((_, reject) => (fire = reject));
    this.fired.catch(() => undefined);
    this.timer = setTimeout(() => {
      this.expired = true;
      fire(new Error(this.message));
      abort.abort();
    }, secs * 1000).unref();
  }

  get message(): string {
    return `timed out after ${this.secs}s`;
  }

  clear(): void {
    clearTimeout(this.timer);
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

/** SGLang's `stop`: one string or a list of them; empty means none. */
function stopStringsOf(stop: unknown): string[] | undefined {
  if (stop === undefined || stop === null) return undefined;
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list) || !list.every((x) => typeof x === 'string')) {
    throw new GatewayError('invalid_request', '`sampling_params.stop` must be a string or a list of strings', { field: '/sampling_params/stop' });
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

/** An engine-side abort becomes a partial answer; anything else an error of ours. */
export function failure(err: unknown, beforeFirst: boolean): { partial: boolean; outcome: 'failure' | 'neutral'; message: string; error: GatewayError } {
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
