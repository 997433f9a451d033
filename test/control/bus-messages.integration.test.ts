// What crosses NATS for one fan-out: one request per owning replica other than the caller
// (`rl.replica.<id>.cmd`), whatever the number of engines it owns, and nothing for the caller's
// own engines (they run in-process); a call that changes no engine's state publishes no state
// event. Counted by a subscriber on the whole subject root while the fan-out runs.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { startReplicaFleet, type ReplicaFleet } from '../fixtures/replica-fleet.ts';

describe('NATS messages per fan-out', () => {
  let fleet: ReplicaFleet;
  let more: SimProcess[] = [];

  beforeAll(async () => {
    // Three engines registered through (and owned by) the fixture's first replica, three through the other.
    fleet = await startReplicaFleet({ sims: [0, 1, 2].map(() => ['--token-rate', '0']), prefix: 'r', leaseSecs: 5 });
    more = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    const [first, other] = fleet.replicas as [GatewayProcess, GatewayProcess];
    for (const s of more) expect((await other.http('POST', '/workers', { url: s.url })).status).toBe(202);
    await until('six engines ready on both replicas, three owned by each', 20_000, async () => {
      for (const g of fleet.replicas) {
        const rows = (await g.http('GET', '/v1/rl/workers')).json.workers as Array<{ health: string; owner: string }>;
        if (rows.length !== 6 || rows.some((r) => r.health !== 'ready')) return false;
        if (rows.filter((r) => r.owner === first.replicaId).length !== 3 || rows.filter((r) => r.owner === other.replicaId).length !== 3) return false;
      }
      return true;
    });
  }, 90_000);
  afterAll(async () => {
    await fleet?.close();
    await Promise.all(more.map((s) => s.stop()));
  });

  it("one request to the other owning replica, none for the caller's own engines, no state event", async () => {
    const seen: string[] = [];
    const sub = fleet.bus.subscribe('rl.>', (_data, msg) => {
      seen.push(msg.subject);
    });
    try {
      // The subscription is in place once a message of our own comes back through it.
      await until('the subscription in place', 5_000, async () => {
        fleet.bus.publish('rl.test.ready', {});
        await new Promise((res) => setTimeout(res, 50));
        return seen.includes('rl.test.ready');
      });
      seen.length = 0;
      const r = await fleet.replicas[0]!.http('POST', '/v1/rl/engine/flush_cache?selector=worker_type%3Dregular', {});
      expect(r.status, r.text).toBe(200);
      expect(r.json.succeeded).toBe(6);
      await new Promise((res) => setTimeout(res, 300)); // late messages, if any, arrive
    } finally {
      sub.unsubscribe();
    }
    const commands = seen.filter((s) => s.endsWith('.cmd'));
    expect(commands).toEqual([`rl.replica.${fleet.replicas[1]!.replicaId}.cmd`]);
    expect(
      seen.filter((s) => s.endsWith('.state')),
      'state events',
    ).toEqual([]);
  });
});
