// bounded_affinity (src/fleet/policies/bounded-affinity.ts), rlgate's default, on the rules its
// documentation states: GRPO siblings stay with their prefix on an idle fleet; a new prompt goes to
// the soonest-done engine; load is counted in tokens of work (a long output weighs more than many
// short ones); no engine is chosen past the load bound, whatever it holds or whatever routing key
// names it; a session's next turn (prompt + the output it was answered) finds its engine; a slow
// engine gets less; a flushed engine is forgotten; the tree is bounded by the engine's KV size;
// what an engine holds by its own KV events counts, and so do prompts routed before it reported them.

import { describe, expect, it } from 'vitest';
import { KvIndex } from '../../../src/fleet/kv-index.ts';
import { BOUNDED_AFFINITY_DEFAULTS, BoundedAffinityPolicy, type BoundedAffinitySettings } from '../../../src/fleet/policies/bounded-affinity.ts';
import type { Candidate, RoutingInputs } from '../../../src/fleet/policies/policy.ts';
import { fleet, request, steppedClock } from '../../fixtures/policy-fleet.ts';

function policy(patch: Partial<BoundedAffinitySettings> = {}, clock = steppedClock()) {
  return { p: new BoundedAffinityPolicy({ ...BOUNDED_AFFINITY_DEFAULTS, ...patch }, { clock }), clock };
}

function route(p: BoundedAffinityPolicy, candidates: Candidate[], inputs: RoutingInputs) {
  const d = p.pick(request(candidates, inputs))!;
  p.routed(d.worker.id, inputs);
  return d;
}

/** `n` distinct token ids from `from`. */
const ids = (n: number, from = 1000) => Array.from({ length: n }, (_, i) => from + i);
const ws = fleet(4);

describe('GRPO groups', () => {
  it('the 8 siblings of a prompt stay on one engine of an idle fleet; the next group takes another', () => {
    const { p } = policy();
    const prompt = ids(256);
    const first = route(p, ws, { tokens: prompt, expectedOutputTokens: 300 });
    expect(first.reason).toBe('min_load');
    for (let s = 1; s < 8; s++) {
      const d = route(p, ws, { tokens: prompt, expectedOutputTokens: 300 });
      expect(d.worker).toBe(first.worker);
      expect(d.reason).toBe('cache_hit');
    }
    const next = route(p, ws, { tokens: ids(256, 5000), expectedOutputTokens: 300 });
    expect(next.worker).not.toBe(first.worker);
    expect(next.reason).toBe('min_load');
  });

  it('siblings leave their engine once it is more than the slack behind the soonest one', () => {
    const { p } = policy({ slackTokens: 1000, slackFraction: 0 });
    const prompt = ids(160);
    const seen = Array.from({ length: 6 }, () => route(p, ws, { tokens: prompt, expectedOutputTokens: 300 }).worker.id);
    // Each sibling adds 300 tokens of decode (the prompt is held after the first): the holder is
    // within 1,000 of an idle engine's ~348 for three more siblings, then one goes elsewhere.
    expect(seen.slice(0, 4)).toEqual([seen[0], seen[0], seen[0], seen[0]]);
    expect(seen[4]).not.toBe(seen[0]);
  });
});

describe('load in tokens of work', () => {
  it('one long-output request weighs more than several short ones', () => {
    const { p } = policy({ slackTokens: 0, slackFraction: 0 });
    const two = fleet(2);
    route(p, two, { tokens: ids(32, 1), expectedOutputTokens: 4000 }); // w0 or w1
    const long = p.pick(request(two, { tokens: ids(32, 100), expectedOutputTokens: 10 }))!.worker;
    // Three short requests all go to the other engine: 3 × ~20 tokens of work is far below 4,000.
    const shorts = [1, 2, 3].map((k) => route(p, two, { tokens: ids(32, 200 * k), expectedOutputTokens: 10 }).worker);
    expect(new Set(shorts).size).toBe(1);
    expect(shorts[0]).toBe(long);
  });

  it('finished work leaves the queue: an engine that answered is as free as an idle one', () => {
    const { p } = policy({ slackTokens: 0, slackFraction: 0 });
    const two = fleet(2);
    const a: RoutingInputs = { tokens: ids(32, 1), expectedOutputTokens: 4000 };
    const first = route(p, two, a).worker;
    p.finished(first.id, a, { answered: true, completionTokens: 4000 });
    // Both queues empty again: the next new prompt may go to either; the held one wins nothing new.
    const d = p.pick(request(two, { tokens: ids(32, 900), expectedOutputTokens: 10 }))!;
    expect(d.reason).toBe('min_load');
  });
});

