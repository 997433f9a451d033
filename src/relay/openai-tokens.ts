// /v1/chat/completions and /v1/completions on a token engine (TokenSpeed gRPC, the ZMQ lane): the
// OpenAI request becomes one TokenRequest (openai-request.ts shapes it, token-sampling.ts checks its
// wire), the token events fold into OpenAI answers, buffered or as SSE chunks ending
// `data: [DONE]`. `system_fingerprint` follows SMG's order (engine-reported > table > label >
// "default") on the answer and on every chunk. A sampling parameter the wire cannot carry is
// refused, never dropped. The attempt itself is token-attempt.ts's (shared with /generate). It never
// routes and never talks to HTTP engines: an engine that cannot serve the request (`unfit`) or fails
// before its first event (`unsent`) goes back to generate.ts.

import { randomUUID } from 'node:crypto';
import type { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import type { TokenEngine, TokenRequest, TokenSampling } from '../engines/generation.ts';
import type { Tokenizer } from '../engines/tokenizer.ts';
import type { RequestOutcome } from '../fleet/policies/policy.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { RelayServices } from './relay-services.ts';
import { TokenAnswer } from './token-answer.ts';
import { TokenDeadline, runTokenAttempt, type AnswerShape, type AttemptSignals, type TokenAttempt } from './token-attempt.ts';
import { tokenizerFor } from './token-relay.ts';
import { EngineCannotServe, checkWire, wireOf } from './token-sampling.ts';
import { promptIds, samplingField, samplingOf, type OpenAiPath } from './openai-request.ts';

export type { OpenAiPath } from './openai-request.ts';

const NO_TOKENIZER_FIX = 'gRPC engines serve theirs through GetTokenizer; otherwise start the gateway with `--tokenizer-path DIR`';

/**
 * `text` without its longest tail that is, or may still grow into, one of `stops`: the engine
 * streams the tokens of a stop before the completion that names it, and a sent delta cannot be
 * taken back. A held tail that turns out not to stop goes out with the next chunk.
 */
function heldBack(text: string, stops: readonly string[]): string {
  const longest = Math.min(text.length, Math.max(...stops.map((x) => x.length)));
  for (let k = longest; k > 0; k--) {
    const tail = text.slice(-k);
    if (stops.some((x) => x.startsWith(tail))) return text.slice(0, -k);
  }
  return text;
}

/** The worker's tokenizer (token-relay's rule), or a 400 saying what was tried (another engine may have one). */
async function requireTokenizer(services: RelayServices, engine: TokenEngine, signal: AbortSignal): Promise<Tokenizer> {
  const { tokenizer, why } = await tokenizerFor(services, engine, signal);
  if (tokenizer) return tokenizer;
  throw new EngineCannotServe(`OpenAI routes on this worker need the engine's tokenizer and none is available (${why}): ${NO_TOKENIZER_FIX}`);
}

const FINISH: Record<string, string> = { stop: 'stop', length: 'length', abort: 'abort' };

export async function openAiTokenRelay(
  services: RelayServices,
  path: OpenAiPath,
  worker: Worker,
  engine: TokenEngine,
  body: Record<string, unknown>,
  reply: FastifyReply,
  signals: AttemptSignals,
  outcome: RequestOutcome,
): Promise<TokenAttempt> {
  const startedAt = performance.now();
  let sampling: TokenSampling;
  try {
    sampling = samplingOf(body);
    checkWire(sampling, wireOf(engine), samplingField);
  } catch (err) {
    if (err instanceof EngineCannotServe) return { kind: 'unfit', error: err };
    throw err;
  }
  const abort = new AbortController();
  const deadline = new TokenDeadline(services.config.requestTimeoutSecs, signals, abort);
  let tokenizer: Tokenizer;
  let req: TokenRequest;
  const rid = randomUUID().replace(/-/g, '');
  try {
    tokenizer = await requireTokenizer(services, engine, abort.signal);
    if (deadline.expired) throw deadline.timeout(services, path, worker);
    req = { rid, inputIds: promptIds(path, body, tokenizer), sampling, returnLogprob: false, topLogprobsNum: 0, stream: true };
  } catch (err) {
    deadline.clear();
    if (err instanceof EngineCannotServe) return { kind: 'unfit', error: err };
    throw err;
  }

  const e = services.view.engine(worker);
  const skipSpecialTokens = sampling.skip_special_tokens !== false;
  const answer = new TokenAnswer({
    rid,
    dispatchVersion: e.version ?? mergedLabels(worker).weight_version ?? 'default',
    returnLogprob: false,
    startedAt,
    trimStop: sampling.no_stop_trim !== true,
    detokenize: (ids) => tokenizer.decode(ids, { skipSpecialTokens }),
  });
  const shape = new OpenAiAnswer(
    answer,
    path,
    {
      id: `${path === '/v1/chat/completions' ? 'chatcmpl' : 'cmpl'}-${rid}`,
      created: Math.floor(Date.now() / 1000),
      model: typeof body.model === 'string' && body.model.trim() ? body.model : worker.modelId,
    },
    sampling,
    (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true,
  );
  return runTokenAttempt({ services, worker, engine, req, reply, signals, abort, deadline, version: e.version, stream: body.stream === true, shape, outcome });
}

/** OpenAI's shape, folded from TokenAnswer's objects: deltas while streaming, a usage on request. */
class OpenAiAnswer implements AnswerShape {
  private readonly chat: boolean;
  private readonly n: number;
  /** Text that may still become a stop string waits (it is trimmed if it does). */
  private readonly stops: readonly string[] | undefined;
  /** Per streamed choice, what the caller has been sent. */
  private readonly sent = new Map<number, { text: string; finished: boolean }>();
  /** `{...head, object` serialised, built with the first chunk. */
  private headJson: string | undefined;
  private prefix = { version: '', json: '' };

  constructor(
    readonly answer: TokenAnswer,
    readonly path: OpenAiPath,
    private readonly head: { id: string; created: number; model: string },
    sampling: TokenSampling,
    private readonly includeUsage: boolean,
  ) {
    this.chat = path === '/v1/chat/completions';
    this.n = sampling.n ?? 1;
    this.stops = sampling.stop && sampling.no_stop_trim !== true ? sampling.stop : undefined;
  }

  /** Per choice, what the answer says so far: text, finish, version, token counts. */
  private view(index: number) {
    const o = this.answer.object(index) as {
      text: string;
      meta_info: { finish_reason: { type: string } | null; weight_version: string; prompt_tokens: number; completion_tokens: number };
    };
    return {
      text: o.text,
      finish: o.meta_info.finish_reason ? (FINISH[o.meta_info.finish_reason.type] ?? 'stop') : null,
      version: o.meta_info.weight_version,
      prompt: o.meta_info.prompt_tokens,
      completion: o.meta_info.completion_tokens,
    };
  }

  private usage() {
    const all = Array.from({ length: this.n }, (_, i) => this.view(i));
    const completion = all.reduce((sum, c) => sum + c.completion, 0);
    return { prompt_tokens: all[0]!.prompt, completion_tokens: completion, total_tokens: all[0]!.prompt + completion };
  }

  body(): unknown {
    const chat = this.chat;
    const choices = Array.from({ length: this.n }, (_, index) => {
      const c = this.view(index);
      return chat
        ? { index, message: { role: 'assistant', content: c.text }, logprobs: null, finish_reason: c.finish ?? 'abort' }
        : { index, text: c.text, logprobs: null, finish_reason: c.finish ?? 'abort' };
    });
    return { ...this.head, object: chat ? 'chat.completion' : 'text_completion', system_fingerprint: this.view(0).version, choices, usage: this.usage() };
  }

  // Every chunk is `{...head, object, system_fingerprint, choices}`: all but `choices` (and a
  // usage) is serialised once per version, i.e. once per request unless the engine's changes.
  private chunkStart(version: string): string {
    if (this.prefix.version !== version || !this.prefix.json) {
      this.headJson ??= JSON.stringify({ ...this.head, object: this.chat ? 'chat.completion.chunk' : 'text_completion' }).slice(0, -1);
      this.prefix = { version, json: `data: ${this.headJson},"system_fingerprint":${JSON.stringify(version)},"choices":` };
    }
    return this.prefix.json;
  }

  private write(out: PassThrough, choice: Record<string, unknown>, version: string): void {
    out.write(`${this.chunkStart(version)}[${JSON.stringify(choice)}]}\n\n`);
  }

  /** Emits what choice `index` gained since its last chunk (a role chunk first, for chat). */
  chunk(out: PassThrough, index: number): void {
    const c = this.view(index);
    let s = this.sent.get(index);
    if (!s) {
      s = { text: '', finished: false };
      this.sent.set(index, s);
      if (this.chat) this.write(out, { index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, c.version);
    }
    if (s.finished) return;
    const text = this.stops && c.finish === null ? heldBack(c.text, this.stops) : c.text;
    const delta = text.startsWith(s.text) ? text.slice(s.text.length) : text;
    if (!delta && !c.finish) return;
    s.text = text;
    s.finished = c.finish !== null;
    this.write(
      out,
      this.chat
        ? { index, delta: delta ? { content: delta } : {}, logprobs: null, finish_reason: c.finish }
        : { index, text: delta, logprobs: null, finish_reason: c.finish },
      c.version,
    );
  }

  end(out: PassThrough): void {
    // Choices the engine never finished (or never started) end as aborts.
    for (let i = 0; i < this.n; i++) this.answer.object(i);
    if (!this.answer.done) this.answer.abort('the engine ended the stream without finishing');
    for (let i = 0; i < this.n; i++) this.chunk(out, i);
    if (this.includeUsage) out.write(`${this.chunkStart(this.view(0).version)}[],"usage":${JSON.stringify(this.usage())}}\n\n`);
  }
}
