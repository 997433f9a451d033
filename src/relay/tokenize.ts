// `/v1/tokenize` and `/v1/detokenize` on one worker, answered in SMG's shapes. An HTTP engine
// tokenizes itself (SGLang's own `/v1/tokenize`, `/v1/detokenize`); one without those routes (404,
// 405: an older build), and a token engine, use the worker's tokenizer as `/generate` does (the
// engine's GetTokenizer bundle, else `--tokenizer-path`). SMG's tokenize answer is `{tokens,
// count, char_count}`; rlgate adds SGLang's `max_model_len` when the engine or the worker tells
// it. It never picks a worker (http/tokenize.ts does) and never retries.

import { GatewayError } from '../api/errors.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import type { TokenEngine } from '../engines/generation.ts';
import { HttpEngineClient } from '../engines/http.ts';
import { loadTokenizerPath, type Tokenizer } from '../engines/tokenizer.ts';
import { contextLengthOf } from '../fleet/context-length.ts';
import type { Worker } from '../fleet/worker.ts';
import { callHttpEngine, lightCallSecs, type EngineAnswer } from './engine-call.ts';
import type { RelayServices } from './relay-services.ts';
import { tokenizerFor } from './token-relay.ts';

export interface TokenizeAsk {
  kind: 'tokenize';
  /** As the caller sent it: one string, or a batch. */
  prompt: string | string[];
  addSpecialTokens: boolean;
  model: string;
}

export interface DetokenizeAsk {
  kind: 'detokenize';
  /** As the caller sent them: one sequence, or a batch. */
  tokens: number[] | number[][];
  skipSpecialTokens: boolean;
  model: string;
}

export type TokenizerAsk = TokenizeAsk | DetokenizeAsk;

export type TokenizerOutcome =
  /** A JSON answer in SMG's shape, or the engine's own non-2xx answer as it wrote it. */
  | { kind: 'answered'; status: number; json: unknown }
  | { kind: 'passed'; answer: EngineAnswer }
  /** No tokenizer on this worker; `why` says what was tried. Another worker may have one. */
  | { kind: 'unfit'; why: string }
  | { kind: 'unreachable'; error: GatewayError };

/** Routes an engine that predates them answers with. */
const ABSENT = new Set([404, 405]);

export async function tokenizerCall(services: RelayServices, worker: Worker, client: EngineClient, ask: TokenizerAsk): Promise<TokenizerOutcome> {
  if (client instanceof HttpEngineClient) {
    let answer: EngineAnswer;
    try {
      answer = await callHttpEngine(services, worker, client, { method: 'POST', path: `/v1/${ask.kind}`, body: engineBody(ask) });
    } catch (err) {
      if (err instanceof GatewayError && (err.code === 'upstream_unreachable' || err.code === 'upstream_timeout')) return { kind: 'unreachable', error: err };
      throw err;
    }
    if (answer.status >= 200 && answer.status < 300) {
      const json = jsonOf(answer.body);
      if (json === undefined) return { kind: 'passed', answer };
      return { kind: 'answered', status: answer.status, json: ask.kind === 'tokenize' ? withCharCount(json, ask.prompt) : json };
    }
    if (!ABSENT.has(answer.status)) return { kind: 'passed', answer };
    const path = services.config.tokenizerPath;
    if (!path) return { kind: 'unfit', why: `${worker.url} has no /v1/${ask.kind} (it answered ${answer.status}) and no --tokenizer-path is set` };
    try {
      return local(worker, await loadTokenizerPath(path), ask);
    } catch (err) {
      return { kind: 'unfit', why: `${worker.url} has no /v1/${ask.kind} (it answered ${answer.status}); ${(err as Error).message}` };
    }
  }
  const { tokenizer, why } = await tokenizerFor(services, client as EngineClient & TokenEngine, AbortSignal.timeout(lightCallSecs(services.config) * 1000));
  if (!tokenizer) return { kind: 'unfit', why: `${worker.url}: ${why}` };
  return local(worker, tokenizer, ask);
}

/** SGLang's request: `add_special_tokens` sent explicitly, since SGLang's default (true) is not SMG's. */
function engineBody(ask: TokenizerAsk): Record<string, unknown> {
  if (ask.kind === 'tokenize') return { model: ask.model, prompt: ask.prompt, add_special_tokens: ask.addSpecialTokens };
  return { model: ask.model, tokens: ask.tokens, skip_special_tokens: ask.skipSpecialTokens };
}

function jsonOf(body: Buffer): unknown {
  try {
    const v = JSON.parse(body.toString('utf8')) as unknown;
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Code points, as SMG counts them (Rust's `chars().count()`), not UTF-16 units. */
function charCount(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

function withCharCount(json: unknown, prompt: string | string[]): unknown {
  const char_count = Array.isArray(prompt) ? prompt.map(charCount) : charCount(prompt);
  return { ...(json as Record<string, unknown>), char_count };
}

function local(worker: Worker, t: Tokenizer, ask: TokenizerAsk): TokenizerOutcome {
  if (ask.kind === 'tokenize') {
    const one = (p: string) => t.encode(p, { addSpecialTokens: ask.addSpecialTokens });
    const tokens = Array.isArray(ask.prompt) ? ask.prompt.map(one) : one(ask.prompt);
    const count = Array.isArray(ask.prompt) ? (tokens as number[][]).map((ids) => ids.length) : tokens.length;
    const json: Record<string, unknown> = withCharCount({ tokens, count }, ask.prompt) as Record<string, unknown>;
    const maxLen = contextLengthOf(worker) ?? modelMaxLength(t);
    if (maxLen !== undefined) json.max_model_len = maxLen;
    return { kind: 'answered', status: 200, json };
  }
  const one = (ids: number[]) => {
    try {
      return t.decode(ids, { skipSpecialTokens: ask.skipSpecialTokens });
    } catch (err) {
      throw new GatewayError('invalid_request', `\`tokens\` cannot be decoded by ${worker.url}'s tokenizer: ${(err as Error).message}`, { field: 'tokens' });
    }
  };
  const batch = ask.tokens.length > 0 && Array.isArray(ask.tokens[0]);
  return { kind: 'answered', status: 200, json: { text: batch ? (ask.tokens as number[][]).map(one) : one(ask.tokens as number[]) } };
}

/** tokenizer_config.json's `model_max_length`, unless it is transformers' "no limit" sentinel (1e30). */
function modelMaxLength(t: Tokenizer): number | undefined {
  const n = t.config.model_max_length;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}