describe('queued tokens (the rows and the gauge)', () => {
  it("are each engine's routed, unfinished work: prefill weighted, decode exact, gone when finished", () => {
    const { p } = policy();
    const two = fleet(2);
    expect(p.queuedTokens('w0')).toBe(0);
    const a: RoutingInputs = { tokens: ids(400, 1), expectedOutputTokens: 100 };
    const w = route(p, two, a).worker;
    // 400 prompt tokens to prefill × 0.3, plus 100 to decode.
    expect(p.queuedTokens(w.id)).toBe(220);
    // The same prompt again: held there, so only its decode is new work.
    const b: RoutingInputs = { tokens: ids(400, 1), expectedOutputTokens: 100 };
    expect(route(p, two, b).worker).toBe(w);
    expect(p.queuedTokens(w.id)).toBe(320);
    expect(p.queuedTokens(two.find((x) => x !== w)!.id)).toBe(0);
    p.finished(w.id, a, { answered: true, completionTokens: 100 });
    expect(p.queuedTokens(w.id)).toBe(100);
    p.finished(w.id, b, { answered: false });
    expect(p.queuedTokens(w.id)).toBe(0);
  });

  it('a removed engine has none left', () => {
    const { p } = policy();
    const w = route(p, fleet(1), { tokens: ids(64), expectedOutputTokens: 10 }).worker;
    expect(p.queuedTokens(w.id)).toBeGreaterThan(0);
    p.workerRemoved(w.id);
    expect(p.queuedTokens(w.id)).toBe(0);
  });
});

describe('the load bound', () => {
  it('a prefix holder past the bound is passed over for the soonest engine', () => {
    const { p } = policy({ slackTokens: 500, slackFraction: 0 });
    const two = fleet(2);
    const prompt = ids(64);
    const holder = route(p, two, { tokens: prompt, expectedOutputTokens: 2000 }).worker;
    const d = route(p, two, { tokens: prompt, expectedOutputTokens: 100 });
    expect(d.worker).not.toBe(holder);
    expect(d.reason).toBe('min_load');
  });

  it('a routing key keeps its session on its engine within the bound, never past it', () => {
    const { p } = policy({ slackTokens: 500, slackFraction: 0 });
    const two = fleet(2);
    const home = route(p, two, { text: 'turn one', routingKey: 's1', expectedOutputTokens: 100 }).worker;
    // Within the bound: the key's engine, though another prompt there is new.
    const again = route(p, two, { text: 'something else', routingKey: 's1', expectedOutputTokens: 100 });
    expect(again).toEqual({ worker: home, reason: 'routing_key' });
    // Its engine 4,000 tokens behind: past the bound, the key does not override it.
    p.routed(home.id, { text: 'heavy', expectedOutputTokens: 4000 });
    const past = p.pick(request(two, { text: 'turn three', routingKey: 's1', expectedOutputTokens: 100 }))!;
    expect(past.worker).not.toBe(home);
    expect(past.reason).not.toBe('routing_key');
  });
});

describe('sessions', () => {
  it("a session's next turn (its last prompt, the answer and the tool's output) goes to the engine that answered it", () => {
    const { p } = policy();
    const turn1 = ids(512);
    const t1: RoutingInputs = { tokens: turn1, expectedOutputTokens: 64 };
    const home = route(p, ws, t1).worker;
    const output = ids(64, 90_000);
    p.finished(home.id, t1, { answered: true, completionTokens: 64 });
    // Other engines get other work meanwhile, so a blind pick would not land on `home` by chance.
    for (let k = 0; k < 3; k++) route(p, ws, { tokens: ids(512, 10_000 * (k + 2)), expectedOutputTokens: 64 });
    const turn2 = [...turn1, ...output, ...ids(300, 50_000)];
    const d = route(p, ws, { tokens: turn2, expectedOutputTokens: 64 });
    expect(d).toEqual({ worker: home, reason: 'cache_hit' });
  });
});

