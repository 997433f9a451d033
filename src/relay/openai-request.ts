// What an OpenAI request (/v1/chat/completions, /v1/completions) to a token engine becomes: its
// sampling, as SGLang's OpenAI server maps it (`response_format` included), and its prompt ids (chat
// messages rendered with the tokenizer's jinja `chat_template`), or a 400 pointing at the field.
// Pure shaping: it never calls an engine or routes; what a wire cannot carry is token-sampling.ts's.

import type { Template } from '@huggingface/jinja';
import type { TokenSampling } from '../engines/generation.ts';
import { jinja } from '../engines/libraries.ts';
import type { Tokenizer } from '../engines/tokenizer.ts';
import { GatewayError } from '../api/errors.ts';
import { EngineCannotServe, checkConstraints, logitBiasOf, stopStringsOf } from './token-sampling.ts';

export type OpenAiPath = '/v1/chat/completions' | '/v1/completions';

/** SGLang extensions of its OpenAI server that map one to one onto the wire's sampling fields. */
const EXTRA_SAMPLING: ReadonlyArray<keyof TokenSampling> = [
  'top_k',
  'min_p',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'ignore_eos',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'no_stop_trim',
  'stop_token_ids',
  'regex',
  'ebnf',
  'json_schema',
];
/** Where each sampling field comes from in an OpenAI request (for the `field` of a refusal). */
const FIELD: Partial<Record<keyof TokenSampling, string>> = {
  structural_tag: '/response_format',
  max_new_tokens: '/max_tokens',
  min_new_tokens: '/min_tokens',
  sampling_seed: '/seed',
};
export const samplingField = (k: keyof TokenSampling): string => FIELD[k] ?? `/${k}`;

function bad(message: string, field: string): GatewayError {
  return new GatewayError('invalid_request', message, { field });
}

/** What token engines cannot do yet: another eligible engine (an HTTP one) may still serve it. */
function cannot(message: string, field: string): EngineCannotServe {
  return new EngineCannotServe(message, { field });
}

/** The sampling of an OpenAI request; refuses what the token path cannot honour yet. */
export function samplingOf(body: Record<string, unknown>): TokenSampling {
  const s: TokenSampling = {};
  const max = body.max_completion_tokens ?? body.max_tokens;
  if (typeof max === 'number') s.max_new_tokens = max;
  if (typeof body.temperature === 'number') s.temperature = body.temperature;
  if (typeof body.top_p === 'number') s.top_p = body.top_p;
  if (typeof body.n === 'number') {
    if (body.n < 1) throw bad('`n` must be at least 1', '/n');
    s.n = body.n;
  }
  if (body.seed !== undefined && body.seed !== null) {
    if (!Number.isInteger(body.seed)) throw bad('`seed` must be an integer', '/seed');
    s.sampling_seed = body.seed as number;
  }
  if (typeof body.min_tokens === 'number') s.min_new_tokens = body.min_tokens;
  for (const k of EXTRA_SAMPLING) if (body[k] !== undefined && body[k] !== null) (s as Record<string, unknown>)[k] = body[k];
  if (s.stop_token_ids !== undefined && (!Array.isArray(s.stop_token_ids) || !s.stop_token_ids.every(Number.isInteger))) {
    throw bad('`stop_token_ids` must be a list of token ids', '/stop_token_ids');
  }
  // String stops go on the gRPC wire; ZMQ has none (checkWire refuses them there).
  const stop = stopStringsOf(body.stop, '`stop`', '/stop');
  if (stop) s.stop = stop;
  const bias = logitBiasOf(body.logit_bias, '/logit_bias');
  if (bias) s.logit_bias = bias;
  responseFormat(body.response_format, s);
  checkConstraints(s, samplingField);
  const lp = body.logprobs;
  if (lp === true || (typeof lp === 'number' && lp > 0) || (typeof body.top_logprobs === 'number' && body.top_logprobs > 0)) {
    throw cannot('`logprobs` are not supported on gRPC/ZMQ engines by this route yet', '/logprobs');
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) throw cannot('`tools` are not supported on gRPC/ZMQ engines yet', '/tools');
  s.skip_special_tokens ??= true;
  s.spaces_between_special_tokens ??= true;
  return s;
}

