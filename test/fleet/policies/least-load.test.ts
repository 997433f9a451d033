// least_load (src/fleet/policies/least-load.ts): with no engine reporting its queue (every wire
// today), the fewest requests in flight, the first on a tie; with reports, SMG's expected wait,
// (queued + in-flight token work) / throughput + λ·k/(1−k), in-flight token work being what this
// replica routed there and has not finished.

import { describe, expect, it } from 'vitest';
import { LeastLoadPolicy } from '../../../src/fleet/policies/least-load.ts';
import type { LoadReport } from '../../../src/fleet/policies/policy.ts';
import { fleet, loads, request } from '../../fixtures/policy-fleet.ts';

const ws = fleet(3);

describe('least_load without reports', () => {
  it('the fewest in flight; ties to the first candidate', () => {
    const p = new LeastLoadPolicy();
    expect(p.pick(request(ws, {}, loads({ w0: 3, w1: 1, w2: 2 })))).toEqual({ worker: ws[1], reason: 'min_load' });
    expect(p.pick(request(ws, {}, loads({ w0: 1, w1: 1, w2: 1 })))!.worker).toBe(ws[0]);
  });
});

describe('least_load with reports', () => {
  it('the shortest expected drain: queued tokens over throughput', () => {
    const p = new LeastLoadPolicy();
    const reports: Record<string, LoadReport> = {
      w0: { queuedTokens: 4000, throughput: 2000 },
      w1: { queuedTokens: 3000, throughput: 1000 },
      w2: { queuedTokens: 1000 },
    };
    // 2 s, 3 s, 1000 / default 2000 = 0.5 s.
    expect(p.pick({ ...request(ws), report: (id) => reports[id] })!.worker).toBe(ws[2]);
  });

  it('the KV barrier steers off a nearly full cache', () => {
    const p = new LeastLoadPolicy();
    // w0: 0.1 s + 0.15 × 0.95/0.05 = 2.95 s; w1: 0.5 s + 0.15 × 0.1/0.9 ≈ 0.52 s.
    const reports: Record<string, LoadReport> = { w0: { queuedTokens: 200, kvUsage: 0.95 }, w1: { queuedTokens: 1000, kvUsage: 0.1 } };
    expect(p.pick({ ...request(ws.slice(0, 2)), report: (id) => reports[id] })!.worker).toBe(ws[1]);
  });

  it('token work routed and not finished counts, and leaves when the request ends', () => {
    const p = new LeastLoadPolicy();
    const two = ws.slice(0, 2);
    const reports: Record<string, LoadReport> = { w0: { queuedTokens: 0 }, w1: { queuedTokens: 1000 } };
    const pick = () => p.pick({ ...request(two), report: (id) => reports[id] })!.worker;
    expect(pick()).toBe(ws[0]);
    const long = { tokens: Array(3000).fill(1) };
    p.routed('w0', long);
    expect(pick()).toBe(ws[1]);
    p.finished('w0', long);
    expect(pick()).toBe(ws[0]);
  });
});
