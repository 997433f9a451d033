// POST/PUT /generate: GenerateReqInput → sequences → one object (single prompt, n = 1) or a list
// (batch or n > 1), buffered or as cumulative SSE events ending `data: [DONE]`. meta_info carries
// the live weight_version, logprobs when asked, and any `mock_meta_info` merged in (fixture H).
// It also runs a set of sequences against one HTTP response (used by openai.ts); it never paces
// tokens itself (the scheduler does).

import { isInt, sendJson, type Call } from '../core/reply.ts';
import type { Sequence } from '../core/sequence.ts';
import { encode, tokenText } from '../core/tokens.ts';
import type { SimEngine } from './engine.ts';
import { jsonObject, sendError, sendInvalid } from './reply.ts';
import { expandRids, makeSequences, parseSampling, type Sampling } from './sampling.ts';
import { logprobAt, topLogprobsAt } from './tokens.ts';

export const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };
export const SSE_DONE = Buffer.from('data: [DONE]\n\n');

/**
 * Submits `seqs` and calls `onUpdate` after each scheduler update (new tokens, or the end) and
 * `onDone` once all finished. A client that goes away cancels what is left, as SGLang does.
 */
export function runSequences(engine: SimEngine, call: Call, seqs: Sequence[], onUpdate: ((seq: Sequence, k: number) => void) | null, onDone: () => void): void {
  let remaining = seqs.length;
  let done = false;
  seqs.forEach((s, k) => {
    s.onUpdate = (seq) => {
      if (done) return;
      onUpdate?.(seq, k);
      if (seq.done && --remaining === 0) {
        done = true;
        onDone();
      }
    };
  });
  call.res.on('close', () => {
    if (done) return;
    done = true;
    for (const s of seqs) engine.scheduler.cancel(s);
  });
  engine.scheduler.submit(seqs);
}

/**
 * runSequences for a streamed answer: the SSE head goes out at once, then `onUpdate` writes an
 * event at the first token, every `--stream-interval` tokens and at the end (as SGLang streams).
 */
export function streamSequences(engine: SimEngine, call: Call, seqs: Sequence[], onUpdate: (seq: Sequence, k: number) => void, onDone: () => void): void {
  call.res.writeHead(200, SSE_HEADERS);
  call.res.flushHeaders();
  const every = engine.opts.streamInterval;
  const due =
    every === 1
      ? onUpdate
      : (seq: Sequence, k: number) => {
          const n = seq.outputIds.length;
          if (seq.done || n <= 1 || n % every === 0) onUpdate(seq, k);
        };
  runSequences(engine, call, seqs, due, onDone);
}

interface LogprobAsk {
  on: boolean;
  top: number;
  startLen: number;
  withText: boolean;
}

/** A per-prompt field: one value for all, or a list indexed by prompt. */
function perChild(v: unknown, i: number, fallback: unknown): unknown {
  return Array.isArray(v) ? (v[i] ?? fallback) : (v ?? fallback);
}

function logprobEntries(seq: Sequence, ask: LogprobAsk): Record<string, unknown> {
  const seed = seq.params.seed;
  const ids = seq.outputIds;
  const text = (id: number): string | null => (ask.withText ? tokenText(id) : null);
  const out: Record<string, unknown> = {};
  const prompt = seq.params.promptIds;
  // logprob_start_len -1 (default) means "from the last prompt token", as SGLang normalises it.
  const start = ask.startLen < 0 ? Math.max(0, prompt.length - 1) : Math.min(ask.startLen, prompt.length);
  const input: unknown[] = [];
  for (let i = start; i < prompt.length; i++) {
    input.push([i === 0 ? null : logprobAt(seq.params.promptHash, -i - 1), prompt[i], text(prompt[i])]);
  }
  out.input_token_logprobs = input;
  const output = new Array<unknown>(ids.length);
  for (let i = 0; i < ids.length; i++) output[i] = [logprobAt(seed, i), ids[i], text(ids[i])];
  out.output_token_logprobs = output;
  if (ask.top > 0) {
    out.input_top_logprobs = input.map(() => null);
    out.output_top_logprobs = ids.map((_, i) => topLogprobsAt(seed, i, ask.top).map(([lp, id]) => [lp, id, text(id)]));
  }
  return out;
}

/**
 * SGLang's `finish_reason` (the `to_json()` of FINISH_LENGTH, FINISH_MATCHED_TOKEN/STR and
 * FINISH_ABORT); null while the request runs.
 */
function finishReason(seq: Sequence): Record<string, unknown> | null {
  const f = seq.finish;
  if (f === null) return null;
  if (f.type === 'length') return { type: 'length', length: Math.max(0, seq.params.maxNewTokens) };
  if (f.type === 'stop') return { type: 'stop', matched: f.matched };
  return { type: 'abort', message: f.message, status_code: f.statusCode, err_type: null };
}

