// /generate on a token engine (TokenSpeed gRPC, the ZMQ lane): maps the SGLang request onto a
// TokenRequest, runs it, and answers SGLang's shape — one object for one prompt, SSE chunks when
// streaming, a 200 abort partial when the engine aborts mid-generation (slime retries 5xx from
// scratch). Always streams from the engine so partials survive an abort (slime §5.1). With RL on
// the answer carries the dispatch-time table version (spec §13.4) and, when buffered, the
// mixed-version flag.

import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { GenerationError, type TokenEngine, type TokenRequest, type TokenSampling } from '../engines/generation.ts';
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

/** Refuses what a token engine cannot honour, before any engine is called (spec slime §8.4). */
export function tokenRequestOf(body: Record<string, unknown>): TokenRequest {
  if (body.text !== undefined && body.text !== null) {
    throw new GatewayError('invalid_request', 'gRPC and ZMQ engines take `input_ids`; `text` needs the engine tokenizer, which this build does not load yet', { field: '/text' });
  }
  const ids = body.input_ids;
  if (!Array.isArray(ids) || ids.length === 0) throw new GatewayError('invalid_request', '`input_ids` must be a non-empty list of token ids', { field: '/input_ids' });
  if (Array.isArray(ids[0])) throw new GatewayError('invalid_request', 'gRPC and ZMQ engines take one prompt per request: `input_ids` must be a flat list', { field: '/input_ids' });
  if (body.return_routed_experts === true) {
    throw new GatewayError('invalid_request', '`return_routed_experts` has no field on the TokenSpeed wire', { field: '/return_routed_experts' });
  }
  const sp = (body.sampling_params ?? {}) as Record<string, unknown>;
  if (Array.isArray(sp)) throw new GatewayError('invalid_request', 'one prompt takes one `sampling_params` object', { field: '/sampling_params' });
  const sampling: TokenSampling = {};
  for (const k of SAMPLING_KEYS) if (sp[k] !== undefined && sp[k] !== null) (sampling as Record<string, unknown>)[k] = sp[k];
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
  const req = tokenRequestOf(body);
  const streamToCaller = body.stream === true;
  const e = services.view.engine(worker);
  const answer = new TokenAnswer({
    rid: req.rid,
    dispatchVersion: e.version ?? mergedLabels(worker).weight_version ?? 'default',
    returnLogprob: req.returnLogprob,
    startedAt: performance.now(),
  });
  const abort = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  reply.header(ROUTED_HEADER, worker.url);
  // The header and the attributed `meta_info.weight_version` come from the same read.
  const rl = services.config.rl.enabled;
  if (rl) stampWeightVersion(reply, e.version);
  services.host.acquire(worker.id);
  let outcome: 'success' | 'failure' | 'neutral' = 'success';
  const events = engine.generate(req, abort.signal)[Symbol.asyncIterator]();

  try {
    if (!streamToCaller) {
      let got = 0;
      try {
        for (let r = await events.next(); !r.done; r = await events.next()) {
          answer.push(r.value);
          got++;
        }
      } catch (err) {
        const verdict = failure(err, got === 0);
        outcome = verdict.outcome;
        if (!verdict.partial) throw verdict.error;
        answer.abort(verdict.message);
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
      const verdict = failure(err, true);
      outcome = verdict.outcome;
      if (!verdict.partial) throw verdict.error;
      answer.abort(verdict.message);
      first = { done: true, value: undefined };
    }
    const out = new PassThrough();
    reply.code(200).header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    void (async () => {
      const emit = (index: number) => out.write(`data: ${JSON.stringify(answer.object(index))}\n\n`);
      try {
        if (!first.done) emit(answer.push(first.value as Parameters<TokenAnswer['push']>[0]));
        for (let r = await events.next(); !r.done; r = await events.next()) emit(answer.push(r.value));
      } catch (err) {
        const verdict = failure(err, false);
        outcome = verdict.outcome;
        answer.abort(verdict.message);
        emit(0);
      }
      if (first.done && !answer.done) emit(0);
      out.end('data: [DONE]\n\n');
    })().finally(() => services.host.release(worker.id, outcome));
    services.metrics.request('/generate', 200);
    return reply.send(out);
  } finally {
    if (!streamToCaller) services.host.release(worker.id, outcome);
  }
}

/** An engine-side abort becomes a partial answer; anything else an error of ours. */
function failure(err: unknown, beforeFirst: boolean): { partial: boolean; outcome: 'failure' | 'neutral'; message: string; error: GatewayError } {
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
