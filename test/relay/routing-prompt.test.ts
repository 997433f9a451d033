// The prompt a request is routed by (src/relay/routing-prompt.ts), as SMG's
// extract_text_for_routing makes it, with token ids kept as ids where the request has them.

import { describe, expect, it } from 'vitest';
import { routingPromptOf } from '../../src/relay/routing-prompt.ts';

describe('routingPromptOf', () => {
  it('/generate: text, or input_ids (a batch flattened)', () => {
    expect(routingPromptOf('/generate', { text: 'hello' })).toEqual({ text: 'hello' });
    expect(routingPromptOf('/generate', { input_ids: [1, 2, 3] })).toEqual({ tokens: [1, 2, 3] });
    expect(routingPromptOf('/generate', { input_ids: [[1, 2], [3]] })).toEqual({ tokens: [1, 2, 3] });
    expect(routingPromptOf('/generate', {})).toEqual({});
  });

  it('/v1/completions: a prompt string, strings joined by spaces, or ids', () => {
    expect(routingPromptOf('/v1/completions', { prompt: 'once upon' })).toEqual({ text: 'once upon' });
    expect(routingPromptOf('/v1/completions', { prompt: ['a', 'b'] })).toEqual({ text: 'a b' });
    expect(routingPromptOf('/v1/completions', { prompt: [5, 6] })).toEqual({ tokens: [5, 6] });
    expect(routingPromptOf('/v1/completions', { prompt: [[5], [6, 7]] })).toEqual({ tokens: [5, 6, 7] });
  });

  it("/v1/chat/completions: every message's text in order, parts and an assistant's reasoning included, by spaces", () => {
    const messages = [
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look at' },
          { type: 'image_url', image_url: { url: 'data:' } },
          { type: 'text', text: 'this' },
        ],
      },
      { role: 'assistant', content: 'done', reasoning_content: 'thought' },
      { role: 'user', content: '' },
      { role: 'tool', content: null },
    ];
    expect(routingPromptOf('/v1/chat/completions', { messages })).toEqual({ text: 'be brief look at this done thought' });
  });

  it('the output bounds: exact with ignore_eos and a token bound, else the bound alone, else none', () => {
    expect(routingPromptOf('/generate', { input_ids: [1, 2], sampling_params: { max_new_tokens: 300, ignore_eos: true } })).toEqual({
      tokens: [1, 2],
      expectedOutputTokens: 300,
      maxOutputTokens: 300,
    });
    expect(routingPromptOf('/generate', { text: 'hi', sampling_params: { max_new_tokens: 64 } })).toEqual({ text: 'hi', maxOutputTokens: 64 });
    expect(routingPromptOf('/generate', { text: 'hi', sampling_params: { ignore_eos: true } })).toEqual({ text: 'hi' });
    expect(routingPromptOf('/v1/completions', { prompt: 'hi', max_tokens: 16, ignore_eos: true })).toEqual({
      text: 'hi',
      expectedOutputTokens: 16,
      maxOutputTokens: 16,
    });
    expect(routingPromptOf('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 8 })).toEqual({
      text: 'x',
      maxOutputTokens: 8,
    });
  });
});
