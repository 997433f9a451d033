// One attempt on one token engine (TokenSpeed gRPC, the ZMQ lane), whatever shape the answer takes:
// load held and released with the breaker's outcome, the engine's event stream read under the
// request's deadline, buffered or SSE, engine aborts as abort partials, `unsent` before the first
// event. It never shapes a body (its AnswerShape does) and never picks an engine (generate.ts does).

import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { GenerationError, type TokenEngine, type TokenEvent, type TokenRequest } from '../engines/generation.ts';
import type { RequestOutcome } from '../fleet/policies/policy.ts';
import type { Worker } from '../fleet/worker.ts';
import { GatewayError } from '../api/errors.ts';
import type { RelayServices } from './relay-services.ts';
import type { TokenAnswer } from './token-answer.ts';
import { GATEWAY_ONLY_HEADERS, ROUTED_HEADER, STALE_HEADER, stampWeightVersion } from './stamping.ts';
import { streamedEvent } from '../obs/request-timing.ts';

/** The request's signals, one set for every attempt (generate.ts owns them and the deadline timer). */
export interface AttemptSignals {
  /** The caller went away. */
  caller: AbortSignal;
  /** `--request-timeout-secs` passed, counted from the request's arrival. */
  deadline: AbortSignal;
  /** The request went past its `max-staleness` bound and is to be cut off (request-watch.ts). */
  stale?: AbortSignal;
  /** Whether (and why) it went stale: an abort partial says so, a marked answer's header too. */
  watch?: { readonly stale: 'aborted' | 'marked' | undefined; readonly staleMessage: string };
}

/** How one attempt on one token engine ended. */
export type TokenAttempt =
  | { kind: 'answered'; reply: FastifyReply }
  /** A transport failure before the engine's first event: the caller has seen nothing. */
  | { kind: 'unsent'; error: Error }
  /**
   * The engine cannot take this request: it was never called (a field its wire lacks, `text`
   * without a tokenizer, logprobs it says it does not give), or its first event lacked the
   * logprobs asked for. Nothing reached the caller; another engine may serve it.
   */
  | { kind: 'unfit'; error: GatewayError };

/** What a route's answer looks like: the attempt folds events into `answer`, the shape writes it. */
export interface AnswerShape {
  /** The route, for the request metric and the 504. */
  readonly path: string;
  readonly answer: TokenAnswer;
  /** The buffered answer's body, every event folded in (or abort partials); may stamp `reply`. */
  body(reply: FastifyReply): unknown;
  /** Writes what a streamed event added to choice `index`. */
  chunk(out: PassThrough, index: number): void;
  /**
   * Writes the last chunks before `data: [DONE]`: `firstDone`, the stream ended (or failed) before
   * its first event; `broke`, it failed after the 200 and the answer now holds abort partials.
   */
  end(out: PassThrough, firstDone: boolean, broke: boolean): void;
}

/** One attempt, as its relay set it up: the request checked, the answer's context built. */
export interface AttemptCall {
  services: RelayServices;
  worker: Worker;
  engine: TokenEngine;
  req: TokenRequest;
  reply: FastifyReply;
  signals: AttemptSignals;
  /** Cancels the engine-side generation (the deadline and the caller fire it too). */
  abort: AbortController;
  deadline: TokenDeadline;
  /** The table version read at dispatch: the stamped header (the answer's attribution is the same read). */
  version: string | undefined;
  /** The caller asked for SSE. */
  stream: boolean;
  shape: AnswerShape;
  /** Filled with what the answer said once it is whole (RequestOutcome's counts), for the router. */
  outcome: RequestOutcome;
}

