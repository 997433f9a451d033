// The 3-node cluster fixture really is a JetStream cluster: an R3 KV bucket written through n1 is
// read through n3, and it survives a SIGKILL of its stream leader (survivors keep the data and take
// new writes once a new leader is elected, and the killed node catches up after its restart).
// Operations that may meet the leader election are retried until a deadline, as clients must.

import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsCluster, type NatsCluster } from '../fixtures/nats-cluster.ts';

const BUCKET = 'rlgate_cluster_fixture';

let cluster: NatsCluster;
const conns: NatsConnection[] = [];
beforeAll(async () => {
  cluster = await startNatsCluster();
}, 60_000);
afterAll(async () => {
  await Promise.all(conns.map((c) => c.close().catch(() => undefined)));
  await cluster?.stop();
});

/** A client of one node only (no gossiped servers), so a read or write really goes through it. */
async function client(i: number): Promise<NatsConnection> {
  const nc = await connect({ servers: cluster.urls[i], ignoreClusterUpdates: true, name: `fixture-test-${cluster.names[i]}` });
  conns.push(nc);
  return nc;
}

/** Retries `fn` until it neither throws nor fails an expectation, or the deadline passes. */
async function eventually<T>(fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

async function read(nc: NatsConnection, key: string): Promise<string | undefined> {
  const kv = await new Kvm(nc).open(BUCKET);
  return (await kv.get(key))?.string();
}

describe('3-node NATS cluster fixture', () => {
  it('starts three routed JetStream nodes that agree on a meta leader', async () => {
    expect(cluster.urls).toHaveLength(3);
    expect(new Set(cluster.urls).size).toBe(3);
    expect(cluster.url).toBe(cluster.urls.join(','));
    expect(cluster.names).toContain(await cluster.waitForMetaLeader());
    const jsz = (await (await fetch(`${cluster.monitorUrls[1]}/jsz`)).json()) as { meta_cluster: { cluster_size: number } };
    expect(jsz.meta_cluster.cluster_size).toBe(3);
  });

  it('an R3 KV bucket written through n1 is read through n3', async () => {
    const n1 = await client(0);
    const n3 = await client(2);
    const kv = await eventually(() => new Kvm(n1).create(BUCKET, { replicas: 3 }));
    await eventually(() => kv.put('version', '41'));
    await eventually(() => kv.put('model', 'step-41'));
    expect(
      await eventually(async () => {
        const v = await read(n3, 'version');
        expect(v).toBe('41');
        return v;
      }),
    ).toBe('41');
    const info = await (await jetstreamManager(n3)).streams.info(`KV_${BUCKET}`);
    expect(info.config.num_replicas).toBe(3);
    expect(info.cluster?.replicas ?? []).toHaveLength(2);
  });

  it('survives SIGKILL of the stream leader, and the restarted node catches up', async () => {
    const leader = (await (await jetstreamManager(await client(0))).streams.info(`KV_${BUCKET}`)).cluster?.leader;
    const victim = cluster.names.indexOf(leader ?? '');
    expect(victim, `stream leader ${leader}`).toBeGreaterThanOrEqual(0);
    await cluster.kill(victim, 'SIGKILL');
    expect(cluster.running(victim)).toBe(false);
    const [a, b] = [0, 1, 2].filter((i) => i !== victim) as [number, number];
    const writer = await client(a);
    const reader = await client(b);

    // New leader elected: writes through one survivor are read through the other; old data is kept.
    await eventually(async () => {
      const kv = await new Kvm(writer).open(BUCKET);
      await kv.put('version', '42');
    });
    await eventually(async () => expect(await read(reader, 'version')).toBe('42'));
    await eventually(async () => expect(await read(reader, 'model')).toBe('step-41'));

    await cluster.restart(victim);
    expect(cluster.running(victim)).toBe(true);
    const back = await client(victim);
    await eventually(async () => expect(await read(back, 'version')).toBe('42'));
  }, 90_000);
});
