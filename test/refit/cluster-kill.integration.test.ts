// A refit survives SIGKILL of one NATS node of three while the engines load weights
// (test/fixtures/cluster-replicas.ts: two gateway replicas joined to all three nodes, three SGLang
// simulators). Each trial kills a node with a different role, read from the nodes' monitors when
// the refit is loading: the JetStream meta leader, the leader of the refit journal bucket, the node
// the refit's runner is connected to, the node that hosts the journal watch of the replica the
// trainer called, and a node that leads nothing of ours. Between trials the node is restarted, the
// cluster made whole, and both replicas started afresh, so that one trial's damage cannot fail the
// next.
//
// The refit must answer 200, and each engine — judged by the simulators' own state and request
// records — must hold the new version, not be paused, and have seen exactly one pause and applied
// exactly one load (a load abandoned when its replica's lease lapsed while the node died is read
// on the engine and, having not landed, sent once more). The answer may take long (a stream leader
// is re-elected in ~6 s, a client on the dead node reconnects in ~4 s), so the bound is a liveness
// bound, several times that.

import { describe, expect, it } from 'vitest';
import { SLOW_LOAD_MS, ANSWER_BOUND_MS, JOURNALS, QUEUE, STREAMS, useClusterReplicas } from '../fixtures/cluster-replicas.ts';
import { until } from '../fixtures/gateway-process.ts';

/** Which node a trial kills, chosen once the refit is loading weights. */
type Victim = 'meta leader' | 'journal stream leader' | "runner's node" | "node of the front's journal watch" | 'follower';
const TRIALS: Victim[] = ['meta leader', 'journal stream leader', "runner's node", "node of the front's journal watch", 'follower'];

