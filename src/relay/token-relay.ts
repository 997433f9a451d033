// /generate on a token engine (TokenSpeed gRPC, the ZMQ lane): runs the TokenRequest that
// token-sampling.ts shapes (and whose wire checks it applies), and answers SGLang's shape — one
// object for one prompt, SSE chunks when streaming, a 200 abort partial when the engine aborts
// mid-generation (slime retries 5xx from scratch). Always streams from the engine so partials
// survive an abort. With RL on the answer carries the dispatch-time table version
// and, when buffered, the mixed-version flag. A `text` prompt is tokenized, and `text`
// in the answer detokenized, with the engine's tokenizer: its own GetTokenizer bundle (gRPC), else
// the gateway's `--tokenizer-path`. One attempt on one engine, run by token-attempt.ts (shared with
// the OpenAI routes): what the engine cannot serve (`unfit`) or a transport failure before its
// first event (`unsent`) goes back to generate.ts, which may route the request elsewhere.

import type { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import type { TokenEngine, TokenRequest } from '../engines/generation.ts';
import { isTokenizerSource, loadTokenizerPath, type Tokenizer } from '../engines/tokenizer.ts';
import type { RequestOutcome } from '../fleet/policies/policy.ts';
import type { Worker } from '../fleet/worker.ts';
import { mergedLabels } from '../fleet/worker.ts';
import { returnsLogprobs } from '../fleet/capabilities.ts';
import type { RelayServices } from './relay-services.ts';
import { TokenAnswer } from './token-answer.ts';
import { TokenDeadline, logprobsUnavailable, runTokenAttempt, type AnswerShape, type AttemptSignals, type TokenAttempt } from './token-attempt.ts';
import { EngineCannotServe, checkWire, tokenRequestOf, wireOf } from './token-sampling.ts';
import { isMixedBody, stampMixed } from './stamping.ts';

export type { AttemptSignals, TokenAttempt } from './token-attempt.ts';

export async function tokenRelay(
  services: RelayServices,
  worker: Worker,
  engine: TokenEngine,
  body: Record<string, unknown>,
  reply: FastifyReply,
  signals: AttemptSignals,
  outcome: RequestOutcome,
): Promise<TokenAttempt> {
  const startedAt = performance.now();
  // An engine that says it gives no logprobs is not asked for them: another eligible engine is
  // (generate.ts), and only when none can is the request refused. Unknown engines are tried.
  if (body.return_logprob === true && !services.config.synthesizeLogprobs && returnsLogprobs(worker.connectionMode, mergedLabels(worker)) === false) {
    return { kind: 'unfit', error: logprobsUnavailable() };
  }
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
  // The header and the attributed `meta_info.weight_version` come from the same read.
  const shape = new GenerateAnswer(answer, services, e.version);
  return runTokenAttempt({ services, worker, engine, req, reply, signals, abort, deadline, version: e.version, stream: body.stream === true, shape, outcome });
}

/** SGLang's shape: TokenAnswer's objects as they are, the whole choice again in every chunk. */
class GenerateAnswer implements AnswerShape {
  readonly path = '/generate';

  constructor(
    readonly answer: TokenAnswer,
    private readonly services: RelayServices,
    /** The table version stamped on the reply, for the mixed check. */
    private readonly version: string | undefined,
  ) {}

  body(reply: FastifyReply): unknown {
    const out = this.answer.answer();
    if (this.services.config.rl.enabled && isMixedBody(out, this.version)) {
      stampMixed(reply);
      this.services.metrics.mixedVersion();
    }
    return out;
  }

  chunk(out: PassThrough, index: number): void {
    out.write(`data: ${this.answer.json(index)}\n\n`);
  }

  end(out: PassThrough, firstDone: boolean, broke: boolean): void {
    // A broken stream ends on its abort partial; one that never had an event (the engine ended it
    // or aborted it first) on choice 0 as it is — an abort partial too, as SGLang streams it.
    if (broke || firstDone) this.chunk(out, 0);
  }
}

/**
 * The worker's tokenizer: the engine's own (GetTokenizer), else `--tokenizer-path`. Never throws:
 * without one, `why` says what was tried, for the refusal of a `text` prompt.
 */
export async function tokenizerFor(services: RelayServices, engine: TokenEngine, signal: AbortSignal): Promise<{ tokenizer?: Tokenizer; why?: string }> {
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
