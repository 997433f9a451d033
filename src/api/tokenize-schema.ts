// POST /v1/tokenize and /v1/detokenize, as the API document shows them: SMG's shapes
// (`{model, prompt}` → `{tokens, count, char_count}`, `{model, tokens, skip_special_tokens}` →
// `{text}`), with SGLang's `add_special_tokens` and `max_model_len`. The request schemas are also
// what the gateway checks (http/tokenize.ts compiles them); answers are open objects.

import { Type } from '@sinclair/typebox';

const Id = Type.Integer({ minimum: 0 });
const Ids = Type.Array(Id);
const Count = Type.Integer({ minimum: 0 });

export const TokenizeRequest = Type.Object(
  {
    model: Type.Optional(Type.String({ description: 'The model whose tokenizer to use; absent (or `unknown`): the single model the fleet serves.' })),
    prompt: Type.Union([Type.String(), Type.Array(Type.String())], { description: 'One text, or a batch of texts.' }),
    add_special_tokens: Type.Optional(
      Type.Boolean({ description: "SGLang's field: add the tokenizer's special tokens (BOS...). Default false, as SMG tokenizes." }),
    ),
  },
  { additionalProperties: true, description: "SMG's tokenize request." },
);

export const TokenizeAnswer = Type.Object(
  {
    tokens: Type.Union([Ids, Type.Array(Ids)], { description: 'One list of ids, or one per text of a batch.' }),
    count: Type.Union([Count, Type.Array(Count)]),
    char_count: Type.Union([Count, Type.Array(Count)], { description: 'Characters (code points) of each text.' }),
    max_model_len: Type.Optional(Type.Integer({ description: "SGLang's: the engine's context length, when known." })),
  },
  { additionalProperties: true, description: "SMG's tokenize answer." },
);

export const DetokenizeRequest = Type.Object(
  {
    model: Type.Optional(Type.String({ description: 'As in /v1/tokenize.' })),
    tokens: Type.Union([Ids, Type.Array(Ids)], { description: 'One list of ids, or a batch of lists.' }),
    skip_special_tokens: Type.Optional(Type.Boolean({ description: 'Default true.' })),
  },
  { additionalProperties: true, description: "SMG's detokenize request." },
);

export const DetokenizeAnswer = Type.Object(
  { text: Type.Union([Type.String(), Type.Array(Type.String())], { description: 'One text, or one per sequence of a batch.' }) },
  { additionalProperties: true, description: "SMG's detokenize answer." },
);
