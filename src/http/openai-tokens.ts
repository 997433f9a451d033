// /v1/chat/completions and /v1/completions on a token engine (TokenSpeed gRPC, the ZMQ lane): the
// OpenAI request becomes one TokenRequest (openai-request.ts shapes it, token-sampling.ts checks its
// wire), the token events fold into OpenAI answers, buffered or as SSE chunks ending
// `data: [DONE]`. `system_fingerprint` follows spec §12.1 (engine-reported > table > label >
// "default") on the answer and on every chunk. A sampling parameter the wire cannot carry is
// refused, never dropped. It never routes and never talks to HTTP engines: an engine that cannot
// serve the request (`unfit`) or fails before its first event (`unsent`) goes back to generate.ts.

import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import type { TokenEngine, TokenRequest, TokenSampling } from '../engines/generation.ts';
import type { Tokenizer } from '../engines/tokenizer.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { Services } from './services.ts';
import { TokenAnswer } from './token-answer.ts';
import { TokenDeadline, failure, isUnsent, tokenizerFor, unsent, type AttemptSignals, type TokenAttempt } from './token-relay.ts';
import { EngineCannotServe, checkWire, wireOf } from './token-sampling.ts';
import { promptIds, samplingField, samplingOf, type OpenAiPath } from './openai-request.ts';
import { ROUTED_HEADER, stampWeightVersion } from './stamping.ts';

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
async function requireTokenizer(services: Services, engine: TokenEngine, signal: AbortSignal): Promise<Tokenizer> {
  const { tokenizer, why } = await tokenizerFor(services, engine, signal);
  if (tokenizer) return tokenizer;
  throw new EngineCannotServe(`OpenAI routes on this worker need the engine's tokenizer and none is available (${why}): ${NO_TOKENIZER_FIX}`);
}

const FINISH: Record<string, string> = { stop: 'stop', length: 'length', abort: 'abort' };

export async function openAiTokenRelay(
  services: Services,
  path: OpenAiPath,
  worker: Worker,
  engine: TokenEngine,
  body: Record<string, unknown>,
  reply: FastifyReply,
  signals: AttemptSignals,
): Promise<TokenAttempt> {
  const startedAt = performance.now();
  const chat = path === '/v1/chat/completions';
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
  const head = {
    id: `${chat ? 'chatcmpl' : 'cmpl'}-${rid}`,
    created: Math.floor(Date.now() / 1000),
    model: typeof body.model === 'string' && body.model.trim() ? body.model : worker.modelId,
  };
  /** Per choice, what the answer says so far: text, finish, version, token counts. */
  const view = (index: number) => {
    const o = answer.object(index) as { text: string; meta_info: { finish_reason: { type: string } | null; weight_version: string; prompt_tokens: number; completion_tokens: number } };
    return { text: o.text, finish: o.meta_info.finish_reason ? FINISH[o.meta_info.finish_reason.type] ?? 'stop' : null, version: o.meta_info.weight_version, prompt: o.meta_info.prompt_tokens, completion: o.meta_info.completion_tokens };
  };
  const n = sampling.n ?? 1;
  const usage = () => {
    const all = Array.from({ length: n }, (_, i) => view(i));
    const completion = all.reduce((sum, c) => sum + c.completion, 0);
    return { prompt_tokens: all[0]!.prompt, completion_tokens: completion, total_tokens: all[0]!.prompt + completion };
  };

  reply.header(ROUTED_HEADER, worker.url);
  if (services.config.rl.enabled) stampWeightVersion(reply, e.version);
  services.host.acquire(worker.id);
  let outcome: 'success' | 'failure' | 'neutral' = 'success';
  let streaming = false;
  const events = deadline.race(engine.generate(req, abort.signal)[Symbol.asyncIterator]());
  const streamToCaller = body.stream === true;

  try {
    if (!streamToCaller) {
      let got = 0;
      try {
        for (let r = await events.next(); !r.done; r = await events.next()) {
          answer.push(r.value);
          got++;
        }
      } catch (err) {
        if (deadline.expired) {
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
      const choices = Array.from({ length: n }, (_, index) => {
        const c = view(index);
        return chat
          ? { index, message: { role: 'assistant', content: c.text }, logprobs: null, finish_reason: c.finish ?? 'abort' }
          : { index, text: c.text, logprobs: null, finish_reason: c.finish ?? 'abort' };
      });
      services.metrics.request(path, 200);
      const answered = reply.code(200).header('content-type', 'application/json').send({
        ...head, object: chat ? 'chat.completion' : 'text_completion', system_fingerprint: view(0).version, choices, usage: usage(),
      });
      return { kind: 'answered', reply: answered };
    }

    // Streamed: the first event decides between an error answer, another engine and a 200 stream.
    let first: IteratorResult<Parameters<TokenAnswer['push']>[0]>;
    try {
      first = await events.next();
    } catch (err) {
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
      first = { done: true, value: undefined };
    }
    const out = new PassThrough();
    streaming = true;
    reply.code(200).header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    const sent = new Map<number, { text: string; finished: boolean }>();
    const object = chat ? 'chat.completion.chunk' : 'text_completion';
    // Every chunk is `{...head, object, system_fingerprint, choices}`: all but `choices` (and a
    // usage) is serialised once per version, i.e. once per request unless the engine's changes.
    const headJson = JSON.stringify({ ...head, object }).slice(0, -1);
    let prefix = { version: '', json: '' };
    const chunkStart = (version: string): string => {
      if (prefix.version !== version || !prefix.json) prefix = { version, json: `data: ${headJson},"system_fingerprint":${JSON.stringify(version)},"choices":` };
      return prefix.json;
    };
    const write = (choice: Record<string, unknown>, version: string) => out.write(`${chunkStart(version)}[${JSON.stringify(choice)}]}\n\n`);
    // Text that may still become a stop string waits (it is trimmed if it does).
    const stops = sampling.stop && sampling.no_stop_trim !== true ? sampling.stop : undefined;
    /** Emits what choice `index` gained since its last chunk (a role chunk first, for chat). */
    const emit = (index: number) => {
      const c = view(index);
      let s = sent.get(index);
      if (!s) {
        s = { text: '', finished: false };
        sent.set(index, s);
        if (chat) write({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, c.version);
      }
      if (s.finished) return;
      const text = stops && c.finish === null ? heldBack(c.text, stops) : c.text;
      const delta = text.startsWith(s.text) ? text.slice(s.text.length) : text;
      if (!delta && !c.finish) return;
      s.text = text;
      s.finished = c.finish !== null;
      write(chat ? { index, delta: delta ? { content: delta } : {}, logprobs: null, finish_reason: c.finish } : { index, text: delta, logprobs: null, finish_reason: c.finish }, c.version);
    };
    void (async () => {
      try {
        if (!first.done) emit(answer.push(first.value));
        for (let r = await events.next(); !r.done; r = await events.next()) emit(answer.push(r.value));
      } catch (err) {
        const verdict = deadline.expired ? deadline.verdict() : failure(err, false, signals.caller.aborted);
        outcome = verdict.outcome;
        answer.abort(verdict.message);
      }
      // Choices the engine never finished (or never started) end as aborts.
      for (let i = 0; i < n; i++) answer.object(i);
      if (!answer.done) answer.abort('the engine ended the stream without finishing');
      for (let i = 0; i < n; i++) emit(i);
      const opts = body.stream_options as { include_usage?: unknown } | undefined;
      if (opts?.include_usage === true) out.write(`${chunkStart(view(0).version)}[],"usage":${JSON.stringify(usage())}}\n\n`);
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
