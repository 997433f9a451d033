// The toy model behind Generate: a deterministic "sampler" that walks a fixed ASCII corpus from an
// offset hashed from the prompt (and the choice index / sampling_seed unless greedy), plus
// deterministic logprobs and top-k alternatives. Same inputs, same tokens. Pure.

import { TOKEN_OFFSET, VOCAB_SIZE } from './tokenizer.ts';

const CORPUS =
  'tokens flow from the scheduler to the gateway in small steps while the trainer waits for ' +
  'rollouts, and every step is tagged with the weight version that produced it; a refit moves ' +
  'the version only when every tensor has arrived. ';

/** FNV-1a over the prompt ids mixed with a salt. */
export function seedOf(promptIds: readonly number[], salt: number): number {
  let h = (0x811c9dc5 ^ salt) >>> 0;
  for (let i = 0; i < promptIds.length; i++) {
    h ^= promptIds[i] & 0xffff;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Sampler seed of choice `index`: greedy (temperature 0) gives every choice the same one. */
export function choiceSeed(promptIds: readonly number[], index: number, samplingSeed: bigint, greedy: boolean): number {
  const base = seedOf(promptIds, 0);
  if (greedy) return base;
  const salt = (Math.imul(index + 1, 0x9e3779b1) ^ Number(BigInt.asUintN(32, samplingSeed))) >>> 0;
  return seedOf(promptIds, salt);
}

/** The i-th generated token id of a sequence with this seed (one ASCII character each). */
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
  const x = mix(seed ^ Math.imul(i + 1, 0x85ebca6b)) % 40000;
  return -(1 + x) / 10000;
}

/** Top-k at position i: the sampled token first, then less likely alternatives. */
export function topLogprobsAt(seed: number, i: number, k: number): { values: number[]; tokenIds: number[] } {
  const chosen = tokenAt(seed, i);
  const lp = logprobAt(seed, i);
  const values = [lp];
  const tokenIds = [chosen];
  for (let j = 1; j < k; j++) {
    tokenIds.push(TOKEN_OFFSET + ((chosen - TOKEN_OFFSET + j * 11) % (VOCAB_SIZE - TOKEN_OFFSET)));
    values.push(lp - j * 0.5);
  }
  return { values, tokenIds };
}
