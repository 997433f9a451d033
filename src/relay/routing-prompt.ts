// The prompt a data-plane request is routed by, for the policies that read one (cache_aware,
// prefix_hash, least_load): token ids where the request carries them (`input_ids`, an OpenAI prompt
// of ids; a batch flattened, as SMG joins it), else its text, as SMG's `extract_text_for_routing`
// makes it: `text`; a completion's prompt, a list joined by spaces; a chat's messages' text (the
// text parts of each, an assistant's reasoning after its content), joined by spaces. Never what is
// sent to an engine: that is the body as received, or the relays' own shaping.

import type { DataPlanePath } from './data-plane-input.ts';

export interface RoutingPrompt {
  text?: string;
  tokens?: readonly number[];
  /** `ignore_eos` with a token bound: exactly that many output tokens. */
  expectedOutputTokens?: number;
  /** The request's bound on output tokens (`max_new_tokens`; the OpenAI routes' `max_tokens`, `max_completion_tokens`). */
  maxOutputTokens?: number;
}

/** The routing prompt of a body `checkDataPlaneBody` accepted for `path`, with its output bounds. */
export function routingPromptOf(path: DataPlanePath, body: Record<string, unknown>): RoutingPrompt {
  const prompt = promptOf(path, body);
  const sp = path === '/generate' ? body.sampling_params : body;
  if (!sp || typeof sp !== 'object' || Array.isArray(sp)) return prompt;
  const o = sp as Record<string, unknown>;
  const max = [o.max_new_tokens, o.max_completion_tokens, o.max_tokens].find((v) => Number.isInteger(v) && (v as number) >= 0) as number | undefined;
  if (max === undefined) return prompt;
  return o.ignore_eos === true ? { ...prompt, expectedOutputTokens: max, maxOutputTokens: max } : { ...prompt, maxOutputTokens: max };
}

function promptOf(path: DataPlanePath, body: Record<string, unknown>): RoutingPrompt {
  if (path === '/generate') {
    if (typeof body.text === 'string') return { text: body.text };
    return idsOf(body.input_ids) ?? {};
  }
  if (path === '/v1/completions') {
    const prompt = body.prompt;
    if (typeof prompt === 'string') return { text: prompt };
    return idsOf(prompt) ?? (Array.isArray(prompt) ? { text: prompt.filter((p) => typeof p === 'string').join(' ') } : {});
  }
  return { text: chatText(body.messages) };
}

/** Ids, or a batch of them flattened; undefined for anything else. */
function idsOf(v: unknown): RoutingPrompt | undefined {
  if (!Array.isArray(v) || v.length === 0) return undefined;
  if (typeof v[0] === 'number') return { tokens: v as number[] };
  if (Array.isArray(v[0])) return { tokens: (v as unknown[]).flatMap((row) => (Array.isArray(row) ? (row as number[]) : [])) };
  return undefined;
}

function chatText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  const pieces: string[] = [];
  for (const m of messages) {
    if (!m || typeof m !== 'object') continue;
    const { content, reasoning_content: reasoning } = m as { content?: unknown; reasoning_content?: unknown };
    if (typeof content === 'string') {
      if (content !== '') pieces.push(content);
    } else if (Array.isArray(content)) {
      for (const part of content) {
        const text = part && typeof part === 'object' && (part as { type?: unknown }).type === 'text' ? (part as { text?: unknown }).text : undefined;
        if (typeof text === 'string' && text !== '') pieces.push(text);
      }
    }
    if (typeof reasoning === 'string' && reasoning !== '') pieces.push(reasoning);
  }
  return pieces.join(' ');
}
