// Builds SGLang-shaped /generate answers (spec/slime-data-plane.md §5.1) from the token events of
// a non-HTTP engine: one object per choice, cumulative while streaming, an abort partial with
// `finish_reason.type: "abort"` when the engine aborts mid-stream, `text` detokenized when the
// engine's tokenizer is known. Pure: no I/O, no routing.

import type { FinishReason, TokenEvent } from '../engines/generation.ts';

export interface AnswerContext {
  rid: string;
  /** The version attributed at dispatch (table, else label, else "default"): used when the engine stamps none. */
  dispatchVersion: string;
  returnLogprob: boolean;
  /** Tokens the engine gave no logprob for answer 0.0 (`--synthesize-logprobs`); else see `lacksLogprobs`. */
  synthesizeLogprobs?: boolean;
  /** The engine tokenizer's decode (skip_special_tokens applied); absent: `text` is "". */
  detokenize?: (ids: number[]) => string;
  startedAt: number;
}

interface Choice {
  outputIds: number[];
  logprobs: number[];
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  weightVersion: string | undefined;
  finish: FinishReason | null;
  /** The last decode, reused while no token arrives (a streamed event may only bump counters). */
  decoded: { ids: number; text: string } | undefined;
}

export class TokenAnswer {
  private readonly choices = new Map<number, Choice>();

  constructor(private readonly ctx: AnswerContext) {}

  /** Folds one event in; returns the index of the choice it touched. */
  push(ev: TokenEvent): number {
    const c = this.choice(ev.index);
    if (ev.kind === 'chunk') {
      c.outputIds.push(...ev.tokenIds);
      if (ev.logprobs) c.logprobs.push(...ev.logprobs);
      if (ev.promptTokens !== undefined) c.promptTokens = ev.promptTokens;
      c.completionTokens = ev.completionTokens ?? c.outputIds.length;
      if (ev.cachedTokens !== undefined) c.cachedTokens = ev.cachedTokens;
    } else {
      // Streamed completes may repeat only the last step's ids (src/sim/NOTES.md): the chunks
      // already delivered are the whole output when they are longer.
      if (ev.outputIds.length >= c.outputIds.length) {
        c.outputIds = [...ev.outputIds];
        c.decoded = undefined;
        if (ev.logprobs) c.logprobs = [...ev.logprobs];
      }
      c.promptTokens = ev.promptTokens;
      c.completionTokens = ev.completionTokens;
      c.cachedTokens = ev.cachedTokens;
      c.finish = ev.finishReason;
    }
    if (ev.weightVersion !== undefined) c.weightVersion = ev.weightVersion;
    return ev.index;
  }

  /** The engine aborted (or vanished) mid-stream: every unfinished choice ends as an abort partial. */
  abort(message: string): void {
    if (this.choices.size === 0) this.choice(0);
    for (const c of this.choices.values()) c.finish ??= { type: 'abort', message };
  }

  /**
   * `return_logprob` was asked, the engine gave tokens without logprobs (TokenSpeed without
   * `--enable-output-logprobs`) and synthesis is off: the answer cannot be honest (slime §5.1).
   */
  get lacksLogprobs(): boolean {
    if (!this.ctx.returnLogprob || this.ctx.synthesizeLogprobs) return false;
    for (const c of this.choices.values()) if (c.logprobs.length < c.outputIds.length) return true;
    return false;
  }

  get done(): boolean {
    return this.choices.size > 0 && [...this.choices.values()].every((c) => c.finish !== null);
  }

  /** One SGLang object for one choice (streamed chunks and the buffered answer share the shape). */
  object(index: number): Record<string, unknown> {
    const c = this.choice(index);
    const meta: Record<string, unknown> = {
      id: this.choices.size > 1 || index > 0 ? `${this.ctx.rid}_${index}` : this.ctx.rid,
      finish_reason: c.finish,
      prompt_tokens: c.promptTokens,
      completion_tokens: c.completionTokens,
      cached_tokens: c.cachedTokens,
      // Engine-reported first; else what the gateway attributed at dispatch (spec §12.1).
      weight_version: c.weightVersion ?? this.ctx.dispatchVersion,
      e2e_latency: (performance.now() - this.ctx.startedAt) / 1000,
    };
    if (this.ctx.returnLogprob) {
      // Without synthesis the relay never answers a choice that lacks logprobs (lacksLogprobs).
      meta.output_token_logprobs = c.outputIds.map((id, i) => [c.logprobs[i] ?? 0.0, id, null]);
    }
    return { text: this.text(c), output_ids: c.outputIds, meta_info: meta };
  }

  /**
   * The cumulative text of a choice. Until it finishes, a trailing U+FFFD (a character whose
   * bytes have not all arrived) is held back, as SGLang's incremental detokenizer does, so each
   * streamed `text` extends the one before.
   */
  private text(c: Choice): string {
    if (!this.ctx.detokenize) return '';
    if (c.decoded?.ids !== c.outputIds.length) c.decoded = { ids: c.outputIds.length, text: this.ctx.detokenize(c.outputIds) };
    return c.finish === null ? c.decoded.text.replace(/\uFFFD+$/, '') : c.decoded.text;
  }

  /** The buffered answer: one object for one choice, a list for n > 1 (SGLang's rule). */
  answer(): Record<string, unknown> | Array<Record<string, unknown>> {
    const indexes = [...this.choices.keys()].sort((a, b) => a - b);
    if (indexes.length <= 1) return this.object(indexes[0] ?? 0);
    return indexes.map((i) => this.object(i));
  }

  private choice(index: number): Choice {
    let c = this.choices.get(index);
    if (!c) {
      c = { outputIds: [], logprobs: [], promptTokens: 0, completionTokens: 0, cachedTokens: 0, weightVersion: undefined, finish: null, decoded: undefined };
      this.choices.set(index, c);
    }
    return c;
  }
}
