// The lease fence on a stepped clock: open only between a confirmed heartbeat and (lease − margin)
// after its send time, closed while the bus is away, and after a lapse closed until ownership is
// read again; the lapse is announced once, and every call names the replica and the lease epoch.

import { describe, expect, it, vi } from 'vitest';
import { LEASE_EPOCH_HEADER, LeaseFence, REPLICA_HEADER } from '../../src/fleet/lease-fence.ts';

function fenceAt(leaseMs = 5_000) {
  const clock = { t: 1_000_000 };
  const fence = new LeaseFence({ replicaId: 'gw-a', leaseMs, now: () => clock.t, timers: false });
  const lapses: string[] = [];
  fence.onLapse((r) => lapses.push(r));
  const step = (ms: number) => {
    clock.t += ms;
    fence.check();
  };
  return { clock, fence, lapses, step };
}

describe('LeaseFence', () => {
  it('is closed until the first heartbeat is confirmed', () => {
    const { fence, clock } = fenceAt();
    expect(fence.live()).toBe(false);
    expect(fence.reason()).toMatch(/no confirmed heartbeat/);
    fence.beatConfirmed(clock.t);
    expect(fence.live()).toBe(true);
    expect(fence.reason()).toBeNull();
  });

  it('closes a fifth of the lease before the others may judge the replica dead, counted from the send time', () => {
    const { fence, clock, step, lapses } = fenceAt(5_000);
    const sentAt = clock.t;
    step(300); // the write took 300 ms to be confirmed
    fence.beatConfirmed(sentAt);
    expect(fence.deadline()).toBe(sentAt + 4_000);
    step(3_699); // 3,999 ms after the send
    expect(fence.live()).toBe(true);
    step(1);
    expect(fence.live()).toBe(false);
    expect(fence.state()).toBe('lapsed');
    expect(fence.reason()).toMatch(/last heartbeat the bus confirmed was sent 4\.0 s ago \(lease 5 s\)/);
    expect(lapses).toHaveLength(1);
    step(10_000);
    expect(lapses).toHaveLength(1); // announced once
  });

  it('after a lapse, a new heartbeat opens it only once ownership has been read again', () => {
    const { fence, clock, step, lapses } = fenceAt(2_000);
    fence.beatConfirmed(clock.t);
    step(2_500);
    expect(lapses).toHaveLength(1);
    fence.beatConfirmed(clock.t);
    expect(fence.state()).toBe('resyncing');
    expect(fence.needsResync).toBe(true);
    expect(fence.live()).toBe(false);
    fence.resynced();
    expect(fence.live()).toBe(true);
  });

  it('a lapse that happened between two beats counts even when no one looked at the fence meanwhile', () => {
    const clock = { t: 0 };
    const fence = new LeaseFence({ replicaId: 'gw-a', leaseMs: 2_000, now: () => clock.t, timers: false });
    fence.beatConfirmed(0);
    clock.t = 3_000; // nobody called check(): the deadline (1,600 ms) passed unseen
    fence.beatConfirmed(2_900);
    expect(fence.state()).toBe('resyncing');
  });

  it('a disconnect refuses new calls without a lapse; back within the lease, it opens again with no re-read', () => {
    const { fence, clock, step, lapses } = fenceAt(5_000);
    fence.beatConfirmed(clock.t);
    fence.busStatus(false);
    expect(fence.live()).toBe(false);
    expect(fence.reason()).toMatch(/not connected to NATS/);
    step(1_000);
    fence.busStatus(true);
    expect(fence.live()).toBe(true);
    expect(lapses).toHaveLength(0);
  });

  it('an older confirmation than the newest changes nothing', () => {
    const { fence, clock, step } = fenceAt(5_000);
    fence.beatConfirmed(clock.t);
    const first = fence.deadline();
    step(100);
    fence.beatConfirmed(clock.t - 500);
    expect(fence.deadline()).toBe(first);
  });

  it('names the replica and the lease epoch of each owned engine in the call headers', () => {
    const { fence } = fenceAt();
    fence.setEpoch('w1', 42);
    expect(fence.headers('w1')).toEqual({ [REPLICA_HEADER]: 'gw-a', [LEASE_EPOCH_HEADER]: '42' });
    fence.setEpoch('w1', undefined);
    expect(fence.headers('w1')[LEASE_EPOCH_HEADER]).toBe('0');
  });

  it('a timer announces the lapse without any call', () => {
    vi.useFakeTimers(); // the fence's own timer, on vitest's fake clock
    try {
      const fence = new LeaseFence({ replicaId: 'gw-a', leaseMs: 1_000, marginMs: 900 });
      const lapses: string[] = [];
      fence.onLapse((r) => lapses.push(r));
      fence.beatConfirmed(Date.now());
      vi.advanceTimersByTime(99);
      expect(lapses).toEqual([]);
      vi.advanceTimersByTime(1_000 - 99);
      expect(lapses).toEqual([expect.stringMatching(/lease is not confirmed/)]);
      fence.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('LeaseFence re-reads', () => {
  it('a re-read that began before another lapse does not open the fence', () => {
    const clock = { t: 0 };
    const fence = new LeaseFence({ replicaId: 'gw-a', leaseMs: 2_000, now: () => clock.t, timers: false });
    fence.beatConfirmed(0);
    clock.t = 2_000;
    fence.check(); // lapse 1
    fence.beatConfirmed(2_000);
    const began = fence.lapses;
    clock.t = 4_000;
    fence.check(); // lapse 2, during the re-read
    fence.beatConfirmed(4_000);
    expect(fence.resynced(began)).toBe(false);
    expect(fence.state()).toBe('resyncing');
    expect(fence.resynced(fence.lapses)).toBe(true);
    expect(fence.live()).toBe(true);
  });
});
