// Shape checks for data-plane request bodies, done at the gateway so a malformed request is a
// 4xx JSON error of ours and never reaches an engine. Only the fields whose types we can vouch
// for are checked; unknown fields pass through untouched on the HTTP path.

import { Type, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { GatewayError } from '../api/errors.ts';
import { parseJsonObject } from '../http/raw-body.ts';

const Int = Type.Integer();
const StrOrStrs = Type.Union([Type.String(), Type.Array(Type.String())]);
const BoolOrBools = Type.Union([Type.Boolean(), Type.Array(Type.Boolean())]);
const Obj = Type.Object({}, { additionalProperties: true });
const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

const GenerateBody = Type.Object(
  {
    text: Type.Optional(Nullable(StrOrStrs)),
    input_ids: Type.Optional(Nullable(Type.Union([Type.Array(Int), Type.Array(Type.Array(Int))]))),
    sampling_params: Type.Optional(Nullable(Type.Union([Obj, Type.Array(Obj)]))),
    rid: Type.Optional(Nullable(StrOrStrs)),
    return_logprob: Type.Optional(Nullable(BoolOrBools)),
    logprob_start_len: Type.Optional(Nullable(Type.Union([Int, Type.Array(Int)]))),
    top_logprobs_num: Type.Optional(Nullable(Type.Union([Int, Type.Array(Int)]))),
    return_text_in_logprobs: Type.Optional(Type.Boolean()),
    stream: Type.Optional(Type.Boolean()),
    model: Type.Optional(Nullable(Type.String())),
  },
  { additionalProperties: true },
);

const Message = Type.Object({ role: Type.String() }, { additionalProperties: true });
const OpenAiCommon = {
  model: Type.Optional(Nullable(Type.String())),
  stream: Type.Optional(Nullable(Type.Boolean())),
  max_tokens: Type.Optional(Nullable(Int)),
  max_completion_tokens: Type.Optional(Nullable(Int)),
  n: Type.Optional(Nullable(Int)),
  temperature: Type.Optional(Nullable(Type.Number())),
  top_p: Type.Optional(Nullable(Type.Number())),
  stop: Type.Optional(Nullable(StrOrStrs)),
};
const ChatBody = Type.Object({ messages: Type.Array(Message, { minItems: 1 }), ...OpenAiCommon }, { additionalProperties: true });
const CompletionBody = Type.Object(
  { prompt: Type.Union([Type.String(), Type.Array(Type.String()), Type.Array(Int), Type.Array(Type.Array(Int))]), ...OpenAiCommon },
  { additionalProperties: true },
);

const CHECKS = {
  '/generate': TypeCompiler.Compile(GenerateBody),
  '/v1/chat/completions': TypeCompiler.Compile(ChatBody),
  '/v1/completions': TypeCompiler.Compile(CompletionBody),
};

export type DataPlanePath = keyof typeof CHECKS;

/** Parses and checks one data-plane body; throws `invalid_request` (400) naming the field. */
export function checkDataPlaneBody(path: DataPlanePath, raw: Buffer | null): Record<string, unknown> {
  const value = parseJsonObject(raw, 'invalid_request');
  const check = CHECKS[path];
  if (!check.Check(value)) {
    const first = check.Errors(value).First();
    const field = first?.path || '/';
    throw new GatewayError('invalid_request', `invalid field \`${field}\`: ${first?.message ?? 'wrong type'}`, { field });
  }
  return value as Record<string, unknown>;
}
