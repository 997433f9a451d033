// The toy model every simulator runs: a byte-level tokenizer (id = UTF-8 byte + 3; 0/1/2 are
// pad/bos/eos) and a deterministic "sampler" that walks a fixed ASCII corpus from an offset hashed
// from the prompt, with deterministic logprobs. Same prompt + same seed = same tokens, so tests
// can compare runs. Each simulator brings its own corpus and its own top-k alternatives (their
// wire shapes differ); this file never touches a wire or a timer.

export const PAD_TOKEN_ID = 0;
export const BOS_TOKEN_ID = 1;
export const EOS_TOKEN_ID = 2;
/** Ids 0..2 are special; byte b is token b + TOKEN_OFFSET. */
export const TOKEN_OFFSET = 3;
export const VOCAB_SIZE = 256 + TOKEN_OFFSET;

export function encode(text: string): number[] {
  const bytes = Buffer.from(text, 'utf8');
  const ids = new Array<number>(bytes.length);
  for (let i = 0; i < bytes.length; i++) ids[i] = bytes[i] + TOKEN_OFFSET;
  return ids;
}

/** Special and out-of-range ids decode to nothing (skip_special_tokens). */
export function decode(ids: readonly number[]): string {
  const bytes: number[] = [];
  for (const id of ids) if (id >= TOKEN_OFFSET && id < VOCAB_SIZE) bytes.push(id - TOKEN_OFFSET);
  return Buffer.from(bytes).toString('utf8');
}

/** The text of one generated token (every generated token is one ASCII character). */
export function tokenText(id: number): string {
  return id >= TOKEN_OFFSET && id < VOCAB_SIZE ? String.fromCharCode(id - TOKEN_OFFSET) : '';
}

/** FNV-1a over the prompt ids mixed with a salt (sample index, sampling seed). */
export function seedOf(promptIds: readonly number[], salt: number): number {
  let h = 0x811c9dc5 ^ salt;
  for (let i = 0; i < promptIds.length; i++) {
    h ^= promptIds[i] & 0xffff;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function mix(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x45d9f3b);
  x = Math.imul(x ^ (x >>> 16), 0x45d9f3b);
  return (x ^ (x >>> 16)) >>> 0;
}

export interface ToyModel {
  /** The i-th generated token of a sequence with this seed (one ASCII character each). */
  tokenAt(seed: number, i: number): number;
  /** Logprob of the i-th generated token: a deterministic value in (-4, -0.0001]. */
  logprobAt(seed: number, i: number): number;
}

/**
 * The model over `corpus` (plain ASCII, so every generated token is one character of text and
 * stop strings match cleanly); `logprobSalt` keeps each simulator's logprobs its own.
 */
export function toyModel(corpus: string, logprobSalt: number): ToyModel {
  return {
    tokenAt: (seed, i) => corpus.charCodeAt((seed + i) % corpus.length) + TOKEN_OFFSET,
    logprobAt: (seed, i) => -(1 + (mix(seed ^ Math.imul(i + 1, logprobSalt)) % 40000)) / 10000,
  };
}
