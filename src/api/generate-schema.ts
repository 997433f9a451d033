// The data plane's requests and answers (POST /generate, /v1/chat/completions, /v1/completions),
// as the API document shows them. The request schemas are also what the gateway checks
// (relay/data-plane-input.ts compiles them): only the fields listed here; every other field passes
// to the engine untouched, and an HTTP engine's answer comes back as the engine wrote it, so every
// object is open.

import { Type, type TSchema } from '@sinclair/typebox';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const Int = Type.Integer();
const StrOrStrs = Type.Union([Type.String(), Type.Array(Type.String())]);
const Obj = Type.Object({}, { additionalProperties: true });

export const GenerateRequest = Type.Object(
  {
    text: Type.Optional(
      Nullable(
        Type.Union([Type.String(), Type.Array(Type.String())], { description: 'One prompt (a list of prompts is refused: 422 `invalid_request_shape`).' }),
      ),
    ),
    input_ids: Type.Optional(
      Nullable(
        Type.Union([Type.Array(Int), Type.Array(Type.Array(Int))], { description: 'Token ids; a list of lists is a batch, served by HTTP engines only.' }),
      ),
    ),
    sampling_params: Type.Optional(Nullable(Type.Union([Obj, Type.Array(Obj)]))),
    rid: Type.Optional(Nullable(StrOrStrs)),
    return_logprob: Type.Optional(Nullable(Type.Union([Type.Boolean(), Type.Array(Type.Boolean())]))),
    logprob_start_len: Type.Optional(Nullable(Type.Union([Int, Type.Array(Int)]))),
    top_logprobs_num: Type.Optional(Nullable(Type.Union([Int, Type.Array(Int)]))),
    return_text_in_logprobs: Type.Optional(Type.Boolean()),
    stream: Type.Optional(Type.Boolean({ description: 'Answer server-sent events (`data: {...}`, then `data: [DONE]`).' })),
    model: Type.Optional(Nullable(Type.String({ description: 'A routing filter only; never sent upstream. Absent: the single model the fleet serves.' }))),
  },
  { additionalProperties: true, description: "SGLang's native generate request." },
);

export const GenerateAnswer = Type.Object(
  {
    text: Type.Optional(Type.String()),
    output_ids: Type.Optional(Type.Array(Int)),
    meta_info: Type.Optional(
      Type.Object({ weight_version: Type.Optional(Type.String({ description: 'The weights that produced this sample.' })) }, { additionalProperties: true }),
    ),
  },
  { additionalProperties: true, description: "SGLang's generate answer, stamped with the engine's weight_version." },
);

const Message = Type.Object({ role: Type.String(), content: Type.Optional(Type.Unknown()) }, { additionalProperties: true });
const OpenAiCommon = {
  model: Type.Optional(Nullable(Type.String({ description: 'A routing filter; absent: the single model the fleet serves.' }))),
  stream: Type.Optional(Nullable(Type.Boolean())),
  max_tokens: Type.Optional(Nullable(Int)),
  max_completion_tokens: Type.Optional(Nullable(Int)),
  n: Type.Optional(Nullable(Int)),
  temperature: Type.Optional(Nullable(Type.Number())),
  top_p: Type.Optional(Nullable(Type.Number())),
  stop: Type.Optional(Nullable(StrOrStrs)),
};

export const ChatRequest = Type.Object(
  { messages: Type.Array(Message, { minItems: 1 }), ...OpenAiCommon },
  { additionalProperties: true, description: 'An OpenAI chat completion request.' },
);

export const CompletionRequest = Type.Object(
  { prompt: Type.Union([Type.String(), Type.Array(Type.String()), Type.Array(Int), Type.Array(Type.Array(Int))]), ...OpenAiCommon },
  { additionalProperties: true, description: 'An OpenAI completion request.' },
);

export const OpenAiAnswer = Type.Object(
  {
    id: Type.Optional(Type.String()),
    object: Type.Optional(Type.String()),
    choices: Type.Optional(Type.Array(Obj)),
    system_fingerprint: Type.Optional(Nullable(Type.String({ description: "RL on: the engine's weight_version." }))),
  },
  { additionalProperties: true, description: 'An OpenAI-shaped answer, stamped with the weight version as `system_fingerprint`.' },
);

export const VersionPolicyHeaders = Type.Object(
  {
    'x-rl-version-policy': Type.Optional(
      Type.String({ description: 'RL on: `any`, `latest-only`, `min-version:<v>` or `max-staleness:<k>`; wins over x-smg-version-policy.' }),
    ),
    'x-smg-version-policy': Type.Optional(Type.String({ description: "SMG's name for the same policy." })),
    'x-smg-routing-key': Type.Optional(
      Type.String({
        description:
          'Session affinity: the same key goes to the same engine under bounded_affinity (the default, while that engine is within its load bound), least_inflight, consistent_hashing and manual, or any policy with --routing-key-override.',
      }),
    ),
    'x-rl-on-stale': Type.Optional(
      Type.String({
        description:
          'RL on, /generate under max-staleness:<k>: what becomes of the request if the fleet moves more than k versions past the version it was admitted on while it runs: `abort` (the default; the engine aborts it) or `mark` (it finishes; a buffered answer says x-rl-stale: marked).',
      }),
    ),
    'x-smg-target-worker': Type.Optional(
      Type.String({
        description: 'consistent_hashing: the engine to route to, as its index among the eligible engines, its worker id or its URL; none eligible: 503.',
      }),
    ),
  },
  { additionalProperties: true },
);

/** A stream answer: server-sent events, one JSON object per `data:` line, then `data: [DONE]`. */
export const EventStream = Type.String({ description: 'Server-sent events.' });

/** Headers the gateway stamps on a data-plane answer (RL on). */
export const StampHeaders = {
  'x-smg-weight-version': { type: 'string', description: "The routed engine's weight version (also x-rl-weight-version)." },
  'x-smg-mixed-version': { type: 'string', description: '`true` when the body names another version than the routed engine (also x-rl-mixed-version).' },
  'x-smg-routed-worker-id': { type: 'string', description: 'The worker that served the request (also x-rl-routed-worker-id).' },
  'x-rl-admitted-version': { type: 'string', description: "The routed engine's weight version when the request was sent to it." },
  'x-rl-stale': { type: 'string', description: '`aborted` or `marked`: a buffered /generate answer that went past its max-staleness bound while it ran.' },
} as const;