/**
 * OpenAI's `response_format` as SGLang's OpenAI server maps it: `json_schema` and `json_object`
 * constrain to a JSON schema, `structural_tag` to that tag, `text` is no constraint.
 */
function responseFormat(rf: unknown, s: TokenSampling): void {
  if (rf === undefined || rf === null) return;
  const f = rf as { type?: unknown; json_schema?: { schema?: unknown } };
  if (typeof rf !== 'object' || Array.isArray(rf)) throw bad('`response_format` must be an object with a `type`', '/response_format');
  switch (f.type) {
    case 'text':
      return;
    case 'json_object':
      s.json_schema = '{"type": "object"}';
      return;
    case 'json_schema': {
      const schema = f.json_schema?.schema;
      if (typeof schema !== 'object' || schema === null)
        throw bad('`response_format.json_schema.schema` must be a JSON schema object', '/response_format/json_schema/schema');
      s.json_schema = JSON.stringify(schema);
      return;
    }
    case 'structural_tag':
      s.structural_tag = JSON.stringify(rf);
      return;
    default:
      throw bad('`response_format.type` must be `text`, `json_object`, `json_schema` or `structural_tag`', '/response_format/type');
  }
}

const templates = new WeakMap<Tokenizer, Template>();

function chatTemplate(t: Tokenizer): Template {
  const cached = templates.get(t);
  if (cached) return cached;
  let source = t.config.chat_template;
  // HF also allows a list of named templates; `default` is the one apply_chat_template uses.
  if (Array.isArray(source)) source = (source as Array<{ name?: string; template?: string }>).find((x) => x?.name === 'default')?.template;
  if (typeof source !== 'string' || !source) {
    throw cannot(`the engine's tokenizer (${t.source}) has no \`chat_template\`: use /v1/completions or /generate`, '/messages');
  }
  let tpl: Template;
  try {
    tpl = new (jinja().Template)(source);
  } catch (err) {
    throw new EngineCannotServe(`the tokenizer's chat_template does not parse: ${(err as Error).message}`, { field: '/messages' });
  }
  templates.set(t, tpl);
  return tpl;
}

function specialToken(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return '';
}

/** Content parts become one string (text parts only); what the template sees is plain messages. */
function templateMessages(messages: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return messages.map((m, i) => {
    let content = m.content ?? '';
    if (Array.isArray(content)) {
      content = content
        .map((p: { type?: string; text?: unknown }, j) => {
          if (p?.type !== 'text' || typeof p.text !== 'string')
            throw cannot('only text content parts are supported on gRPC/ZMQ engines', `/messages/${i}/content/${j}`);
          return p.text;
        })
        .join('');
    } else if (typeof content !== 'string') {
      throw bad('message `content` must be a string or a list of text parts', `/messages/${i}/content`);
    }
    return { ...m, content };
  });
}

/** The prompt as token ids: chat `messages` through the chat template, or one `prompt` (text or ids). */
export function promptIds(path: OpenAiPath, body: Record<string, unknown>, t: Tokenizer): number[] {
  let ids: number[];
  if (path === '/v1/chat/completions') {
    const cfg = t.config;
    let text: string;
    try {
      text = chatTemplate(t).render({
        messages: templateMessages(body.messages as Array<Record<string, unknown>>),
        add_generation_prompt: true,
        bos_token: specialToken(cfg.bos_token),
        eos_token: specialToken(cfg.eos_token),
      });
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      throw bad(`the chat template failed on these messages: ${(err as Error).message}`, '/messages');
    }
    ids = t.encode(text);
  } else {
    let prompt = body.prompt;
    // One prompt per engine call: a one-element list is that prompt, a longer list a batch.
    if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) prompt = prompt[0];
    if (typeof prompt === 'string') ids = t.encode(prompt);
    else if (Array.isArray(prompt) && prompt.every((x) => typeof x === 'number')) ids = prompt as number[];
    else throw cannot('gRPC and ZMQ engines take one prompt per request: `prompt` must be one string or one list of token ids', '/prompt');
  }
  if (ids.length === 0) throw bad('the prompt tokenized to no tokens', path === '/v1/completions' ? '/prompt' : '/messages');
  return ids;
}
