// The simulator's toy model: a byte-level tokenizer and a deterministic "sampler" that walks a
// fixed corpus from an offset derived from the prompt. Same prompt + same sample seed = same
// tokens and logprobs, so tests can compare runs. It never touches HTTP or timers.

/** Ids 0..2 are special (pad, bos, eos); byte b is token b + TOKEN_OFFSET. */
export const TOKEN_OFFSET = 3;
export const EOS_TOKEN_ID = 2;
export const VOCAB_SIZE = 256 + TOKEN_OFFSET;

// Plain ASCII so every generated token is one character of text and stop strings match cleanly.
const CORPUS =
  'the quick brown fox jumps over the lazy dog while the small engine keeps writing plain ' +
  'words for every rollout that the trainer asks for, one token at a time, and the weights ' +
  'change only when a refit says so. ';

export function encode(text: string): number[] {
  const bytes = Buffer.from(text, 'utf8');
  const ids = new Array<number>(bytes.length);
  for (let i = 0; i < bytes.length; i++) ids[i] = bytes[i] + TOKEN_OFFSET;
  return ids;
}

/** Decodes byte tokens; special and out-of-range ids decode to nothing. */
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

/** The i-th generated token of a sequence with this seed. */
export function tokenAt(seed: number, i: number): number {
  return CORPUS.charCodeAt((seed + i) % CORPUS.length) + TOKEN_OFFSET;
}

function mix(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x45d9f3b);
  x = Math.imul(x ^ (x >>> 16), 0x45d9f3b);
  return (x ^ (x >>> 16)) >>> 0;
}

/** Logprob of the i-th generated token: a deterministic value in (-4, -0.0001]. */
export function logprobAt(seed: number, i: number): number {
  const x = mix(seed ^ Math.imul(i + 1, 0x9e3779b1)) % 40000;
  return -Math.round(1 + x) / 10000;
}

/** Top-k alternatives at position i: the sampled token first, then lower-probability others. */
export function topLogprobsAt(seed: number, i: number, k: number): Array<[number, number]> {
  const chosen = tokenAt(seed, i);
  const lp = logprobAt(seed, i);
  const out: Array<[number, number]> = [[lp, chosen]];
  for (let j = 1; j < k; j++) {
    const alt = TOKEN_OFFSET + ((chosen - TOKEN_OFFSET + j * 7) % 256);
    out.push([Math.round((lp - j * 0.5) * 10000) / 10000, alt]);
  }
  return out;
}
