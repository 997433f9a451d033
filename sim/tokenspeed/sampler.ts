// TokenSpeed's toy model over the shared one (sim/core/tokens.ts: byte tokenizer, seeds, the
// corpus walk): its corpus, its logprob salt, the choice seed (index and sampling_seed mixed in
// unless greedy) and its top-k alternatives as the proto carries them. Same inputs, same tokens.
// Pure.

import { seedOf, TOKEN_OFFSET, toyModel, VOCAB_SIZE } from '../core/tokens.ts';

const CORPUS =
  'tokens flow from the scheduler to the gateway in small steps while the trainer waits for ' +
  'rollouts, and every step is tagged with the weight version that produced it; a refit moves ' +
  'the version only when every tensor has arrived. ';

export const { tokenAt, logprobAt } = toyModel(CORPUS, 0x85ebca6b);

/** Sampler seed of choice `index`: greedy (temperature 0) gives every choice the same one. */
export function choiceSeed(promptIds: readonly number[], index: number, samplingSeed: bigint, greedy: boolean): number {
  const base = seedOf(promptIds, 0);
  if (greedy) return base;
  const salt = (Math.imul(index + 1, 0x9e3779b1) ^ Number(BigInt.asUintN(32, samplingSeed))) >>> 0;
  return seedOf(promptIds, salt);
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
