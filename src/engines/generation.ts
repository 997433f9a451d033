// Token-level generation as every non-HTTP wire offers it (TokenSpeed gRPC, the ZMQ lane): token
// ids in, a stream of token chunks and one completion per choice out. The gateway's /generate and
// OpenAI routes build SGLang/OpenAI answers from these events; the wires never see those shapes.
// Types only: each wire's client (grpc.ts, zmq.ts) implements `TokenEngine`.

/** Sampling parameters the wires carry (SGLang names; absent = the engine's default). */
export interface TokenSampling {
  max_new_tokens?: number;
  min_new_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  repetition_penalty?: number;
  /** String stop sequences: carried by gRPC (SamplingParams.stop, field 10); the ZMQ wire has none. */
  stop?: string[];
  stop_token_ids?: number[];
  ignore_eos?: boolean;
  skip_special_tokens?: boolean;
  spaces_between_special_tokens?: boolean;
  no_stop_trim?: boolean;
  n?: number;
  sampling_seed?: number;
  json_schema?: string;
  regex?: string;
  ebnf?: string;
  /** The gRPC wire carries these three (SamplingParams 16, 20, 21); the ZMQ client refuses them. */
  structural_tag?: string;
  /** Token id (decimal string) → additive bias. */
  logit_bias?: Record<string, number>;
  custom_params?: Record<string, unknown>;
}

/**
 * The sampling parameters that keep their SGLang name and value on every token wire: copied as
 * they are from a `/generate` body's `sampling_params`. The others (`stop`, `structural_tag`,
 * `logit_bias`, `custom_params`) are checked or reshaped on their own.
 */
export const PLAIN_SAMPLING_KEYS: ReadonlyArray<keyof TokenSampling> = [
  'max_new_tokens',
  'min_new_tokens',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'stop_token_ids',
  'ignore_eos',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'no_stop_trim',
  'n',
  'sampling_seed',
  'json_schema',
  'regex',
  'ebnf',
];

export interface TokenRequest {
  /** Engine request id (the caller's `rid`, or one the gateway made). */
  rid: string;
  inputIds: number[];
  sampling: TokenSampling;
  returnLogprob: boolean;
  /** Ranked alternatives per output token (0 = none). */
  topLogprobsNum: number;
  /** Ask the engine to stream chunks (needed to return abort partials). */
  stream: boolean;
}

export type FinishReason = { type: 'stop'; matched: number | string | null } | { type: 'length'; length: number } | { type: 'abort'; message: string };

/** New tokens of one choice since its previous chunk. */
export interface TokenChunk {
  kind: 'chunk';
  index: number;
  tokenIds: number[];
  /** One logprob per token id, when requested and the engine returns them. */
  logprobs?: number[];
  promptTokens?: number;
  completionTokens?: number;
  cachedTokens?: number;
  /** Engine-stamped weight version (TokenSpeed chunk field 7), if the engine stamps it. */
  weightVersion?: string;
}

/** One finished choice. `outputIds` is the whole output of the choice. */
export interface TokenComplete {
  kind: 'complete';
  index: number;
  outputIds: number[];
  logprobs?: number[];
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Engine-stamped weight version (TokenSpeed complete field 12). */
  weightVersion?: string;
}

export type TokenEvent = TokenChunk | TokenComplete;

/** Why a token stream ended without a completion. */
export class GenerationError extends Error {
  override readonly name = 'GenerationError';
  constructor(
    /** `aborted` (engine-side abort: build an abort partial), `invalid_argument`, `unavailable` (transport), `internal`. */
    readonly code: 'aborted' | 'invalid_argument' | 'unavailable' | 'deadline' | 'internal',
    message: string,
    /** True when no event had arrived yet: the request may be retried on another engine. */
    readonly beforeFirstEvent: boolean,
  ) {
    super(message);
  }
}

export interface TokenEngine {
  /**
   * Streams the events of one request. Aborting `signal` cancels it on the engine (gRPC: cancel
   * the call and send Abort; ZMQ: send ABORT). Ends with a GenerationError when the engine
   * aborts, refuses or vanishes.
   */
  generate(req: TokenRequest, signal: AbortSignal): AsyncIterable<TokenEvent>;
}