describe('slow engines', () => {
  it('an engine whose requests took ten times longer per unit of work gets the next new prompts less often', () => {
    const { p, clock } = policy({ slackTokens: 0, slackFraction: 0 });
    const two = fleet(2);
    // Teach it: one request on each, the w1 one ten times slower.
    for (const [w, ms] of [
      ['w0', 100],
      ['w1', 1000],
    ] as const) {
      const inputs: RoutingInputs = { tokens: ids(32, w === 'w0' ? 1 : 500), expectedOutputTokens: 100 };
      p.routed(w, inputs);
      clock.advance(ms);
      p.finished(w, inputs, { answered: true, completionTokens: 100 });
    }
    const picks = Array.from({ length: 11 }, (_, k) => route(p, two, { tokens: ids(32, 2000 + 100 * k), expectedOutputTokens: 100 }).worker.id);
    const onSlow = picks.filter((id) => id === 'w1').length;
    expect(onSlow).toBeLessThanOrEqual(1);
  });
});

describe('slow engines and their prefixes', () => {
  it('a session on an engine found ten times slower moves, though the engine holds its prefix and the fleet is quiet', () => {
    const { p, clock } = policy();
    const two = fleet(2);
    const context = ids(800);
    // The session's first turn on w1, answered ten times slower per unit of work than w0's request.
    const t1: RoutingInputs = { tokens: context, expectedOutputTokens: 32 };
    p.routed('w1', t1);
    const other: RoutingInputs = { tokens: ids(800, 50_000), expectedOutputTokens: 32 };
    p.routed('w0', other);
    clock.advance(300);
    p.finished('w0', other, { answered: true });
    clock.advance(2_700);
    p.finished('w1', t1, { answered: true });
    const next = p.pick(request(two, { tokens: [...context, ...ids(100, 90_000)], expectedOutputTokens: 32 }))!;
    expect(next).toEqual({ worker: two[0], reason: 'min_load' });
  });
});

describe('ties', () => {
  it('an idle pair is served in turn', () => {
    const { p } = policy();
    const two = fleet(2);
    const seen = Array.from({ length: 6 }, () => {
      const inputs: RoutingInputs = { tokens: [1, 2, 3], expectedOutputTokens: 3 };
      const id = p.pick(request(two, inputs))!.worker.id;
      p.routed(id, inputs);
      p.finished(id, inputs, { answered: true });
      return id;
    });
    expect(seen).toEqual(['w0', 'w1', 'w0', 'w1', 'w0', 'w1']);
  });

  it('ties go to the engine routed least recently, so one whose requests were all retried elsewhere is still tried', () => {
    const { p } = policy();
    const two = fleet(2);
    const first: string[] = [];
    for (let i = 0; i < 12; i++) {
      const inputs: RoutingInputs = { tokens: [1, 2, 3], expectedOutputTokens: 3 };
      const d = p.pick(request(two, inputs))!;
      p.routed(d.worker.id, inputs);
      first.push(d.worker.id);
      if (d.worker.id === 'w0') {
        // w0 cannot serve it (say, logprobs it does not give): the retry goes to w1 alone.
        p.finished('w0', inputs, { answered: false });
        const retry: RoutingInputs = { tokens: [1, 2, 3], expectedOutputTokens: 3 };
        p.routed(p.pick(request([two[1]!], retry))!.worker.id, retry);
        p.finished('w1', retry, { answered: true });
      } else {
        p.finished('w1', inputs, { answered: true });
      }
    }
    // Each retry made w1 the more recent: w0, never answering, is asked first every time (a
    // rotating start would have lost it or kept it by the parity of the retries).
    expect(first).toEqual(Array.from({ length: 12 }, () => 'w0'));
  });

  it("tiny requests teach nothing of an engine's speed: a pair whose 3-token answers took 1 ms and 80 ms is still served in turn", () => {
    const { p, clock } = policy();
    const two = fleet(2);
    const seen = Array.from({ length: 8 }, () => {
      const inputs: RoutingInputs = { tokens: [1, 2, 3], expectedOutputTokens: 3 };
      const id = p.pick(request(two, inputs))!.worker.id;
      p.routed(id, inputs);
      clock.advance(id === 'w1' ? 80 : 1);
      p.finished(id, inputs, { answered: true, completionTokens: 3 });
      return id;
    });
    expect(seen).toEqual(['w0', 'w1', 'w0', 'w1', 'w0', 'w1', 'w0', 'w1']);
  });
});

