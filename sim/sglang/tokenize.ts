// SGLang's tokenizer routes over the toy tokenizer (sim/core/tokens.ts: one token per UTF-8
// byte): `POST /v1/tokenize` (alias `/tokenize`) `{model?, prompt: str | [str],
// add_special_tokens = true}` → `{tokens, count, max_model_len}`, and `POST /v1/detokenize` (alias
// `/detokenize`) `{model?, tokens: [int] | [[int]], skip_special_tokens = true}` → `{text}`. Like
// SGLang's, they take `application/json` only, and answer 400 ErrorResponse on a bad body.

import type { RouteTable } from '../core/http-front.ts';
import { BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, decode, encode } from '../core/tokens.ts';
import { isInt, sendJson, type Call } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { jsonObject, sendInvalid } from './reply.ts';

const SPECIAL_TEXT = new Map([
  [PAD_TOKEN_ID, '<pad>'],
  [BOS_TOKEN_ID, '<s>'],
  [EOS_TOKEN_ID, '</s>'],
]);

/** The body, or null once a 400 was sent: SGLang's `validate_json_request`, then the struct. */
function body(call: Call): Record<string, unknown> | null {
  const type = String(call.req.headers['content-type'] ?? '')
    .split(';', 1)[0]!
    .trim()
    .toLowerCase();
  if (type !== 'application/json') {
    sendInvalid(call.res, "Unsupported Media Type: Only 'application/json' is allowed");
    return null;
  }
  const parsed = jsonObject(call.body);
  if (!parsed.ok) {
    sendInvalid(call.res, parsed.message);
    return null;
  }
  return parsed.value;
}

function encodeOne(text: string, special: boolean): number[] {
  const ids = encode(text);
  return special ? [BOS_TOKEN_ID, ...ids] : ids;
}

function decodeOne(ids: number[], skipSpecial: boolean): string {
  if (skipSpecial) return decode(ids);
  // Special tokens spelled as the tokenizer's added tokens, the rest decoded in runs.
  let out = '';
  let run: number[] = [];
  for (const id of ids) {
    const special = SPECIAL_TEXT.get(id);
    if (special === undefined) {
      run.push(id);
      continue;
    }
    out += decode(run) + special;
    run = [];
  }
  return out + decode(run);
}

export function tokenize(engine: SimEngine, call: Call): void {
  const b = body(call);
  if (!b) return;
  const { prompt, add_special_tokens: special = true } = b;
  if (typeof special !== 'boolean') return sendInvalid(call.res, 'add_special_tokens: Input should be a valid boolean');
  const maxModelLen = engine.opts.contextLength;
  if (typeof prompt === 'string') {
    const tokens = encodeOne(prompt, special);
    return sendJson(call.res, 200, { tokens, count: tokens.length, max_model_len: maxModelLen });
  }
  if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) {
    const tokens = prompt.map((p) => encodeOne(p, special));
    return sendJson(call.res, 200, { tokens, count: tokens.map((t) => t.length), max_model_len: maxModelLen });
  }
  sendInvalid(call.res, prompt === undefined ? 'prompt: Field required' : 'prompt: Input should be a valid string or a list of strings');
}

export function detokenize(_engine: SimEngine, call: Call): void {
  const b = body(call);
  if (!b) return;
  const { tokens, skip_special_tokens: skip = true } = b;
  if (typeof skip !== 'boolean') return sendInvalid(call.res, 'skip_special_tokens: Input should be a valid boolean');
  if (!Array.isArray(tokens)) return sendInvalid(call.res, tokens === undefined ? 'tokens: Field required' : 'tokens: Input should be a valid list');
  if (tokens.every(isInt)) return sendJson(call.res, 200, { text: decodeOne(tokens, skip) });
  if (tokens.every((t) => Array.isArray(t) && t.every(isInt))) {
    return sendJson(call.res, 200, { text: (tokens as number[][]).map((t) => decodeOne(t, skip)) });
  }
  sendInvalid(call.res, "Invalid input: 'tokens' must be a list of integers or a list of lists of integers.");
}

/** The routes, for the server's table (data plane: tokenizing is no control call). */
export function tokenizeRoutes(t: RouteTable<SimEngine>): void {
  for (const path of ['/v1/tokenize', '/tokenize']) t.add(path, ['POST'], tokenize, true);
  for (const path of ['/v1/detokenize', '/detokenize']) t.add(path, ['POST'], detokenize, true);
}
