// One engine request as TokenSpeed's scheduler sees it (one choice of a Generate call): prompt,
// sampling limits, the tokens produced so far and how it finished (length, stop token, stop
// string, or an abort carrying its HTTP-like status code). It never schedules itself and never
// writes to the wire.

import { decode, EOS_TOKEN_ID } from '../core/tokens.ts';
import { tokenAt } from './sampler.ts';

export type SeqState = 'held' | 'waiting' | 'running' | 'finished';

export type Finish =
  | { type: 'length' }
  | { type: 'stop'; matched: number | string }
  /** statusCode: the abort's HTTP-like code (400, 408, 429, 504, …); null for plain aborts. */
  | { type: 'abort'; message: string; statusCode: number | null };

export interface SeqParams {
  /** Engine request id: the call's request_id, or `{request_id}-n{i}` for n > 1. */
  rid: string;
  /** Choice index within the call. */
  index: number;
  promptIds: number[];
  /** Hash of the prompt ids (prefix-cache key). */
  promptHash: number;
  seed: number;
  maxNewTokens: number;
  minNewTokens: number;
  stopTokenIds: ReadonlySet<number> | null;
  stopStrings: readonly string[] | null;
  ignoreEos: boolean;
  dpRank: number;
}

export class Sequence {
  state: SeqState = 'held';
  readonly outputIds: number[] = [];
  finish: Finish | null = null;
  cachedTokens = 0;
  /** Pacing: when the sequence (re)started producing and how many tokens it had then. */
  runStartedAt = 0;
  runBase = 0;
  /** Called after new tokens and once at the end (`finish` set). Set by the Generate handler. */
  onUpdate: ((seq: Sequence) => void) | null = null;
  private text = '';

  constructor(readonly params: SeqParams) {
    if (params.maxNewTokens <= 0) this.finish = { type: 'length' };
  }

  get rid(): string {
    return this.params.rid;
  }

  get done(): boolean {
    return this.finish !== null;
  }

  /** Produces one token; true when that token finished the sequence. */
  step(): boolean {
    if (this.finish) return true;
    const p = this.params;
    const id = tokenAt(p.seed, this.outputIds.length);
    this.outputIds.push(id);
    const stopsAllowed = this.outputIds.length >= p.minNewTokens;
    if (stopsAllowed && ((p.stopTokenIds && p.stopTokenIds.has(id)) || (!p.ignoreEos && id === EOS_TOKEN_ID))) {
      this.finish = { type: 'stop', matched: id };
      return true;
    }
    if (p.stopStrings) {
      this.text += decode([id]);
      if (stopsAllowed) {
        for (const s of p.stopStrings) {
          if (s.length > 0 && this.text.endsWith(s)) {
            this.finish = { type: 'stop', matched: s };
            return true;
          }
        }
      }
    }
    if (this.outputIds.length >= p.maxNewTokens) {
      this.finish = { type: 'length' };
      return true;
    }
    return false;
  }
}
