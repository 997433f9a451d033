// Builds SGLang-shaped /generate answers from the token events of
// a non-HTTP engine: one object per choice, cumulative while streaming, an abort partial with
// `finish_reason.type: "abort"` when the engine aborts mid-stream, `text` detokenized when the
// engine's tokenizer is known (a matched stop string trimmed off, as SGLang does). Streamed chunks
// are serialised with the request's constant fragments (rid, version) built once. Pure: no I/O.

import type { FinishReason, TokenEvent } from '../engines/generation.ts';
import type { RequestOutcome } from '../fleet/policies/policy.ts';

export interface AnswerContext {
  rid: string;
  /** The version attributed at dispatch (table, else label, else "default"): used when the engine stamps none. */
  dispatchVersion: string;
  returnLogprob: boolean;
  /** Tokens the engine gave no logprob for answer 0.0 (`--synthesize-logprobs`); else see `lacksLogprobs`. */
  synthesizeLogprobs?: boolean;
  /** The engine tokenizer's decode (skip_special_tokens applied); absent: `text` is "". */
  detokenize?: (ids: number[]) => string;
  /** A choice that stopped on a string stop loses it from `text` (SGLang's default; off with `no_stop_trim`). */
  trimStop?: boolean;
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
  /** `"<rid>"`, serialised once; choice ids append `_<index>` inside the quotes. */
  private readonly ridJson: string;
  /** The last version serialised, and its JSON: versions rarely change within a request. */
  private versionJson = { version: '', json: '""' };

  constructor(private readonly ctx: AnswerContext) {
    this.ridJson = JSON.stringify(ctx.rid);
  }

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
      // Streamed completes may repeat only the last step's ids (sim/NOTES.md): the chunks
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
   * `--enable-output-logprobs`) and synthesis is off: the answer cannot be honest.
   */
  get lacksLogprobs(): boolean {
    if (!this.ctx.returnLogprob || this.ctx.synthesizeLogprobs) return false;
    for (const c of this.choices.values()) if (c.logprobs.length < c.outputIds.length) return true;
    return false;
  }

  get done(): boolean {
    return this.choices.size > 0 && [...this.choices.values()].every((c) => c.finish !== null);
  }

  /**
   * What the answer tells the router (its policy's bookkeeping, the per-worker prefix-hit
   * figures): the counts summed over the choices, and `answered` when every choice ended on its
   * own (an abort partial, a cut-off stream say nothing of the engine's speed).
   */
  settle(into: RequestOutcome): void {
    let prompt = 0;
    let cached = 0;
    let completion = 0;
    for (const c of this.choices.values()) {
      prompt += c.promptTokens;
      cached += c.cachedTokens;
      completion += c.completionTokens;
    }
    into.answered = this.done && [...this.choices.values()].every((c) => c.finish!.type !== 'abort');
    if (this.choices.size === 0) return;
    into.promptTokens = prompt;
    into.cachedTokens = cached;
    into.completionTokens = completion;
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
      // Engine-reported first; else what the gateway attributed at dispatch.
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
   * `JSON.stringify(this.object(index))`, byte for byte, for one streamed chunk: the rid and the
   * version come from fragments serialised once per request, only what changes is serialised.
   */
  json(index: number): string {
    const c = this.choice(index);
    const id = this.choices.size > 1 || index > 0 ? `${this.ridJson.slice(0, -1)}_${index}"` : this.ridJson;
    const version = c.weightVersion ?? this.ctx.dispatchVersion;
    if (this.versionJson.version !== version) this.versionJson = { version, json: JSON.stringify(version) };
    let out = `{"text":${JSON.stringify(this.text(c))},"output_ids":${JSON.stringify(c.outputIds)},"meta_info":{"id":${id}`;
    out += `,"finish_reason":${JSON.stringify(c.finish)}`;
    out += numberField('prompt_tokens', c.promptTokens) + numberField('completion_tokens', c.completionTokens) + numberField('cached_tokens', c.cachedTokens);
    out += `,"weight_version":${this.versionJson.json}`;
    out += numberField('e2e_latency', (performance.now() - this.ctx.startedAt) / 1000);
    if (this.ctx.returnLogprob) out += `,"output_token_logprobs":${JSON.stringify(c.outputIds.map((tid, i) => [c.logprobs[i] ?? 0.0, tid, null]))}`;
    return `${out}}}`;
  }

  /**
   * The cumulative text of a choice. Until it finishes, a trailing U+FFFD (a character whose
   * bytes have not all arrived) is held back, as SGLang's incremental detokenizer does, so each
   * streamed `text` extends the one before.
   */
  private text(c: Choice): string {
    if (!this.ctx.detokenize) return '';
    if (c.decoded?.ids !== c.outputIds.length) c.decoded = { ids: c.outputIds.length, text: this.ctx.detokenize(c.outputIds) };
    if (c.finish === null) return c.decoded.text.replace(/\uFFFD+$/, '');
    const matched = c.finish.type === 'stop' ? c.finish.matched : null;
    // The engine matched the stop on the text it decoded: it ends the output (SGLang trims it).
    if (this.ctx.trimStop && typeof matched === 'string' && matched !== '' && c.decoded.text.endsWith(matched)) {
      return c.decoded.text.slice(0, -matched.length);
    }
    return c.decoded.text;
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

/** `,"name":<value>` as JSON.stringify writes a number property (an absent one is left out). */
function numberField(name: string, v: number | undefined): string {
  return v === undefined ? '' : `,"${name}":${JSON.stringify(v)}`;
}
