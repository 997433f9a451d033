// The token limits a data-plane request asks for (`sampling_params.max_new_tokens` on /generate,
// `max_tokens` and `max_completion_tokens` on the OpenAI routes), checked before any engine is
// called: each must be a non-negative integer and at most the model's context length, or the
// request is a 400 naming the field. HTTP bodies go up as received, so a limit is refused, never
// rewritten. Pure: the caller finds the context length (generate.ts).

import { GatewayError } from '../api/errors.ts';
import type { DataPlanePath } from './data-plane-input.ts';

export interface TokenLimit {
  /** JSON pointer of the field, as errors name it. */
  field: string;
  value: number;
}

function limitOf(v: unknown, field: string, out: TokenLimit[]): void {
  if (v === undefined || v === null) return;
  // JSON.parse reads 1e400 as Infinity, which is no integer; 1e308 is one, and past any context.
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw new GatewayError('invalid_request', `\`${field.slice(1).replace(/\//g, '.')}\` must be a non-negative integer`, { field });
  }
  out.push({ field, value: v });
}

/** The token limits `body` sets (none: empty), each checked to be a non-negative integer. */
export function tokenLimitsOf(path: DataPlanePath, body: Record<string, unknown>): TokenLimit[] {
  const out: TokenLimit[] = [];
  if (path === '/generate') {
    const sp = body.sampling_params;
    // SGLang's batch form takes one sampling object per prompt.
    if (Array.isArray(sp))
      sp.forEach((one, i) => limitOf((one as Record<string, unknown> | null)?.max_new_tokens, `/sampling_params/${i}/max_new_tokens`, out));
    else if (sp && typeof sp === 'object') limitOf((sp as Record<string, unknown>).max_new_tokens, '/sampling_params/max_new_tokens', out);
  } else {
    limitOf(body.max_tokens, '/max_tokens', out);
    limitOf(body.max_completion_tokens, '/max_completion_tokens', out);
  }
  return out;
}

/** Refuses the first limit past `contextLength`; nothing is capped when it is unknown. */
export function checkTokenLimits(limits: readonly TokenLimit[], contextLength: number | undefined): void {
  if (contextLength === undefined) return;
  for (const { field, value } of limits) {
    if (value > contextLength) {
      throw new GatewayError(
        'invalid_request',
        `\`${field.slice(1).replace(/\//g, '.')}\` is ${value}, beyond the model's context length of ${contextLength} tokens`,
        { field, limit: contextLength },
      );
    }
  }
}
