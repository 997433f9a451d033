// One generate() call on the ZMQ lane as an async stream of TokenEvents: the choices' output
// slices come in (pushed by the lane's output loop), token chunks and completions go out, in
// order, to one pulling consumer. Owns the per-choice accumulation (whole output, logprobs) and
// the mapping of TokenSpeed finish strings; never touches sockets.

import { GenerationError, type FinishReason, type TokenEvent } from '../generation.ts';
import type { RequestOutput } from './wire.ts';

interface Choice {
  rid: string;
  index: number;
  outputIds: number[];
  logprobs: number[];
  done: boolean;
}

export class RequestStream implements AsyncIterator<TokenEvent> {
  private readonly choices: Choice[];
  private readonly queue: TokenEvent[] = [];
  private error: unknown = null;
  private finished = false;
  private emitted = 0;
  private wake: (() => void) | null = null;

  constructor(
    rids: readonly string[],
    private readonly stream: boolean,
    private readonly returnLogprob: boolean,
  ) {
    this.choices = rids.map((rid, index) => ({ rid, index, outputIds: [], logprobs: [], done: false }));
  }

  /** Rids whose choice has not reached a terminal output yet. */
  pending(): string[] {
    return this.choices.filter((c) => !c.done).map((c) => c.rid);
  }

  /** True once the stream ended (all complete, or failed). */
  get settled(): boolean {
    return this.finished || this.error !== null;
  }

  /** One output slice of choice `index`, in engine order. */
  push(index: number, out: RequestOutput): void {
    const c = this.choices[index];
    if (c.done || this.settled) return;
    const ids = out.outputIds;
    const lps = this.returnLogprob && out.logprobs.length === ids.length ? out.logprobs : undefined;
    for (const id of ids) c.outputIds.push(id);
    if (lps) for (const lp of lps) c.logprobs.push(lp);
    if (this.stream && ids.length > 0) {
      this.emit({
        kind: 'chunk',
        index,
        tokenIds: ids,
        ...(lps ? { logprobs: lps } : {}),
        promptTokens: out.promptTokens,
        completionTokens: out.completionTokens,
        cachedTokens: out.cachedTokens,
      });
    }
    if (out.finished === '') return;
    c.done = true;
    const reason = finishReason(out);
    if (reason === null) {
      this.fail(new GenerationError('internal', `engine finished request \`${c.rid}\` with unknown reason \`${out.finished}\``, this.emitted === 0));
      return;
    }
    if (reason.type === 'abort') {
      // The partial tokens went out as chunks; the consumer builds the abort partial from them.
      this.fail(new GenerationError('aborted', `engine aborted request \`${c.rid}\``, this.emitted === 0));
      return;
    }
    this.emit({
      kind: 'complete',
      index,
      outputIds: c.outputIds,
      ...(this.returnLogprob && c.logprobs.length === c.outputIds.length ? { logprobs: c.logprobs } : {}),
      finishReason: reason,
      promptTokens: out.promptTokens,
      completionTokens: out.completionTokens,
      cachedTokens: out.cachedTokens,
    });
    if (this.choices.every((x) => x.done)) {
      this.finished = true;
      this.poke();
    }
  }

  /** Ends the stream with `err` after the events already queued. The first failure wins. */
  fail(err: unknown): void {
    if (this.settled) return;
    this.error = err;
    this.poke();
  }

  /** A GenerationError('unavailable') that knows whether anything was emitted yet. */
  unavailable(message: string): GenerationError {
    return new GenerationError('unavailable', message, this.emitted === 0);
  }

  private emit(ev: TokenEvent): void {
    this.emitted++;
    this.queue.push(ev);
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  async next(): Promise<IteratorResult<TokenEvent>> {
    for (;;) {
      const ev = this.queue.shift();
      if (ev) return { value: ev, done: false };
      if (this.error !== null) throw this.error;
      if (this.finished) return { value: undefined, done: true };
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}

/** TokenSpeed's finish strings; null for one this client does not know. */
function finishReason(out: RequestOutput): FinishReason | null {
  switch (out.finished) {
    case 'stop':
      return { type: 'stop', matched: null }; // the slim batch does not say which stop matched
    case 'length':
      return { type: 'length', length: out.completionTokens };
    case 'abort':
      return { type: 'abort', message: 'aborted by the engine' };
    default:
      return null;
  }
}
