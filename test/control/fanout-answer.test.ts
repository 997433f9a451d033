// The fan-out's answer written as text (fanoutJson) is the object form (fanoutResponse) through
// JSON.stringify, byte for byte, for every kind of outcome: answers of any status and body
// (JSON values, text, null, none), truncated ones, timeouts, unreachable legs with and without a
// code, engines without a control endpoint, legs with no outcome at all, and worker ids that an
// object orders apart (array indices come first, numerically). Also its status and counts.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fanoutJson, fanoutResponse } from '../../src/control/fanout-answer.ts';
import type { ControlOutcome } from '../../src/wire/control-call.ts';

const id = fc.oneof(
  fc.uuid(),
  fc.nat({ max: 5_000_000_000 }).map(String),
  fc.constantFrom('0', '01', '4294967294', '4294967295', '-1', '1.5', 'a"b\\c', '\u2028', 'é', ''),
  fc.string(),
);

const outcome: fc.Arbitrary<ControlOutcome | undefined> = fc.oneof(
  fc.record({
    kind: fc.constant('answer' as const),
    status: fc.oneof(fc.constantFrom(200, 204, 207, 299, 300, 404, 500, 503), fc.integer({ min: 100, max: 599 })),
    latencyMs: fc.nat({ max: 600_000 }),
    body: fc.oneof(fc.jsonValue(), fc.string(), fc.constant(null), fc.constant(undefined)),
    truncated: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('timeout' as const), latencyMs: fc.nat(), message: fc.string() }),
  fc.record(
    {
      kind: fc.constant('unreachable' as const),
      latencyMs: fc.nat(),
      message: fc.string(),
      code: fc.constantFrom('bus_unavailable' as const, 'not_owner' as const, 'no_owner' as const, 'owner_lost' as const),
      fenced: fc.constant(true as const),
    },
    { requiredKeys: ['kind', 'latencyMs', 'message'] },
  ),
  fc.record({ kind: fc.constant('no_control_endpoint' as const), latencyMs: fc.constant(0 as const), message: fc.string(), connectionMode: fc.string() }),
  fc.constant(undefined),
);

const fleet = fc.uniqueArray(fc.record({ id, url: fc.webUrl(), outcome }), { selector: (t) => t.id, minLength: 1, maxLength: 40 });

function split(legs: Array<{ id: string; url: string; outcome: ControlOutcome | undefined }>) {
  const targets = legs.map(({ id, url }) => ({ id, url }));
  const outcomes = new Map<string, ControlOutcome>();
  for (const l of legs) if (l.outcome) outcomes.set(l.id, l.outcome);
  return { targets, outcomes };
}

describe('fanoutJson: the answer as text', () => {
  it('is JSON.stringify of fanoutResponse, with its status and counts', () => {
    fc.assert(
      fc.property(fleet, (legs) => {
        const { targets, outcomes } = split(legs);
        const object = fanoutResponse(targets, outcomes);
        const text = fanoutJson(targets, outcomes);
        expect(text.json).toBe(JSON.stringify(object));
        expect(text.total).toBe(object.total);
        expect(text.succeeded).toBe(object.succeeded);
        expect(text.failed).toBe(object.failed.length);
        expect(text.status).toBe(object.failed.length === 0 ? 200 : 207);
      }),
      { numRuns: 500, seed: 19 },
    );
  });

  it('lists array-index ids first, numerically, then the others by id; failures by id', () => {
    const answer = (status: number): ControlOutcome => ({ kind: 'answer', status, latencyMs: 1, body: { ok: true }, truncated: false });
    const targets = ['b', '10', 'a', '9', '01'].map((id) => ({ id, url: `http://${id}` }));
    const outcomes = new Map<string, ControlOutcome>(targets.map((t) => [t.id, answer(t.id === 'a' ? 500 : 200)]));
    const text = fanoutJson(targets, outcomes);
    const parsed = JSON.parse(text.json) as { results: Record<string, unknown>; failed: Array<{ worker_id: string }> };
    expect(text.json.indexOf('"9"')).toBeLessThan(text.json.indexOf('"10"'));
    expect(Object.keys(parsed.results)).toEqual(['9', '10', '01', 'a', 'b']);
    expect(parsed.failed.map((f) => f.worker_id)).toEqual(['a']);
    expect(text.status).toBe(207);
  });
});
