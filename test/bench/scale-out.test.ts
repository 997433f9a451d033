// The scale-out benchmark's pure parts: how many engines fit the machine's memory, what NATS
// carried between two readings of the nodes' monitoring endpoints (a replica's connection that
// closed or opened in the window, a node that restarted), and the per-unit costs docs/scale.md
// extrapolates from.
import { describe, expect, it } from 'vitest';
import { enginesThatFit, estimateMiB, FIT_MODEL, perUnit, traffic, type ScaleOutResult, type Snapshot } from '../../bench/scale-out.ts';

const counts = (msgs_in: number, bytes_in = msgs_in * 100) => ({ msgs_in, msgs_out: msgs_in * 2, bytes_in, bytes_out: bytes_in * 2 });

describe('how many engines fit', () => {
  it('keeps the request when its estimate fits what is available less the reserve', () => {
    const need = estimateMiB(10, 50_000);
    expect(enginesThatFit(10, 50_000, need + FIT_MODEL.reserveMiB)).toBe(50_000);
  });

  it('shrinks to a multiple of the replicas whose estimate fits, keeping the reserve', () => {
    const available = estimateMiB(10, 20_000) + FIT_MODEL.reserveMiB;
    const n = enginesThatFit(10, 50_000, available);
    expect(n).toBeLessThan(50_000);
    expect(n % 10).toBe(0);
    expect(estimateMiB(10, n)).toBeLessThanOrEqual(available - FIT_MODEL.reserveMiB);
    // Not needlessly small: the next step up (a twentieth of the fleet) would not fit.
    expect(estimateMiB(10, n + Math.round(n / 20 / 10) * 10)).toBeGreaterThan(available - FIT_MODEL.reserveMiB);
  });

  it('never goes below one engine per replica', () => {
    expect(enginesThatFit(10, 50_000, 0)).toBe(10);
  });

  it('grows with every replica: each one holds a row per engine', () => {
    expect(estimateMiB(10, 10_000) - estimateMiB(9, 10_000)).toBeCloseTo(FIT_MODEL.replicaBaseMiB + 10_000 * FIT_MODEL.replicaMiB, 0);
  });
});

describe('traffic between two snapshots', () => {
  const a: Snapshot = {
    at: 1_000,
    byNode: [counts(100), counts(200), counts(300)],
    conns: new Map([
      ['0:1', counts(10)],
      ['1:2', counts(20)],
    ]),
    streams: { KV_rlgate_rl_engines: 40, KV_rlgate_rl_replicas: 5 },
  };
  const b: Snapshot = {
    at: 3_500,
    // Node 2 restarted in the window: its counters began again.
    byNode: [counts(150), counts(260), counts(7)],
    conns: new Map([
      ['0:1', counts(15)],
      // 1:2 closed (a replica was killed); 2:9 opened in the window.
      ['2:9', counts(4)],
    ]),
    streams: { KV_rlgate_rl_engines: 100, KV_rlgate_rl_replicas: 8, KV_rlgate_rl_refits: 3 },
  };
  const t = traffic(a, b);

  it('sums the nodes, counting nothing for a node whose counters went back', () => {
    expect(t.seconds).toBe(2.5);
    expect(t.by_node.map((n) => n.msgs_in)).toEqual([50, 60, 0]);
    expect(t.nodes.msgs_in).toBe(110);
    expect(t.nodes.bytes_in).toBe(11_000);
  });

  it("counts the gateways' connections seen at the end, a new one from zero, and leaves out one that closed", () => {
    expect(t.gateways.msgs_in).toBe(5 + 4);
    expect(t.gateways.msgs_out).toBe(10 + 8);
  });

  it("counts each stream's writes as the growth of its last sequence, a new stream from zero", () => {
    expect(t.stream_writes).toEqual({ KV_rlgate_rl_engines: 60, KV_rlgate_rl_replicas: 3, KV_rlgate_rl_refits: 3 });
  });

  it('gives the per-unit figures docs/scale.md uses: KV writes per engine registered, heartbeats per replica per minute', () => {
    const r = {
      engines: 20,
      replicas: 2,
      register: { cpu_ms: { gateways: 200, nats: 100 }, traffic: t },
      idle: { window_s: 30, cpu_pct: { replicas: [1, 2], nats: [0, 0, 0], fleet: 0 }, traffic: t },
      refit: null,
      steady: null,
    } as unknown as ScaleOutResult;
    const u = perUnit(r);
    expect(u.register.kv_writes_per_engine).toBe(66 / 20);
    expect(u.register.kv_by_bucket_per_engine).toMatchObject({ engines: 3, replicas: 0.15, refits: 0.15, workers: Number.NaN });
    expect(u.register.gateway_cpu_ms_per_engine).toBe(10);
    // 3 heartbeat writes in half a minute by 2 replicas.
    expect(u.idle?.heartbeats_per_replica_per_min).toBe(3);
  });
});
