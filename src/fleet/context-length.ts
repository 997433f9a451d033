// An engine's context length, the most tokens one sequence may hold, read from its discovered (or
// caller-given) labels: `context_length` (SGLang and TokenSpeed server args, the ZMQ handshake's
// `max_model_len`), else TokenSpeed's GetModelInfo `max_context_length`. Pure; undefined when the
// engine never said, and then nothing is capped by it.

import { sizeLabel } from './labels.ts';
import type { Worker } from './worker.ts';

const KEYS = ['context_length', 'max_context_length'] as const;

export function contextLengthOf(worker: Pick<Worker, 'discoveredLabels' | 'callerLabels'>): number | undefined {
  // Read as mergedLabels would (caller labels win) without building the merged object: this runs
  // for every eligible engine of every /generate that sets a token limit.
  for (const key of KEYS) {
    const n = sizeLabel(worker.callerLabels[key] ?? worker.discoveredLabels[key]);
    if (n !== null && n > 0) return n;
  }
  return undefined;
}

/** The smallest context length among `workers` that report one; undefined when none does. */
export function smallestContextLength(workers: Iterable<Pick<Worker, 'discoveredLabels' | 'callerLabels'>>): number | undefined {
  let min: number | undefined;
  for (const w of workers) {
    const n = contextLengthOf(w);
    if (n !== undefined && (min === undefined || n < min)) min = n;
  }
  return min;
}
