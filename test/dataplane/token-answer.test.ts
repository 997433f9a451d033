// TokenAnswer's streamed serialisation (src/http/token-answer.ts): `json(i)` writes exactly the
// bytes `JSON.stringify(object(i))` writes, for every shape an answer takes, while the rid and the
// weight version are serialised once per request (again only when the engine's version changes).

import { afterEach, describe, expect, it, vi } from 'vitest';
import { TokenAnswer, type AnswerContext } from '../../src/relay/token-answer.ts';

/** `e2e_latency` is read from the clock at each call: the one field two calls may not share. */
const sameClock = (s: string) => s.replace(/"e2e_latency":[^,}]+/, '"e2e_latency":0');

function answer(ctx: Partial<AnswerContext> = {}): TokenAnswer {
  return new TokenAnswer({ rid: 'r"1\\ü', dispatchVersion: 'v"dispatch', returnLogprob: false, startedAt: performance.now(), ...ctx });
}

function expectSameBytes(a: TokenAnswer, index: number): void {
  expect(sameClock(a.json(index))).toBe(sameClock(JSON.stringify(a.object(index))));
}

describe('TokenAnswer.json', () => {
  afterEach(() => vi.restoreAllMocks());

  it('one choice: before any token, per chunk, with an engine version, finished', () => {
    const a = answer({ detokenize: (ids) => ids.map((i) => String.fromCharCode(96 + (i % 26))).join('') + '"\n' });
    expectSameBytes(a, 0);
    a.push({ kind: 'chunk', index: 0, tokenIds: [1, 2], promptTokens: 3, completionTokens: 2, cachedTokens: 0 });
    expectSameBytes(a, 0);
    a.push({ kind: 'chunk', index: 0, tokenIds: [3], completionTokens: 3, weightVersion: 'v7' });
    expectSameBytes(a, 0);
    a.push({
      kind: 'complete',
      index: 0,
      outputIds: [1, 2, 3, 4],
      finishReason: { type: 'stop', matched: 4 },
      promptTokens: 3,
      completionTokens: 4,
      cachedTokens: 1,
      weightVersion: 'v8',
    });
    expectSameBytes(a, 0);
    expect(JSON.parse(a.json(0)).meta_info).toMatchObject({ id: 'r"1\\ü', weight_version: 'v8', finish_reason: { type: 'stop', matched: 4 } });
  });

  it('n > 1 (ids `<rid>_<i>`), logprobs (synthesized where missing), an abort, no tokenizer', () => {
    const a = answer({ returnLogprob: true, synthesizeLogprobs: true });
    a.push({ kind: 'chunk', index: 0, tokenIds: [5], logprobs: [-0.5] });
    a.push({ kind: 'chunk', index: 1, tokenIds: [6, 7] });
    for (const i of [0, 1]) expectSameBytes(a, i);
    expect(JSON.parse(a.json(1)).meta_info.id).toBe('r"1\\ü_1');
    a.abort('engine went away');
    for (const i of [0, 1]) expectSameBytes(a, i);
    expect(JSON.parse(a.json(0)).meta_info.output_token_logprobs).toEqual([[-0.5, 5, null]]);
  });

  it('a matched stop string is trimmed from `text` unless no_stop_trim', () => {
    const decode = (ids: number[]) => ids.map((i) => 'abcdefgh'[i]).join('');
    for (const trimStop of [true, false]) {
      const a = answer({ detokenize: decode, trimStop });
      a.push({ kind: 'chunk', index: 0, tokenIds: [0, 1, 2, 3] });
      expect(a.object(0).text).toBe('abcd');
      a.push({
        kind: 'complete',
        index: 0,
        outputIds: [0, 1, 2, 3],
        finishReason: { type: 'stop', matched: 'cd' },
        promptTokens: 1,
        completionTokens: 4,
        cachedTokens: 0,
      });
      expect(a.object(0).text).toBe(trimStop ? 'ab' : 'abcd');
      expectSameBytes(a, 0);
    }
  });

  it('the version and the rid are serialised once for a whole stream, not per chunk', () => {
    const a = answer();
    const spy = vi.spyOn(JSON, 'stringify');
    for (let i = 0; i < 50; i++) {
      a.push({ kind: 'chunk', index: 0, tokenIds: [i] });
      a.json(0);
    }
    const of = (v: string) => spy.mock.calls.filter(([x]) => x === v).length;
    expect(of('v"dispatch')).toBe(1);
    expect(of('r"1\\ü')).toBe(0); // serialised in the constructor, before the spy
    a.push({ kind: 'chunk', index: 0, tokenIds: [99], weightVersion: 'v9' });
    a.json(0);
    a.json(0);
    expect(of('v9')).toBe(1);
  });
});

describe('TokenAnswer.settle: what the router is told', () => {
  const done = (index: number, prompt: number, cached: number, out: number[]) =>
    ({
      kind: 'complete',
      index,
      outputIds: out,
      finishReason: { type: 'length', length: out.length },
      promptTokens: prompt,
      completionTokens: out.length,
      cachedTokens: cached,
    }) as const;

  it('a whole answer: answered, its counts summed over the choices', () => {
    const a = answer();
    a.push(done(0, 400, 384, [1, 2, 3]));
    a.push(done(1, 400, 400, [4, 5]));
    const into = { answered: false };
    a.settle(into);
    expect(into).toEqual({ answered: true, promptTokens: 800, cachedTokens: 784, completionTokens: 5 });
  });

  it('an abort partial or an unfinished stream is not answered; its counts so far are kept', () => {
    const a = answer();
    a.push({ kind: 'chunk', index: 0, tokenIds: [1, 2], promptTokens: 300, completionTokens: 2, cachedTokens: 16 });
    const running = { answered: true };
    a.settle(running);
    expect(running).toEqual({ answered: false, promptTokens: 300, cachedTokens: 16, completionTokens: 2 });
    a.abort('engine went away');
    const aborted = { answered: true };
    a.settle(aborted);
    expect(aborted.answered).toBe(false);
  });

  it('no event at all: not answered, no counts', () => {
    const into = { answered: true };
    answer().settle(into);
    expect(into).toEqual({ answered: false });
  });
});
