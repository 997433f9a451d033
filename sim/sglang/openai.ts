// OpenAI-shaped routes as SGLang serves them: /v1/chat/completions and /v1/completions, buffered
// (with `metadata.weight_version`, no system_fingerprint: the gateway stamps that) or streamed as
// chunks ending `data: [DONE]`. It never stamps versions into streams; SGLang does not either.

import { isInt, sendJson, type Call } from '../core/reply.ts';
import type { Finish, Sequence } from '../core/sequence.ts';
import { encode, tokenText } from '../core/tokens.ts';
import type { SimEngine } from './engine.ts';
import { runSequences, SSE_DONE, streamSequences } from './generation.ts';
import { jsonObject, sendInvalid } from './reply.ts';
import { expandRids, makeSequences, parseSampling, type Sampling } from './sampling.ts';
import { logprobAt, topLogprobsAt } from './tokens.ts';

type Kind = 'chat' | 'completion';

function contentText(c: unknown): string {
  if (typeof c === 'string') return c;
  if (Array.isArray(c))
    return c.map((p) => (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('');
  return '';
}

/** The toy chat template: `<|role|>content` lines, then the assistant turn. */
function chatPrompt(messages: unknown[]): number[] {
  const lines = messages.map((m) => {
    const msg = (m ?? {}) as { role?: unknown; content?: unknown };
    return `<|${typeof msg.role === 'string' ? msg.role : 'user'}|>${contentText(msg.content)}`;
  });
  return encode(`${lines.join('\n')}\n<|assistant|>`);
}

function finishName(r: Finish | null): string | null {
  return r === null ? null : r.type;
}

function matchedStop(r: Finish | null): number | string | null {
  return r && r.type === 'stop' ? r.matched : null;
}

function chatLogprobs(seq: Sequence, from: number, top: number): Record<string, unknown> {
  const content = [];
  for (let i = from; i < seq.outputIds.length; i++) {
    const t = tokenText(seq.outputIds[i]);
    content.push({
      token: t,
      logprob: logprobAt(seq.params.seed, i),
      bytes: [...Buffer.from(t)],
      top_logprobs:
        top > 0
          ? topLogprobsAt(seq.params.seed, i, top).map(([lp, id]) => ({ token: tokenText(id), logprob: lp, bytes: [...Buffer.from(tokenText(id))] }))
          : [],
    });
  }
  return { content };
}

/** The legacy completions logprobs object for tokens [from, end). */
function completionLogprobs(seq: Sequence, from: number, top: number): Record<string, unknown> {
  const tokens: string[] = [];
  const tokenLogprobs: number[] = [];
  const tops: Array<Record<string, number>> = [];
  const offsets: number[] = [];
  for (let i = from; i < seq.outputIds.length; i++) {
    tokens.push(tokenText(seq.outputIds[i]));
    tokenLogprobs.push(logprobAt(seq.params.seed, i));
    tops.push(Object.fromEntries(topLogprobsAt(seq.params.seed, i, Math.max(1, top)).map(([lp, id]) => [tokenText(id), lp])));
    offsets.push(i);
  }
  return { tokens, token_logprobs: tokenLogprobs, top_logprobs: tops, text_offset: offsets };
}

/** Each prompt counts once, however many samples (`n`) it had. */
function usageOf(seqs: Sequence[], n: number): Record<string, unknown> {
  let prompt = 0;
  for (let k = 0; k < seqs.length; k += n) prompt += seqs[k].params.promptIds.length;
  const completion = seqs.reduce((a, s) => a + s.outputIds.length, 0);
  return { prompt_tokens: prompt, total_tokens: prompt + completion, completion_tokens: completion, prompt_tokens_details: null };
}

function handle(engine: SimEngine, call: Call, kind: Kind): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  const b = parsed.value;
  let prompts: number[][];
  if (kind === 'chat') {
    if (!Array.isArray(b.messages) || b.messages.length === 0) return sendInvalid(call.res, 'messages: Field required (a non-empty list)');
    prompts = [chatPrompt(b.messages)];
  } else {
    const p = b.prompt;
    if (typeof p === 'string') prompts = [encode(p)];
    else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === 'string')) prompts = (p as string[]).map(encode);
    else if (Array.isArray(p) && p.length > 0 && p.every(isInt)) prompts = [p as number[]];
    else if (Array.isArray(p) && p.length > 0 && p.every((l) => Array.isArray(l) && l.every(isInt))) prompts = p as number[][];
    else return sendInvalid(call.res, 'prompt: a string, a list of strings or token ids is required');
  }
  const sampling = parseSampling({
    max_new_tokens: b.max_completion_tokens ?? b.max_tokens ?? undefined,
    min_new_tokens: b.min_tokens ?? undefined,
    n: b.n ?? undefined,
    temperature: b.temperature ?? undefined,
    stop: b.stop ?? undefined,
    stop_token_ids: b.stop_token_ids ?? undefined,
    ignore_eos: b.ignore_eos,
    no_stop_trim: b.no_stop_trim,
    sampling_seed: b.seed ?? undefined,
  });
  if (typeof sampling === 'string') return sendInvalid(call.res, sampling);
  const n = sampling.n;
  const num = prompts.length * n;
  const rids = expandRids(b.rid, num, num === 1);
  if (typeof rids === 'string') return sendInvalid(call.res, rids);
  const samplings: Sampling[] = prompts.map(() => sampling);
  const seqs = makeSequences(engine, prompts, samplings, rids, undefined);
  if (typeof seqs === 'string') return sendInvalid(call.res, seqs);

  const model = typeof b.model === 'string' ? b.model : engine.opts.servedModelName;
  const created = Math.floor(Date.now() / 1000);
  const id = seqs[0].rid;
  const wantLogprobs = kind === 'chat' ? b.logprobs === true : isInt(b.logprobs) && b.logprobs > 0;
  const top = kind === 'chat' ? (isInt(b.top_logprobs) ? b.top_logprobs : 0) : isInt(b.logprobs) ? b.logprobs : 0;
  const object = kind === 'chat' ? 'chat.completion' : 'text_completion';
  const res = call.res;

  if (b.stream === true) {
    const sentText = seqs.map(() => 0);
    const sentTokens = seqs.map(() => 0);
    const started = seqs.map(() => false);
    const chunkObject = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const write = (choice: Record<string, unknown>): void => {
      res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model, choices: [choice], usage: null })}\n\n`);
    };
    streamSequences(
      engine,
      call,
      seqs,
      (seq, k) => {
        if (kind === 'chat' && !started[k]) {
          started[k] = true;
          write({ index: k, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null, matched_stop: null });
        }
        const delta = seq.text.slice(sentText[k]);
        sentText[k] = seq.text.length;
        const lp = !wantLogprobs ? null : kind === 'chat' ? chatLogprobs(seq, sentTokens[k], top) : completionLogprobs(seq, sentTokens[k], top);
        sentTokens[k] = seq.outputIds.length;
        if (delta === '' && !seq.done) return;
        const fin = { finish_reason: finishName(seq.finish), matched_stop: matchedStop(seq.finish) };
        if (kind === 'chat') write({ index: k, delta: delta === '' ? {} : { content: delta }, logprobs: lp, ...fin });
        else write({ index: k, text: delta, logprobs: lp, ...fin });
      },
      () => {
        const opts = b.stream_options as { include_usage?: unknown } | undefined;
        if (opts && opts.include_usage === true) {
          res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model, choices: [], usage: usageOf(seqs, n) })}\n\n`);
        }
        res.end(SSE_DONE);
      },
    );
    return;
  }

  runSequences(engine, call, seqs, null, () => {
    const choices = seqs.map((s, k) => {
      const fin = { finish_reason: finishName(s.finish), matched_stop: matchedStop(s.finish) };
      if (kind === 'chat') {
        return {
          index: k,
          message: { role: 'assistant', content: s.text, reasoning_content: null, tool_calls: null },
          logprobs: wantLogprobs ? chatLogprobs(s, 0, top) : null,
          ...fin,
        };
      }
      return { index: k, text: s.text, logprobs: wantLogprobs ? completionLogprobs(s, 0, top) : null, ...fin };
    });
    sendJson(res, 200, {
      id,
      object,
      created,
      model,
      choices,
      usage: usageOf(seqs, n),
      metadata: { weight_version: engine.weightVersion },
    });
  });
}

export function chatCompletions(engine: SimEngine, call: Call): void {
  handle(engine, call, 'chat');
}

export function completions(engine: SimEngine, call: Call): void {
  handle(engine, call, 'completion');
}