describe('a refit on a 3-node NATS cluster with two gateway replicas: SIGKILL of one node while the weights load', () => {
  const { fleet, indexOf, streamLeader, clusterWhole, connectionOf, watchHost, fleetReady, startReplicas, stopReplicas } = useClusterReplicas();

  it.each(TRIALS.map((v, i) => [v, i] as const))(
    'SIGKILL of the %s while the weights load (trial %i): 200, every engine on the new version, nothing paused, no step twice',
    async (victimKind, trial) => {
      if (trial > 0) {
        await stopReplicas();
        await clusterWhole();
        await startReplicas();
      } else {
        await clusterWhole();
      }
      await fleetReady();
      const version = `cluster-${trial}`;
      const refitId = `cluster-kill-${trial}`;
      const loadsBefore = new Map<string, number>();
      for (const s of fleet.sims) {
        await s.clearRequests();
        await s.setFaults({ route: 'update_weights_from_disk', delayMs: SLOW_LOAD_MS, times: 1 });
        loadsBefore.set(s.url, (await s.state()).weights.loads);
      }
      const front = fleet.gateways[trial % 2]!;
      const body = { refit_id: refitId, weight_version: version, source: { kind: 'disk', model_path: `/m/${version}` } };
      const answer = front.http('POST', '/v1/rl/refits', body).then(
        (r) => ({ kind: 'answer' as const, ...r }),
        (err: unknown) => ({ kind: 'error' as const, err: String(err) }),
      );
      const runner = await until('the refit loading weights', 20_000, async () => {
        const r = await front.http('GET', `/v1/rl/refits/${refitId}`);
        return r.status === 200 && r.json.status === 'running' && r.json.phase === 'refit' ? (r.json.replica as string) : null;
      });

      // The roles, read from the nodes' monitors now.
      const meta = await fleet.cluster.waitForMetaLeader(5_000);
      const journalLeader = await streamLeader(JOURNALS);
      const queueLeader = await streamLeader(QUEUE);
      const runnerNode = (await connectionOf(fleet.gateways.find((g) => g.replicaId === runner)!))?.node;
      const frontWatch = await watchHost(front, JOURNALS);
      const leaders = new Set<number>([indexOf(meta)]);
      for (const name of STREAMS) leaders.add(indexOf(await streamLeader(name)));
      let victim: number;
      switch (victimKind) {
        case 'meta leader':
          victim = indexOf(meta);
          break;
        case 'journal stream leader':
          victim = indexOf(journalLeader);
          break;
        case "runner's node":
          victim = runnerNode ?? -1;
          break;
        case "node of the front's journal watch":
          victim = frontWatch ?? -1;
          break;
        // A node that leads no stream of ours nor the meta group; if every node leads something,
        // one that is not the meta leader nor the journal's leader.
        case 'follower':
          victim = [0, 1, 2].find((i) => !leaders.has(i)) ?? [0, 1, 2].find((i) => i !== indexOf(meta) && i !== indexOf(journalLeader))!;
          break;
      }
      const name = (i: number | undefined) => (i === undefined ? null : (fleet.cluster.names[i] ?? null));
      const facts = JSON.stringify({
        front: front.replicaId,
        runner,
        runner_node: name(runnerNode),
        meta_leader: meta,
        journal_leader: journalLeader,
        queue_leader: queueLeader,
        front_journal_watch_on: name(frontWatch),
        killed: name(victim),
      });
      expect(victim, facts).toBeGreaterThanOrEqual(0);
      await fleet.cluster.kill(victim, 'SIGKILL');

      let res: Awaited<typeof answer> | { kind: 'none' };
      try {
        res = await Promise.race([answer, new Promise<{ kind: 'none' }>((r) => setTimeout(() => r({ kind: 'none' }), ANSWER_BOUND_MS))]);
      } finally {
        await fleet.cluster.restart(victim);
      }
      if (res.kind !== 'answer') {
        // Say what each replica's journal shows, and let the engines settle before they are judged.
        const progress = await Promise.all(
          fleet.gateways.map(
            async (g) => `${g.replicaId}: ${(await g.http('GET', `/v1/rl/refits/${refitId}`).catch((e: unknown) => ({ text: String(e) }))).text}`,
          ),
        );
        expect
          .soft(
            res.kind,
            `no answer ${ANSWER_BOUND_MS} ms after the kill (${res.kind === 'error' ? res.err : 'still waiting'}); ${facts}; journals: ${progress.join(' | ')}`,
          )
          .toBe('answer');
        await until('the engines unpaused', 30_000, async () => (await Promise.all(fleet.sims.map((s) => s.state()))).every((st) => st.paused === null)).catch(
          () => undefined,
        );
      } else {
        expect.soft(res.status, `${facts}: ${res.text}`).toBe(200);
        expect.soft(res.json?.id).toBe(refitId);
        expect.soft(res.json?.status, `${facts}: ${res.text}`).toBe('succeeded');
        expect.soft(res.json?.succeeded).toBe(3);
      }

      // The engines' own word.
      for (const s of fleet.sims) {
        const st = await s.state();
        expect.soft(st.weightVersion, `${s.url} weight version; ${facts}`).toBe(version);
        expect.soft(st.paused, `${s.url} paused; ${facts}`).toBeNull();
        const seen = (await s.requests()).map((q) => q.path);
        const count = (p: string) => seen.filter((x) => x === p).length;
        expect.soft(count('/pause_generation'), `${s.url} pauses; ${facts}`).toBe(1);
        // Applied once. Sent twice only when the first was abandoned (its replica's lease lapsed
        // while the node died) and the engine, read afterwards, did not hold it.
        expect.soft(st.weights.loads - loadsBefore.get(s.url)!, `${s.url} loads applied; ${facts}`).toBe(1);
        expect.soft(count('/update_weights_from_disk'), `${s.url} loads sent; ${facts}`).toBeLessThanOrEqual(2);
        expect.soft(count('/continue_generation'), `${s.url} resumes; ${facts}`).toBeGreaterThanOrEqual(1);
      }
    },
    240_000,
  );
});