describe('what it remembers', () => {
  it('a flushed engine holds nothing: its prompts are new again', () => {
    const { p } = policy();
    const prompt = ids(256);
    const home = route(p, ws, { tokens: prompt, expectedOutputTokens: 10 }).worker;
    p.cacheFlushed(home.id);
    const d = p.pick(request(ws, { tokens: prompt, expectedOutputTokens: 10 }))!;
    expect(d.reason).toBe('min_load');
  });

  it("the tree keeps at most an engine's KV size per engine, least recently used out first", () => {
    const { p } = policy({ kvTokens: 1024 });
    const one = fleet(1);
    const old = ids(512, 1);
    route(p, one, { tokens: old, expectedOutputTokens: 1 });
    route(p, one, { tokens: ids(512, 10_000), expectedOutputTokens: 1 });
    route(p, one, { tokens: ids(512, 20_000), expectedOutputTokens: 1 });
    expect(p.tokenTree.sizeOf('w0')).toBeLessThanOrEqual(1024);
    expect(p.pick(request(one, { tokens: old, expectedOutputTokens: 1 }))!.reason).toBe('min_load');
  });
});

describe("the engines' KV events", () => {
  /** A KV-event index in which `w` holds `tokens`' whole pages, as its engine would report them. */
  function indexHolding(w: string, tokens: number[]): KvIndex {
    const kv = new KvIndex({ clock: steppedClock(), modelOf: () => 'm' });
    const blocks = [];
    for (let at = 0; at + 16 <= tokens.length; at += 16) blocks.push({ hash: String(1 + at), tokens: tokens.slice(at, at + 16), size: 16 });
    kv.apply(w, { sequence: 1n, dpRank: undefined, events: [{ kind: 'stored', parent: undefined, blocks }] });
    return kv;
  }

  it('a prompt an engine holds by its own events (routed by no one here) draws the request there', () => {
    const prompt = ids(256);
    const kvIndex = indexHolding('w2', prompt);
    const p = new BoundedAffinityPolicy(BOUNDED_AFFINITY_DEFAULTS, { clock: steppedClock(), kvIndex });
    const d = p.pick({ ...request(ws, { tokens: [...prompt, ...ids(20, 9000)], expectedOutputTokens: 300 }), modelId: 'm' })!;
    expect(d).toMatchObject({ worker: { id: 'w2' }, reason: 'cache_hit' });
  });

  it('siblings routed before the first one’s pages are reported still follow it: the tree of routed prompts counts too', () => {
    // The index knows of another engine's prompt only; the group's first sibling is not reported yet.
    const kvIndex = indexHolding('w3', ids(64, 7000));
    const p = new BoundedAffinityPolicy(BOUNDED_AFFINITY_DEFAULTS, { clock: steppedClock(), kvIndex });
    const prompt = ids(256);
    const pick = () => {
      const inputs = { tokens: prompt, expectedOutputTokens: 300 };
      const d = p.pick({ ...request(ws, inputs), modelId: 'm' })!;
      p.routed(d.worker.id, inputs);
      return d;
    };
    const first = pick();
    for (let s = 1; s < 8; s++) expect(pick()).toMatchObject({ worker: first.worker, reason: 'cache_hit' });
  });
});
