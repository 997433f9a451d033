// The clustered layout as processes (test/fixtures/cluster-replicas.ts: three nats-servers with
// cluster routes, two gateway replicas joined to all three nodes, three SGLang simulators). The
// gateway's KV buckets and its refit stream are replicated to the three nodes (R3). A node that
// hosts the *other* replica's journal watch is killed: once the trainer has its report, that
// replica must say the refit is done and take the next refit, instead of answering `running` and
// 409 `refit_in_progress` from a watch that went silent. And JetStream without quorum must not
// make a live replica take another's engines. SIGKILL of a node while the weights load, one trial
// per role, is in cluster-kill.integration.test.ts (a file of its own, so the two run side by side).

import { describe, expect, it } from 'vitest';
import { LEASE_SECS, SLOW_LOAD_MS, JOURNALS, STREAMS, useClusterReplicas } from '../fixtures/cluster-replicas.ts';
import { until, type GatewayProcess } from '../fixtures/gateway-process.ts';

describe('a refit on a 3-node NATS cluster with two gateway replicas', () => {
  const { fleet, streamsOn, clusterWhole, watchHost, rows, fleetReady, startReplicas, stopReplicas } = useClusterReplicas();

  it('replicates every bucket and the refit stream to the three nodes', async () => {
    await clusterWhole();
    for (const i of [0, 1, 2]) {
      const streams = await streamsOn(i);
      for (const name of STREAMS) {
        const s = streams.get(name);
        expect(s, `${name} on ${fleet.cluster.names[i]}`).toBeDefined();
        expect(s!.config?.num_replicas, `${name} replicas`).toBe(3);
        // A node lists the stream's other peers as its replicas; with itself, that is the cluster.
        const peers = new Set([fleet.cluster.names[i], ...(s!.cluster?.replicas ?? []).map((r) => r.name)]);
        expect([...peers].sort(), `${name} peers seen from ${fleet.cluster.names[i]}`).toEqual([...fleet.cluster.names].sort());
        expect(fleet.cluster.names, `${name} leader`).toContain(s!.cluster?.leader);
      }
    }
  }, 90_000);

  // The other replica's view: a replica whose journal watch lived on the killed node must not keep
  // showing the finished refit as running, nor refuse the next refit as `refit_in_progress`, once
  // the trainer has its report. Bound: a few times the ~6 s a new stream leader takes.
  it("SIGKILL of the node hosting the other replica's journal watch: that replica reports the refit done and takes the next one", async () => {
    await stopReplicas();
    await clusterWhole();
    await startReplicas();
    await fleetReady();
    const [front, other] = fleet.gateways as [GatewayProcess, GatewayProcess];
    const loadsBefore = new Map<string, number>();
    for (const s of fleet.sims) {
      await s.clearRequests();
      loadsBefore.set(s.url, (await s.state()).weights.loads);
      await s.setFaults({ route: 'update_weights_from_disk', delayMs: SLOW_LOAD_MS, times: 1 });
    }
    const first = { refit_id: 'cluster-watch-1', weight_version: 'cluster-watch-1', source: { kind: 'disk', model_path: '/m/cluster-watch-1' } };
    const answer = front.http('POST', '/v1/rl/refits', first);
    await until('the refit loading weights', 20_000, async () => (await front.http('GET', `/v1/rl/refits/${first.refit_id}`)).json?.phase === 'refit');
    const victim = await watchHost(other, JOURNALS);
    expect(victim, `the node hosting ${other.replicaId}'s journal watch`).toBeGreaterThanOrEqual(0);
    await fleet.cluster.kill(victim!, 'SIGKILL');
    // The node stays down meanwhile, as a crashed machine would (a restarted node brings the
    // watch's consumer back with it).
    const second = { refit_id: 'cluster-watch-2', weight_version: 'cluster-watch-2', source: { kind: 'disk', model_path: '/m/cluster-watch-2' } };
    let seen = '';
    let accepted: Awaited<typeof answer>;
    try {
      const answered = await answer;
      expect(answered.status, answered.text).toBe(200);
      accepted = await until(`${other.replicaId} reporting the first refit done and accepting the second`, 20_000, async () => {
        const got = await other.http('GET', `/v1/rl/refits/${first.refit_id}`);
        const r = await other.http('POST', '/v1/rl/refits', second);
        seen = `GET ${first.refit_id}: ${got.json?.status}/${got.json?.phase ?? ''}; POST ${second.refit_id}: ${r.status} ${r.json?.error ?? r.json?.status}`;
        return got.json?.status === 'succeeded' && r.status === 200 ? r : false;
      }).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; last: ${seen}; killed ${fleet.cluster.names[victim!]}`);
      });
    } finally {
      await fleet.cluster.restart(victim!);
    }
    expect(accepted.json.status).toBe('succeeded');
    for (const s of fleet.sims) {
      const st = await s.state();
      expect.soft(st.weightVersion, `${s.url} weight version`).toBe(second.weight_version);
      const seenPaths = (await s.requests()).map((q) => q.path);
      expect
        .soft(st.paused, `${s.url} paused; it saw ${seenPaths.filter((p) => !p.startsWith('/health') && p !== '/model_info' && p !== '/ready').join(' ')}`)
        .toBeNull();
      // One load applied per refit. The first refit's is sent twice only when the first was
      // abandoned (the lease of the replica running it lapsed while the node died) and the
      // engine, read afterwards, did not hold it, as in the trials above.
      expect.soft(st.weights.loads - loadsBefore.get(s.url)!, `${s.url} loads applied`).toBe(2);
      const sent = seenPaths.filter((p) => p === '/update_weights_from_disk').length;
      expect.soft(sent, `${s.url} loads sent`).toBeGreaterThanOrEqual(2);
      expect.soft(sent, `${s.url} loads sent`).toBeLessThanOrEqual(3);
    }
  }, 240_000);

  // JetStream without quorum, connections up: no heartbeat can be written, by anyone. Silence
  // heard while our own heartbeat could not be written proves nothing, so when the quorum comes
  // back no live replica takes another's engines (before: each took the other's, back and forth,
  // and calls in flight met a replica that no longer owned their engine).
  it("JetStream without quorum for three leases: no live replica takes another's engines", async () => {
    await stopReplicas();
    await clusterWhole();
    await startReplicas();
    await fleetReady();
    const ownersBefore = new Map((await rows(fleet.gateways[0]!)).map((w) => [w.url, w.owner]));
    const logFrom = fleet.gateways.map((g) => g.stderr().length);
    const survivor = 0;
    const victims = [1, 2];
    for (const v of victims) await fleet.cluster.kill(v, 'SIGKILL');
    try {
      await new Promise((r) => setTimeout(r, 3 * LEASE_SECS * 1000));
    } finally {
      for (const v of victims) await fleet.cluster.restart(v);
    }
    await clusterWhole();
    // Two more leases: a replica that judged wrongly would have taken the engines by now.
    await new Promise((r) => setTimeout(r, 2 * LEASE_SECS * 1000));
    await fleetReady();
    for (const g of fleet.gateways) {
      const after = new Map((await rows(g)).map((w) => [w.url, w.owner]));
      expect(Object.fromEntries(after), `owners seen by ${g.replicaId} (${fleet.cluster.names[survivor]} stayed up)`).toEqual(Object.fromEntries(ownersBefore));
    }
    fleet.gateways.forEach((g, i) => {
      const takeovers = g
        .stderr()
        .slice(logFrom[i])
        .split('\n')
        .filter((l) => l.includes('took over an engine'));
      expect(takeovers, `${g.replicaId} took engines over`).toEqual([]);
    });
  }, 180_000);
});
