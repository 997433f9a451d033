// The rollout benchmark's workloads and its step-time lower bound: the same seed gives the same
// work; the shapes are the ones the benchmark promises (GRPO siblings share their whole prompt,
// one long system prompt opens every prompt, sessions grow turn by turn within their context);
// the bound counts each distinct prefix once.
import { describe, expect, it } from 'vitest';
import type { RolloutRequest } from '../../bench/rollout/workload.ts';
import { agentic, grpoLongSystem, grpoShort, outputLength, prng, REALISTIC, stepTimeLowerBoundMs, summarize } from '../../bench/rollout/workload.ts';

/** Requests by group (Map.groupBy is Node 21+). */
function byGroup(rs: RolloutRequest[]): Map<string, RolloutRequest[]> {
  const m = new Map<string, RolloutRequest[]>();
  for (const r of rs) m.set(r.group, [...(m.get(r.group) ?? []), r]);
  return m;
}

describe('rollout workloads', () => {
  it('the same seed gives the same requests; another seed, others', () => {
    expect(grpoShort(7)).toEqual(grpoShort(7));
    expect(grpoShort(8).requests[0]!.inputIds).not.toEqual(grpoShort(7).requests[0]!.inputIds);
    expect(agentic(3)).toEqual(agentic(3));
  });

  it('grpo-short: 32 groups of 8 siblings sharing one prompt of 100-400 tokens', () => {
    const w = grpoShort(1);
    expect(w.requests).toHaveLength(256);
    const groups = byGroup(w.requests);
    expect(groups.size).toBe(32);
    for (const members of groups.values()) {
      expect(members).toHaveLength(8);
      expect(new Set(members.map((m) => m.inputIds))).toHaveProperty('size', 1);
      expect(new Set(members.map((m) => m.sample)).size).toBe(8);
      expect(members[0]!.inputIds.length).toBeGreaterThanOrEqual(100);
      expect(members[0]!.inputIds.length).toBeLessThanOrEqual(400);
    }
  });

  it('grpo-long-system: every prompt opens with the same 4,096 tokens; groups of 16', () => {
    const w = grpoLongSystem(1);
    const system = w.requests[0]!.inputIds.slice(0, 4096);
    for (const r of w.requests) expect(r.inputIds.slice(0, 4096)).toEqual(system);
    expect(byGroup(w.requests).get('g0')).toHaveLength(16);
  });

  it('output lengths: lognormal around 300, within 16..4096, with a tail', () => {
    const rand = prng(42);
    const xs = Array.from({ length: 20_000 }, () => outputLength(rand)).sort((a, b) => a - b);
    const median = xs[xs.length >> 1]!;
    expect(median).toBeGreaterThan(270);
    expect(median).toBeLessThan(330);
    expect(xs[0]).toBeGreaterThanOrEqual(16);
    expect(xs.at(-1)).toBeLessThanOrEqual(4096);
    expect(xs.filter((x) => x > 1_500).length).toBeGreaterThan(0);
  });

  it('agentic: 64 sessions of 4-16 turns, tool outputs of 100-2,000 tokens', () => {
    const w = agentic(5);
    expect(w.sessions).toHaveLength(64);
    for (const s of w.sessions) {
      expect(s.turns.length).toBeGreaterThanOrEqual(4);
      expect(s.turns.length).toBeLessThanOrEqual(16);
      for (const t of s.turns) {
        expect(t.toolTokens.length).toBeGreaterThanOrEqual(100);
        expect(t.toolTokens.length).toBeLessThanOrEqual(2_000);
      }
    }
  });
});

describe('the step-time lower bound', () => {
  it('counts a group prompt once, and the shared system prompt once for the whole batch', () => {
    const short = summarize(grpoShort(1));
    const promptsOnce = [...byGroup(grpoShort(1).requests).values()].reduce((n, g) => n + g[0]!.inputIds.length, 0);
    expect(short.promptTokens).toBe(promptsOnce * 8);
    // Random prompts share a first token now and then: at most a few tokens fewer than the group prompts.
    expect(short.distinctPromptTokens).toBeLessThanOrEqual(promptsOnce);
    expect(short.distinctPromptTokens).toBeGreaterThan(promptsOnce - 32 * 2);
    const long = summarize(grpoLongSystem(1));
    expect(long.distinctPromptTokens).toBeLessThan(4096 + 8 * 301);
    expect(long.promptTokens).toBeGreaterThan(128 * 4096);
  });

  it('agentic: each turn prefills only what the tool appended; a session stops before passing its context', () => {
    const w = agentic(5, 1, 32_768);
    const s = summarize(w);
    const session = w.sessions[0]!;
    let expected = session.prompt.length;
    let context = session.prompt.length;
    let turns = 0;
    for (const t of session.turns) {
      if (context + t.maxNewTokens > w.maxContext) break;
      if (turns > 0) expected += session.turns[turns - 1]!.toolTokens.length;
      context += t.maxNewTokens + t.toolTokens.length;
      turns++;
    }
    expect(s.requests).toBe(turns);
    expect(s.distinctPromptTokens).toBe(expected);
  });

  it('is the longer of the longest chain and the fleet share of the work at full batch', () => {
    const s = { requests: 2, promptTokens: 16_000, distinctPromptTokens: 8_000, outputTokens: 1_000, longestChainMs: 500 };
    // 8,000 distinct tokens: 1 s of prefill; 1,000 tokens at full batch: 1,000 × (0.35 + 6/256) ms.
    const work = 1_000 + 1_000 * (0.35 + 6 / 256);
    expect(stepTimeLowerBoundMs(s, 1, REALISTIC)).toBeCloseTo(work, 6);
    expect(stepTimeLowerBoundMs(s, 4, REALISTIC)).toBeCloseTo(Math.max(500, work / 4), 6);
    expect(stepTimeLowerBoundMs({ ...s, longestChainMs: 5_000 }, 4, REALISTIC)).toBe(5_000);
  });
});