/** Calls the engine and answers the caller; the deadline's listeners and the load are released either way. */
export async function runTokenAttempt(call: AttemptCall): Promise<TokenAttempt> {
  const { services, worker, reply, signals, abort, deadline, shape } = call;
  const { path, answer } = shape;
  reply.header(ROUTED_HEADER, worker.url);
  if (services.config.rl.enabled) stampWeightVersion(reply, call.version);
  services.host.acquire(worker.id);
  let outcome: 'success' | 'failure' | 'neutral' = 'success';
  let streaming = false;
  const events = deadline.race(call.engine.generate(call.req, abort.signal)[Symbol.asyncIterator]());

  try {
    if (!call.stream) {
      let got = 0;
      try {
        for (let r = await events.next(); !r.done; r = await events.next()) {
          answer.push(r.value);
          got++;
          // Only /generate asks for logprobs (OpenAI routes never do), so only it is refused here.
          if (answer.lacksLogprobs) break;
        }
      } catch (err) {
        if (deadline.staleMessage) {
          // Cut off for staleness: not the engine's fault; the caller gets what was made so far.
          outcome = 'neutral';
          answer.abort(deadline.staleMessage);
        } else if (deadline.expired) {
          outcome = 'failure';
          if (got === 0) throw deadline.timeout(services, path, worker);
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
        return unfit(reply, logprobsUnavailable());
      }
      const body = shape.body(reply);
      answer.settle(call.outcome);
      if (signals.watch?.stale) reply.header(STALE_HEADER, signals.watch.stale);
      services.metrics.request(path, 200);
      return { kind: 'answered', reply: reply.code(200).header('content-type', 'application/json').send(body) };
    }

    // Streamed: the first event decides between an error answer, another engine and a 200 stream.
    let first: IteratorResult<TokenEvent>;
    try {
      first = await events.next();
    } catch (err) {
      if (deadline.staleMessage) {
        outcome = 'neutral';
        answer.abort(deadline.staleMessage);
      } else {
        if (deadline.expired) {
          outcome = 'failure';
          throw deadline.timeout(services, path, worker);
        }
        if (isUnsent(err, signals)) {
          outcome = 'failure';
          return unsent(reply, err as Error);
        }
        const verdict = failure(err, true, signals.caller.aborted);
        outcome = verdict.outcome;
        if (!verdict.partial) throw verdict.error;
        answer.abort(verdict.message);
      }
      first = { done: true, value: undefined };
    }
    // An engine whose first event lacks the logprobs asked for cannot answer: another may, and
    // the caller has seen nothing yet (no 200 is committed before this check).
    let firstIndex: number | undefined;
    if (!first.done) {
      firstIndex = answer.push(first.value);
      if (answer.lacksLogprobs) {
        outcome = 'neutral';
        stopEngine(abort, events);
        return unfit(reply, logprobsUnavailable());
      }
    }
    const out = new PassThrough();
    streaming = true;
    reply.code(200).header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    void (async () => {
      // A later chunk without logprobs ends the stream with an error event (the 200 is sent).
      const emitOrRefuse = (ev: TokenEvent, pushed?: number): boolean => {
        const index = pushed ?? answer.push(ev);
        if (!answer.lacksLogprobs) return (shape.chunk(out, index), streamedEvent(reply.raw, ev.kind === 'chunk'), true);
        outcome = 'neutral';
        stopEngine(abort, events);
        const e = logprobsUnavailable();
        out.write(`data: ${JSON.stringify({ error: { object: 'error', type: e.code, code: e.status, message: e.message } })}\n\n`);
        return false;
      };
      let broke = false;
      try {
        let going = first.done || emitOrRefuse(first.value, firstIndex);
        while (going) {
          const r = await events.next();
          if (r.done) break;
          going = emitOrRefuse(r.value);
        }
        if (!going) {
          out.end('data: [DONE]\n\n');
          return;
        }
      } catch (err) {
        const verdict = deadline.staleMessage
          ? { outcome: 'neutral' as const, message: deadline.staleMessage }
          : deadline.expired
            ? deadline.verdict()
            : failure(err, false, signals.caller.aborted);
        outcome = verdict.outcome;
        answer.abort(verdict.message);
        broke = true;
      }
      shape.end(out, first.done === true, broke);
      answer.settle(call.outcome);
      out.end('data: [DONE]\n\n');
    })().finally(() => {
      deadline.clear();
      services.host.release(worker.id, outcome);
    });
    services.metrics.request(path, 200);
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

/** The `unfit` outcome, with the same clean reply as `unsent`. */
export function unfit(reply: FastifyReply, error: GatewayError): TokenAttempt {
  for (const h of GATEWAY_ONLY_HEADERS) reply.removeHeader(h);
  return { kind: 'unfit', error };
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
  private readonly onStale: () => void;

  constructor(
    readonly secs: number,
    private readonly signals: AttemptSignals,
    abort: AbortController,
  ) {
    let fire!: (err: Error) => void;
    this.fired = new Promise<never>((_, reject) => (fire = reject));
    this.fired.catch(() => undefined);
    this.onDeadline = () => {
      this.expired = true;
      fire(new Error(this.message));
      abort.abort();
    };
    this.onCaller = () => abort.abort();
    this.onStale = () => {
      fire(new Error(this.staleMessage));
      abort.abort();
    };
    if (signals.deadline.aborted) this.onDeadline();
    else signals.deadline.addEventListener('abort', this.onDeadline, { once: true });
    if (signals.caller.aborted) this.onCaller();
    else signals.caller.addEventListener('abort', this.onCaller, { once: true });
    if (signals.stale?.aborted) this.onStale();
    else signals.stale?.addEventListener('abort', this.onStale, { once: true });
  }

  /** The request was cut off for staleness: the abort partial's message, else ''. */
  get staleMessage(): string {
    return this.signals.stale?.aborted ? `stale: ${this.signals.watch?.staleMessage ?? 'past its max-staleness bound'}` : '';
  }

  get message(): string {
    return `timed out after ${this.secs}s`;
  }

  clear(): void {
    this.signals.deadline.removeEventListener('abort', this.onDeadline);
    this.signals.caller.removeEventListener('abort', this.onCaller);
    this.signals.stale?.removeEventListener('abort', this.onStale);
  }

  /** `it` whose reads give up when the deadline passes (the engine is cancelled separately). */
  race<T>(it: AsyncIterator<T>): AsyncIterator<T> {
    return {
      next: () => (this.expired || this.signals.stale?.aborted ? this.fired : Promise.race([it.next(), this.fired])),
      return: (v?: unknown) => it.return?.(v) ?? Promise.resolve({ done: true, value: undefined }),
    };
  }

  /** The 504 for a deadline that passed before any event (counted like the HTTP relay's). */
  timeout(services: RelayServices, path: string, worker: Worker): GatewayError {
    this.clear();
    services.metrics.request(path, 504);
    return new GatewayError('upstream_timeout', `request to \`${worker.url}\` ${this.message}`, { worker_id: worker.id, url: worker.url });
  }

  /** After the first event: an abort partial, and a failure against the engine. */
  verdict(): { outcome: 'failure'; message: string } {
    return { outcome: 'failure', message: this.message };
  }
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
export function failure(
  err: unknown,
  beforeFirst: boolean,
  callerGone = false,
): { partial: boolean; outcome: 'failure' | 'neutral'; message: string; error: GatewayError } {
  if (callerGone)
    return { partial: true, outcome: 'neutral', message: 'cancelled by the client', error: new GatewayError('invalid_request', 'client went away') };
  if (err instanceof GenerationError) {
    if (err.code === 'aborted') return { partial: true, outcome: 'neutral', message: err.message, error: new GatewayError('internal_error', err.message) };
    if (err.code === 'invalid_argument') {
      return {
        partial: false,
        outcome: 'neutral',
        message: err.message,
        error: new GatewayError('invalid_request', `the engine refused the request: ${err.message}`),
      };
    }
    if (!beforeFirst) return { partial: true, outcome: 'failure', message: err.message, error: new GatewayError('upstream_unreachable', err.message) };
    return { partial: false, outcome: 'failure', message: err.message, error: new GatewayError('upstream_unreachable', `engine failed: ${err.message}`) };
  }
  return {
    partial: false,
    outcome: 'failure',
    message: String(err),
    error: new GatewayError('upstream_unreachable', `engine failed: ${(err as Error)?.message ?? err}`),
  };
}
