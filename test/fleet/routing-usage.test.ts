// The per-worker routing usage (src/fleet/routing-usage.ts) behind the rows' `routing` object:
// decisions counted by reason, answered requests' token counts summed, a failed or cut-off
// attempt counting nothing, the hit rate as cached ÷ prompt (null before any prompt token), an
// engine's DP ranks summed, the policy's queued tokens null when it keeps none, and a removed
// worker forgotten.

import { describe, expect, it } from 'vitest';
import { RoutingUsage } from '../../src/fleet/routing-usage.ts';

describe('RoutingUsage', () => {
  it('starts empty: zero tokens, no hit rate, no queued count, no decisions', () => {
    expect(new RoutingUsage().figures(['w0'])).toEqual({
      prompt_tokens: 0,
      cached_tokens: 0,
      completion_tokens: 0,
      prefix_hit_rate: null,
      queued_tokens: null,
      decisions: {},
    });
  });

  it('counts decisions by reason and sums the answered requests’ token counts', () => {
    const u = new RoutingUsage();
    u.decided('w0', 'min_load');
    u.decided('w0', 'cache_hit');
    u.decided('w0', 'cache_hit');
    u.decided('w1', 'min_load');
    u.finished('w0', { answered: true, promptTokens: 400, cachedTokens: 0, completionTokens: 8 });
    u.finished('w0', { answered: true, promptTokens: 400, cachedTokens: 384, completionTokens: 8 });
    u.finished('w0', { answered: true, promptTokens: 400, cachedTokens: 399, completionTokens: 8 });
    const f = u.figures(['w0']);
    expect(f).toMatchObject({ prompt_tokens: 1200, cached_tokens: 783, completion_tokens: 24, decisions: { min_load: 1, cache_hit: 2 } });
    expect(f.prefix_hit_rate).toBeCloseTo(783 / 1200, 12);
    expect(u.figures(['w1'])).toMatchObject({ prompt_tokens: 0, prefix_hit_rate: null, decisions: { min_load: 1 } });
  });

  it('a failed, refused or cut-off attempt counts no tokens, even with counts read; no outcome counts nothing', () => {
    const u = new RoutingUsage();
    u.finished('w0', { answered: false, promptTokens: 400, cachedTokens: 399, completionTokens: 3 });
    u.finished('w0', undefined);
    u.finished('w0', { answered: true });
    expect(u.figures(['w0'])).toMatchObject({ prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, prefix_hit_rate: null });
  });

  it('an answer with some counts unknown adds what it has', () => {
    const u = new RoutingUsage();
    u.finished('w0', { answered: true, promptTokens: 10, completionTokens: 5 });
    u.finished('w0', { answered: true, cachedTokens: 4 });
    expect(u.figures(['w0'])).toMatchObject({ prompt_tokens: 10, cached_tokens: 4, completion_tokens: 5, prefix_hit_rate: 0.4 });
  });

  it("sums an engine's DP ranks, decisions and queued tokens included", () => {
    const u = new RoutingUsage();
    u.decided('r0', 'cache_hit');
    u.decided('r1', 'cache_hit');
    u.decided('r1', 'min_load');
    u.finished('r0', { answered: true, promptTokens: 100, cachedTokens: 50, completionTokens: 1 });
    u.finished('r1', { answered: true, promptTokens: 300, cachedTokens: 250, completionTokens: 2 });
    const queued: Record<string, number> = { r0: 7, r1: 5 };
    expect(u.figures(['r0', 'r1'], (id) => queued[id])).toEqual({
      prompt_tokens: 400,
      cached_tokens: 300,
      completion_tokens: 3,
      prefix_hit_rate: 0.75,
      queued_tokens: 12,
      decisions: { cache_hit: 2, min_load: 1 },
    });
  });

  it('queued tokens: zero when the policy counts zero, null when it counts none', () => {
    const u = new RoutingUsage();
    expect(u.figures(['w0'], () => 0).queued_tokens).toBe(0);
    expect(u.figures(['w0'], () => undefined).queued_tokens).toBeNull();
    expect(u.figures(['w0']).queued_tokens).toBeNull();
  });

  it('forgets a removed worker: registered again, it starts from zero; others keep theirs', () => {
    const u = new RoutingUsage();
    for (const w of ['w0', 'w1']) {
      u.decided(w, 'min_load');
      u.finished(w, { answered: true, promptTokens: 20, cachedTokens: 10, completionTokens: 1 });
    }
    u.forget('w0');
    expect(u.figures(['w0'])).toMatchObject({ prompt_tokens: 0, prefix_hit_rate: null, decisions: {} });
    expect(u.figures(['w1'])).toMatchObject({ prompt_tokens: 20, cached_tokens: 10, decisions: { min_load: 1 } });
  });
});
