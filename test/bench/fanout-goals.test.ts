// The fan-out suite's verdicts on issue 19's 1,000-engine goal: the gateway's envelope p50 within
// 1.2× the direct client's of the same run, met or missed at 1,000 engines, and not judged at all
// when the run did not measure 1,000 engines (the default sizes).

import { describe, expect, it } from 'vitest';
import { fanoutGoals, type SizeResult } from '../../bench/fanout.ts';

function size(engines: number, gatewayP50: number, directP50: number): SizeResult {
  const summary = (p50: number) => ({ n: 10, min: p50, p50, p90: p50, p99: p50 * 2, max: p50 * 2, mean: p50 });
  return {
    engines,
    iterations: 10,
    gateway: { envelope: summary(gatewayP50), overhead: summary(1) },
    direct: { envelope: summary(directP50), overhead: summary(1) },
    cpu_us_per_leg: { gateway: 100, gateway_process: 99, nats_server: 1, direct: 80, ratio: 1.25 },
  } as unknown as SizeResult;
}

const atThousand = (results: SizeResult[]) => fanoutGoals(results).filter((g) => g.engines === 1000);

describe('fanoutGoals: a fan-out to 1,000 engines within 1.2× the direct envelope', () => {
  it('is met at 1.2× and below', () => {
    const [goal] = atThousand([size(1000, 120, 100)]);
    expect(goal?.met).toBe(true);
    expect(goal?.figure).toContain('1.20×');
  });

  it('is missed above 1.2×', () => {
    const [goal] = atThousand([size(1000, 121, 100)]);
    expect(goal?.met).toBe(false);
  });

  it('is not judged when the run did not measure 1,000 engines', () => {
    expect(atThousand([size(12, 5, 4), size(256, 50, 40)])).toEqual([]);
  });
});
