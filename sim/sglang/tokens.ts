// SGLang's toy model over the shared one (sim/core/tokens.ts: byte tokenizer, seeds, the corpus
// walk): its corpus, its logprob salt and its top-k alternatives as SGLang lists them
// (`[logprob, id]` pairs, four decimals). It never touches HTTP or timers.

import { TOKEN_OFFSET, toyModel } from '../core/tokens.ts';

const CORPUS =
  'the quick brown fox jumps over the lazy dog while the small engine keeps writing plain ' +
  'words for every rollout that the trainer asks for, one token at a time, and the weights ' +
  'change only when a refit says so. ';

export const { tokenAt, logprobAt } = toyModel(CORPUS, 0x9e3779b1);

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
