// The token counts of an engine's answer, read off its last bytes without parsing them: SGLang's
// `meta_info` and the OpenAI routes' `usage` both spell `"prompt_tokens"`, `"completion_tokens"`
// and `"cached_tokens"` (OpenAI's inside `prompt_tokens_details`). A streamed answer repeats them
// in every event, so the last occurrence is the answer's. For the routing policy's bookkeeping and
// the per-worker prefix-hit figures; never what the caller receives.

import type { RequestOutcome } from '../fleet/policies/policy.ts';

const KEYS = {
  promptTokens: Buffer.from('"prompt_tokens"'),
  cachedTokens: Buffer.from('"cached_tokens"'),
  completionTokens: Buffer.from('"completion_tokens"'),
};

/** The integer after the last `"key"` and its colon in `buf`, or undefined. */
function lastNumber(buf: Buffer, key: Buffer): number | undefined {
  const at = buf.lastIndexOf(key);
  if (at < 0) return undefined;
  let i = at + key.length;
  while (i < buf.length && (buf[i] === 0x20 || buf[i] === 0x3a)) i++; // spaces and the colon
  let n = 0;
  let digits = 0;
  for (; i < buf.length && buf[i]! >= 0x30 && buf[i]! <= 0x39 && digits < 15; i++, digits++) n = n * 10 + (buf[i]! - 0x30);
  return digits > 0 ? n : undefined;
}

/**
 * Fills `into` with the counts found in the answer's last chunks (newest first): each count from
 * the newest chunk that has it. A key cut in two by a chunk boundary is missed, and stays unknown.
 */
export function readAnswerCounts(chunks: ReadonlyArray<Buffer | undefined>, into: RequestOutcome): void {
  for (const k of ['promptTokens', 'cachedTokens', 'completionTokens'] as const) {
    for (const c of chunks) {
      if (!c) continue;
      const v = lastNumber(c, KEYS[k]);
      if (v !== undefined) {
        into[k] = v;
        break;
      }
    }
  }
}
