// One generation request as a simulated scheduler sees it (SGLang's `Req`, one choice of a
// TokenSpeed Generate call, one ADD on the ZMQ lane): prompt, sampling limits, the tokens produced
// so far and how it finished. It decides when it is done (length, stop token, stop string); it
// never schedules itself and never writes to a wire: each wire renders `finish` its own way.

import { EOS_TOKEN_ID, tokenText } from './tokens.ts';

export type SeqState = 'held' | 'waiting' | 'running' | 'finished';

export type Finish =
  | { type: 'length' }
  | { type: 'stop'; matched: number | string }
  /** statusCode: the abort's HTTP-like code (400, 408, 429, 504, …); null for plain aborts. */
  | { type: 'abort'; message: string; statusCode: number | null };

export type AbortFinish = Extract<Finish, { type: 'abort' }>;

export function abortFinish(message: string, statusCode: number | null = null): AbortFinish {
  return { type: 'abort', message, statusCode };
}

export interface SeqParams {
  /** Engine request id. */
  rid: string;
  promptIds: number[];
  /** Hash of the prompt ids (prefix-cache key). */
  promptHash: number;
  /** Sampler seed. */
  seed: number;
  maxNewTokens: number;
  minNewTokens: number;
  stopTokenIds: ReadonlySet<number> | null;
  stopStrings: readonly string[] | null;
  /** Keep a matched stop string at the end of `text`. */
  noStopTrim: boolean;
  ignoreEos: boolean;
  dpRank: number;
}

/** The simulator's model: the i-th generated token of a sequence with this seed. */
export type TokenAt = (seed: number, i: number) => number;

export class Sequence {
  state: SeqState = 'held';
  readonly outputIds: number[] = [];
  /** Decoded output, with a matched stop string trimmed unless `noStopTrim`. */
  text = '';
  finish: Finish | null = null;
  cachedTokens = 0;
  /** Times a retracting pause sent it back to the waiting queue. */
  retractions = 0;
  readonly receivedAt = performance.now();
  /** Pacing: when the sequence (re)started running and how many tokens it had then. */
  runStartedAt = 0;
  runBase = 0;
  /**
   * The output length at which the model emits its end-of-sequence token (set by the realistic
   * cost model when `ignore_eos` is off); null: the corpus walk never ends by itself.
   */
  eosAt: number | null = null;
  /** Called after new tokens and once at the end (`finish` set). Set by the wire's handler. */
  onUpdate: ((seq: Sequence) => void) | null = null;

  constructor(
    readonly params: SeqParams,
    private readonly tokenAt: TokenAt,
  ) {
    if (params.maxNewTokens <= 0) this.finish = { type: 'length' };
  }

  get rid(): string {
    return this.params.rid;
  }

  get done(): boolean {
    return this.finish !== null;
  }

  /** Produces one token. Returns true when that token finished the sequence. */
  step(): boolean {
    if (this.finish) return true;
    const p = this.params;
    const id = this.eosAt === this.outputIds.length + 1 ? EOS_TOKEN_ID : this.tokenAt(p.seed, this.outputIds.length);
    this.outputIds.push(id);
    const stopsAllowed = this.outputIds.length >= p.minNewTokens;
    if (stopsAllowed && ((p.stopTokenIds && p.stopTokenIds.has(id)) || (!p.ignoreEos && id === EOS_TOKEN_ID))) {
      this.finish = { type: 'stop', matched: id };
      return true;
    }
    this.text += tokenText(id);
    if (stopsAllowed && p.stopStrings) {
      for (const s of p.stopStrings) {
        if (s.length > 0 && this.text.endsWith(s)) {
          if (!p.noStopTrim) this.text = this.text.slice(0, this.text.length - s.length);
          this.finish = { type: 'stop', matched: s };
          return true;
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