/** One SGLang output object for a sequence, with the live weight_version. */
export function outputOf(engine: SimEngine, seq: Sequence, ask: LogprobAsk, mock: Record<string, unknown> | null, index?: number): Record<string, unknown> {
  let meta: Record<string, unknown> = {
    id: seq.rid,
    finish_reason: finishReason(seq),
    prompt_tokens: seq.params.promptIds.length,
    weight_version: engine.weightVersion,
    total_retractions: seq.retractions,
    completion_tokens: seq.outputIds.length,
    cached_tokens: seq.cachedTokens,
    e2e_latency: (performance.now() - seq.receivedAt) / 1000,
  };
  if (ask.on) meta = { ...meta, ...logprobEntries(seq, ask) };
  if (mock) meta = { ...meta, ...mock };
  const out: Record<string, unknown> = { text: seq.text, output_ids: seq.outputIds, meta_info: meta };
  if (index !== undefined) out.index = index;
  return out;
}

function promptsOf(b: Record<string, unknown>): { prompts: number[][]; single: boolean } | string {
  const hasText = b.text !== undefined && b.text !== null;
  const hasIds = b.input_ids !== undefined && b.input_ids !== null;
  if (hasText && hasIds) return 'Either text or input_ids should be provided, not both.';
  if (hasText) {
    if (typeof b.text === 'string') return { prompts: [encode(b.text)], single: true };
    if (Array.isArray(b.text) && b.text.length > 0 && b.text.every((t) => typeof t === 'string')) {
      return { prompts: (b.text as string[]).map(encode), single: false };
    }
    return 'text must be a string or a non-empty list of strings';
  }
  if (hasIds) {
    const ids = b.input_ids;
    if (Array.isArray(ids) && ids.every((x) => isInt(x) && x >= 0)) return { prompts: [ids as number[]], single: true };
    if (Array.isArray(ids) && ids.length > 0 && ids.every((l) => Array.isArray(l) && l.every((x) => isInt(x) && x >= 0))) {
      return { prompts: ids as number[][], single: false };
    }
    return 'input_ids must be a list of token ids or a non-empty list of such lists';
  }
  if (b.input_embeds !== undefined && b.input_embeds !== null) return 'input_embeds is not supported by the simulator';
  return 'Either text, input_ids or input_embeds should be provided.';
}

export function generate(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  const b = parsed.value;
  const p = promptsOf(b);
  if (typeof p === 'string') return sendError(call.res, p);
  const B = p.prompts.length;
  const rawSp = b.sampling_params;
  if (Array.isArray(rawSp) && rawSp.length !== B) return sendError(call.res, 'sampling_params list length must match the batch size');
  const samplings: Sampling[] = [];
  for (let i = 0; i < B; i++) {
    const s = parseSampling(Array.isArray(rawSp) ? rawSp[i] : rawSp);
    if (typeof s === 'string') return sendError(call.res, s);
    samplings.push(s);
  }
  const n = samplings[0].n;
  const isSingle = p.single && n === 1;
  const rids = expandRids(b.rid, B * n, isSingle);
  if (typeof rids === 'string') return sendError(call.res, rids);
  const seqs = makeSequences(engine, p.prompts, samplings, rids, b.routed_dp_rank ?? b.data_parallel_rank);
  if (typeof seqs === 'string') return sendError(call.res, seqs);

  const asks: LogprobAsk[] = seqs.map((_, k) => {
    const i = Math.floor(k / n);
    const top = perChild(b.top_logprobs_num, i, 0);
    const start = perChild(b.logprob_start_len, i, -1);
    return {
      on: perChild(b.return_logprob, i, false) === true,
      top: isInt(top) && top > 0 ? top : 0,
      startLen: isInt(start) ? start : -1,
      withText: b.return_text_in_logprobs === true,
    };
  });
  const mock =
    typeof b.mock_meta_info === 'object' && b.mock_meta_info !== null && !Array.isArray(b.mock_meta_info)
      ? (b.mock_meta_info as Record<string, unknown>)
      : null;
  const res = call.res;

  if (b.stream === true) {
    streamSequences(
      engine,
      call,
      seqs,
      (seq, k) => {
        const obj = outputOf(engine, seq, asks[k], mock, isSingle ? undefined : k);
        res.write(`data: ${JSON.stringify(obj)}\n\n`);
      },
      () => res.end(SSE_DONE),
    );
    return;
  }
  runSequences(engine, call, seqs, null, () => {
    if (isSingle) return sendJson(res, 200, outputOf(engine, seqs[0], asks[0], mock));
    sendJson(
      res,
      200,
      seqs.map((s, k) => outputOf(engine, s, asks[k], mock)),
    );
  });
}
