// One generation request as the scheduler sees it (SGLang's `Req`): prompt, sampling limits,
// the tokens produced so far and how it finished. It decides when it is done (length, stop token,
// stop string); it never schedules itself and never writes HTTP.

import { EOS_TOKEN_ID, tokenText } from '../core/tokens.ts';
import { tokenAt } from './tokens.ts';

export type SeqState = 'held' | 'waiting' | 'running' | 'finished';

export type FinishReason =
  | { type: 'length'; length: number }
  | { type: 'stop'; matched: number | string }
  | { type: 'abort'; message: string; status_code: null; err_type: null };

export interface SeqParams {
  rid: string;
  promptIds: number[];
  /** Hash of the prompt ids (prefix-cache key, sampler seed base). */
  promptHash: number;
  /** Sampler seed: the prompt hash mixed with the sample index unless greedy. */
  seed: number;
  maxNewTokens: number;
  minNewTokens: number;
  stopTokenIds: ReadonlySet<number> | null;
  stopStrings: readonly string[] | null;
  noStopTrim: boolean;
  ignoreEos: boolean;
  dpRank: number;
}

export function abortReason(message: string): FinishReason {
  return { type: 'abort', message, status_code: null, err_type: null };
}

export class Sequence {
  state: SeqState = 'held';
  readonly outputIds: number[] = [];
  /** Decoded output, with a matched stop string trimmed unless `no_stop_trim`. */
  text = '';
  finishReason: FinishReason | null = null;
  cachedTokens = 0;
  retractions = 0;
  readonly receivedAt = performance.now();
  /** Pacing: when the sequence (re)started running and how many tokens it had then. */
  runStartedAt = 0;
  runBase = 0;
  /** Called after new tokens and once at the end (finishReason set). Set by the HTTP layer. */
  onUpdate: ((seq: Sequence) => void) | null = null;

  constructor(readonly params: SeqParams) {
    if (params.maxNewTokens <= 0) this.finishReason = { type: 'length', length: 0 };
  }

  get rid(): string {
    return this.params.rid;
  }

  get done(): boolean {
    return this.finishReason !== null;
  }

  /** Produces one token. Returns true when that token finished the sequence. */
  step(): boolean {
    if (this.finishReason) return true;
    const p = this.params;
    const i = this.outputIds.length;
    const id = tokenAt(p.seed, i);
    this.outputIds.push(id);
    const stopsAllowed = this.outputIds.length >= p.minNewTokens;
    if (stopsAllowed && ((p.stopTokenIds && p.stopTokenIds.has(id)) || (!p.ignoreEos && id === EOS_TOKEN_ID))) {
      this.finishReason = { type: 'stop', matched: id };
      return true;
    }
    this.text += tokenText(id);
    if (stopsAllowed && p.stopStrings) {
      for (const s of p.stopStrings) {
        if (s.length > 0 && this.text.endsWith(s)) {
          if (!p.noStopTrim) this.text = this.text.slice(0, this.text.length - s.length);
          this.finishReason = { type: 'stop', matched: s };
          return true;
        }
      }
    }
    if (this.outputIds.length >= p.maxNewTokens) {
      this.finishReason = { type: 'length', length: p.maxNewTokens };
      return true;
    }
    return false;
  }
}
