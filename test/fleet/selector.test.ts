import { describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { SelectorSyntaxError, matchesSelector, parseSelector, selectorFromQuery } from '../../src/fleet/selector.ts';

function syntaxError(text: string): SelectorSyntaxError {
  try {
    parseSelector(text);
  } catch (err) {
    if (err instanceof SelectorSyntaxError) return err;
    throw err;
  }
  throw new Error(`expected ${JSON.stringify(text)} to be rejected`);
}

describe('parseSelector', () => {
  // SMG's ten invalid inputs and their exact byte offsets.
  it.each([
    ['', 0],
    ['=x', 0],
    ['engine', 6],
    ['engine==x', 7],
    ['engine in x', 10],
    ['engine in (a,', 13],
    ['engine=a b', 9],
    ['engine="unterminated', 20],
    ['engine=a,', 9],
    ['engine=', 7],
  ])('rejects %j at byte %i', (text, offset) => {
    const err = syntaxError(text);
    expect(err.offset).toBe(offset);
    expect(err.reason.length).toBeGreaterThan(0);
  });

  it.each([
    ['engine in (sglang, "v llm")', [{ key: 'engine', op: 'in', values: ['sglang', 'v llm'] }]],
    ['role!=reward', [{ key: 'role', op: '!=', values: ['reward'] }]],
    ['id notin (a,b)', [{ key: 'id', op: 'notin', values: ['a', 'b'] }]],
    ['engine in(sglang,vllm)', [{ key: 'engine', op: 'in', values: ['sglang', 'vllm'] }]],
    [
      '  engine = sglang ,  role = policy  ',
      [
        { key: 'engine', op: '=', values: ['sglang'] },
        { key: 'role', op: '=', values: ['policy'] },
      ],
    ],
    [
      'model=Qwen/Qwen3-8B, tp_size=1',
      [
        { key: 'model', op: '=', values: ['Qwen/Qwen3-8B'] },
        { key: 'tp_size', op: '=', values: ['1'] },
      ],
    ],
    ['url=http://rollout:30000', [{ key: 'url', op: '=', values: ['http://rollout:30000'] }]],
    ['q="say \\"hi\\" \\\\ ok"', [{ key: 'q', op: '=', values: ['say "hi" \\ ok'] }]],
    ['model_path="/models/a,b"', [{ key: 'model_path', op: '=', values: ['/models/a,b'] }]],
  ])('parses %j', (text, terms) => {
    const sel = parseSelector(text);
    expect(sel.text).toBe(text);
    expect(sel.terms).toEqual(terms);
  });

  it.each([
    ['engine notin(a)x', 'a trailing token after a list'],
    ['engine="a\\nb"', 'an escape other than \\" and \\\\'],
    ['engine in ()', 'an empty list'],
    ['engine inx', 'in glued to a word'],
    ['engine=a,,b=c', 'an empty term'],
    ['engine=(a)', 'a parenthesis as a value'],
  ])('rejects %j (%s)', (text) => {
    expect(() => parseSelector(text)).toThrow(SelectorSyntaxError);
  });

  it('reports byte offsets, not UTF-16 indices', () => {
    // `é` is two bytes, one UTF-16 unit; `𝟘` is four bytes, two units.
    expect(syntaxError('role=é b').offset).toBe(8);
    expect(syntaxError('role="𝟘').offset).toBe(10);
  });
});

describe('selectorFromQuery', () => {
  it.each([[undefined], [''], ['   '], ['\t\n']])('requires a non-empty selector (%j)', (raw) => {
    const err = gatewayError(() => selectorFromQuery(raw));
    expect(err.code).toBe('selector_required');
    expect(err.status).toBe(400);
  });

  it('reports the offset into the trimmed text', () => {
    const err = gatewayError(() => selectorFromQuery('engine=='));
    expect(err.code).toBe('invalid_selector');
    expect(err.context).toEqual({ offset: 7 });
    expect(err.message).toBe('invalid selector at byte 7: expected value after `=`');
    expect(gatewayError(() => selectorFromQuery('   engine==  ')).context).toEqual({ offset: 7 });
  });

  it('keeps the trimmed text', () => {
    expect(selectorFromQuery('  engine=trtllm \n').text).toBe('engine=trtllm');
  });
});

describe('matchesSelector', () => {
  const view = { engine: 'sglang', tp_size: '2', role: 'policy', absent: undefined };

  it.each([
    ['engine=sglang', true],
    ['engine=vllm', false],
    ['engine!=vllm', true],
    ['engine!=sglang', false],
    ['tp_size in (1,2,4)', true],
    ['tp_size in (8)', false],
    ['role notin (reward, judge)', true],
    ['role notin (policy)', false],
    ['engine=sglang, tp_size=2', true],
    ['engine=sglang,tp_size=4', false],
    ['role="policy"', true],
    ['role="pol\\"icy"', false],
    // A missing key makes `=`/`in` false and `!=`/`notin` true.
    ['missing=x', false],
    ['missing in (x)', false],
    ['missing!=x', true],
    ['missing notin (x)', true],
    ['absent=x', false],
    ['absent!=x', true],
    // Inherited members of the view object are not labels.
    ['constructor=x', false],
    ['toString!=x', true],
  ])('%j → %s', (text, expected) => {
    expect(matchesSelector(parseSelector(text), view)).toBe(expected);
  });
});
