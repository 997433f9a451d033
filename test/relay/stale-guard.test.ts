// The staleness bound on requests in flight, its pure parts: when a request admitted on a version
// is past `max-staleness:k` (staleInFlight), what the guard does as the table moves (on a stepped
// clock: it looks only when the table's generation moved, hands each stale request over once and
// counts it), the `x-rl-on-stale` header, and the rid spliced into a body.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { parseVersionPolicy } from '../../src/fleet/version-policy.ts';
import { staleInFlight } from '../../src/fleet/version-policy.ts';
import { StaleGuard, abortableBody, staleActionOf, withRid } from '../../src/relay/stale-guard.ts';

const k1 = parseVersionPolicy('max-staleness:1');

describe('staleInFlight', () => {
  it.each([
    ['1', '1', false],
    ['1', '2', false],
    ['1', '3', true],
    ['5', '3', false],
    ['1', undefined, false],
    ['a', 'a', false],
    ['a', 'b', true],
  ] as const)('admitted %s, fleet on %s: stale %s', (admitted, max, stale) => {
    expect(staleInFlight(k1, admitted, max)).toBe(stale);
  });

  it('only max-staleness bounds a request in flight', () => {
    for (const p of ['any', 'latest-only', 'min-version:2']) expect(staleInFlight(parseVersionPolicy(p), '1', '9')).toBe(false);
    expect(staleInFlight(parseVersionPolicy('max-staleness:0'), '1', '2')).toBe(true);
  });
});

describe('StaleGuard', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  function guard() {
    const state = { generation: 0, max: '1' as string | undefined };
    const counted: string[] = [];
    const g = new StaleGuard({
      view: { fleetMax: () => state.max },
      generation: () => state.generation,
      metrics: { staleRequest: (a) => void counted.push(a) },
    });
    return { g, state, counted };
  }

  it('hands a request over once, when the table moved past its bound, and counts it by action', () => {
    const { g, state, counted } = guard();
    const seen: string[] = [];
    g.watch({ modelId: 'm', admitted: '1', policy: k1, action: 'abort', onStale: (max) => void seen.push(`abort@${max}`) });
    g.watch({ modelId: 'm', admitted: '2', policy: k1, action: 'mark', onStale: (max) => void seen.push(`mark@${max}`) });
    state.max = '3';
    vi.advanceTimersByTime(200);
    // Nothing moved in the table's generation: nothing looked at.
    expect(seen).toEqual([]);
    state.generation++;
    vi.advanceTimersByTime(60);
    expect(seen).toEqual(['abort@3']);
    expect(counted).toEqual(['aborted']);
    state.max = '4';
    state.generation++;
    vi.advanceTimersByTime(60);
    expect(seen).toEqual(['abort@3', 'mark@4']);
    expect(counted).toEqual(['aborted', 'marked']);
    expect(g.size).toBe(0);
    state.max = '9';
    state.generation++;
    vi.advanceTimersByTime(200);
    expect(seen).toHaveLength(2);
  });

  it('a request that ended is not watched any more, and no timer runs without requests', () => {
    const { g, state } = guard();
    const seen: string[] = [];
    const done = g.watch({ modelId: 'm', admitted: '1', policy: k1, action: 'abort', onStale: () => void seen.push('x') });
    done();
    expect(vi.getTimerCount()).toBe(0);
    state.max = '5';
    state.generation++;
    vi.advanceTimersByTime(200);
    expect(seen).toEqual([]);
  });
});

describe('x-rl-on-stale', () => {
  it('takes abort or mark, trimmed; refuses anything else with 400 naming the header', () => {
    expect(staleActionOf(undefined)).toBeUndefined();
    expect(staleActionOf(' mark ')).toBe('mark');
    expect(staleActionOf('abort')).toBe('abort');
    const e = gatewayError(() => staleActionOf('ignore'));
    expect(e.status).toBe(400);
    expect(e.context.field).toBe('x-rl-on-stale');
  });
});

describe('withRid', () => {
  it('splices the rid in front of the first member; the rest is the caller’s bytes', () => {
    expect(JSON.parse(withRid(Buffer.from('{"input_ids":[1],"stream":true}'), 'r1').toString())).toEqual({ rid: 'r1', input_ids: [1], stream: true });
    expect(withRid(Buffer.from('  {\n "text": "x"}'), 'r"2').toString()).toBe('{"rid":"r\\"2",\n "text": "x"}');
    expect(JSON.parse(withRid(Buffer.from('{ }'), 'r3').toString())).toEqual({ rid: 'r3' });
  });
});

describe('abortableBody', () => {
  it("the caller's rid as it is; one added (rlgate-…) when none; none when the rid is not one string", () => {
    const body = Buffer.from('{"rid":"mine","input_ids":[1]}');
    expect(abortableBody('mine', body)).toEqual({ rid: 'mine', body });
    const added = abortableBody(undefined, Buffer.from('{"input_ids":[1]}'))!;
    expect(added.rid).toMatch(/^rlgate-[0-9a-f-]{36}$/);
    expect(JSON.parse(added.body!.toString())).toEqual({ rid: added.rid, input_ids: [1] });
    expect(abortableBody(['a', 'b'], body)).toBeUndefined();
    expect(abortableBody(null, body)).toBeUndefined();
  });
});
