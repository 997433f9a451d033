// The per-worker routing series of src/obs/metrics.ts, read from the registry's own text: the
// answers' prompt, cached and completion tokens counted per worker (an unknown count adds
// nothing), the policy's queued tokens a gauge only for workers it reports, every name under the
// configured prefix, and a removed worker's series gone.

import { describe, expect, it } from 'vitest';
import { Metrics } from '../../src/obs/metrics.ts';
import { sample, types } from '../fixtures/prometheus-text.ts';

const A = 'http://127.0.0.1:30001';
const B = 'http://127.0.0.1:30002';

describe('per-worker token and queue series', () => {
  it('counts the answers’ tokens per worker; an unknown count adds nothing', async () => {
    const m = new Metrics({ rlEnabled: false });
    m.answerTokens(A, { promptTokens: 400, cachedTokens: 0, completionTokens: 8 });
    m.answerTokens(A, { promptTokens: 400, cachedTokens: 399, completionTokens: 8 });
    m.answerTokens(B, { promptTokens: 5 });
    const text = await m.registry.metrics();
    for (const n of ['rlgate_worker_prompt_tokens_total', 'rlgate_worker_cached_tokens_total', 'rlgate_worker_completion_tokens_total']) {
      expect(types(text).get(n), n).toBe('counter');
    }
    expect(sample(text, 'rlgate_worker_prompt_tokens_total', { worker: A })).toBe(800);
    expect(sample(text, 'rlgate_worker_cached_tokens_total', { worker: A })).toBe(399);
    expect(sample(text, 'rlgate_worker_completion_tokens_total', { worker: A })).toBe(16);
    expect(sample(text, 'rlgate_worker_prompt_tokens_total', { worker: B })).toBe(5);
    expect(sample(text, 'rlgate_worker_cached_tokens_total', { worker: B })).toBeUndefined();
  });

  it('queued tokens: a gauge read at scrape time, only for the workers the policy reports', async () => {
    const m = new Metrics({ rlEnabled: false });
    let queued: number | undefined = 220;
    m.collectWorkers(() => [
      { url: A, inflight: 2, breaker: 'closed', queuedTokens: queued },
      { url: B, inflight: 0, breaker: 'closed' },
    ]);
    let text = await m.registry.metrics();
    expect(types(text).get('rlgate_worker_queued_tokens')).toBe('gauge');
    expect(sample(text, 'rlgate_worker_queued_tokens', { worker: A })).toBe(220);
    expect(sample(text, 'rlgate_worker_queued_tokens', { worker: B })).toBeUndefined();
    queued = 0;
    text = await m.registry.metrics();
    expect(sample(text, 'rlgate_worker_queued_tokens', { worker: A })).toBe(0);
    queued = undefined;
    text = await m.registry.metrics();
    expect(sample(text, 'rlgate_worker_queued_tokens', { worker: A })).toBeUndefined();
  });

  it('takes the metrics prefix (smg_…)', async () => {
    const m = new Metrics({ rlEnabled: false, prefix: 'smg' });
    m.answerTokens(A, { promptTokens: 1, cachedTokens: 1, completionTokens: 1 });
    m.collectWorkers(() => [{ url: A, inflight: 0, breaker: 'closed', queuedTokens: 3 }]);
    const text = await m.registry.metrics();
    for (const n of ['smg_worker_prompt_tokens_total', 'smg_worker_cached_tokens_total', 'smg_worker_completion_tokens_total', 'smg_worker_queued_tokens']) {
      expect(sample(text, n, { worker: A }), n).toBeDefined();
    }
    expect(text).not.toMatch(/rlgate_/);
  });

  it("a removed worker's token series go with it; the others stay", async () => {
    const m = new Metrics({ rlEnabled: false });
    m.answerTokens(A, { promptTokens: 10, cachedTokens: 5, completionTokens: 1 });
    m.answerTokens(B, { promptTokens: 10, cachedTokens: 5, completionTokens: 1 });
    m.routingDecision(A, 'cache_hit');
    m.forget(A, A);
    const text = await m.registry.metrics();
    for (const n of ['rlgate_worker_prompt_tokens_total', 'rlgate_worker_cached_tokens_total', 'rlgate_worker_completion_tokens_total']) {
      expect(sample(text, n, { worker: A }), n).toBeUndefined();
      expect(sample(text, n, { worker: B }), n).toBeDefined();
    }
    expect(sample(text, 'rlgate_routing_decisions_total', { worker: A, reason: 'cache_hit' })).toBeUndefined();
  });
});
