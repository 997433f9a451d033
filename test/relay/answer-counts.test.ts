// Token counts read off an answer's last bytes (src/relay/answer-counts.ts): SGLang's meta_info and
// OpenAI's usage alike; a streamed answer's last event wins; a count absent stays unknown.
import { describe, expect, it } from 'vitest';
import type { RequestOutcome } from '../../src/fleet/policies/policy.ts';
import { readAnswerCounts } from '../../src/relay/answer-counts.ts';

const read = (...chunks: Array<string | undefined>) => {
  const o: RequestOutcome = { answered: true };
  readAnswerCounts(
    chunks.map((c) => (c === undefined ? undefined : Buffer.from(c))),
    o,
  );
  return o;
};

describe('answer counts', () => {
  it("a buffered SGLang answer: its meta_info's three counts", () => {
    const body = JSON.stringify({ text: 'x', meta_info: { prompt_tokens: 120, completion_tokens: 33, cached_tokens: 96, e2e_latency: 0.1 } });
    expect(read(body)).toEqual({ answered: true, promptTokens: 120, cachedTokens: 96, completionTokens: 33 });
  });

  it('a stream: the last event of the newest chunk that has them ([DONE] alone in the last chunk)', () => {
    const events = [1, 2, 3].map((n) => `data: ${JSON.stringify({ meta_info: { prompt_tokens: 10, completion_tokens: n, cached_tokens: 8 } })}\n\n`).join('');
    expect(read('data: [DONE]\n\n', events)).toEqual({ answered: true, promptTokens: 10, cachedTokens: 8, completionTokens: 3 });
  });

  it('OpenAI usage, with the cached count in prompt_tokens_details; spaces after the colon', () => {
    expect(read('{"usage": {"prompt_tokens": 7, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}}')).toEqual({
      answered: true,
      promptTokens: 7,
      cachedTokens: 0,
      completionTokens: 2,
    });
  });

  it('counts that are not there, or not numbers, stay unknown', () => {
    expect(read('{"meta_info": {"prompt_tokens": null}}')).toEqual({ answered: true });
    expect(read(undefined, undefined)).toEqual({ answered: true });
  });
});
