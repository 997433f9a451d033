// A 3-node NATS JetStream cluster on loopback for the scale-out benchmark: three nats-server
// processes (n1, n2, n3), each with its own client, monitoring and route port and its own store,
// routed to each other, as docker-compose.yml and docs/deployment.md lay a cluster out. It starts
// the nodes, waits until they agree on a JetStream meta leader, reads their monitoring endpoints
// and stops them; it measures nothing. Every node dies with the run: setpriv's parent-death
// signal, and an 'exit' hook that SIGKILLs what stop() did not reach.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { findNatsServer, pickFreePort } from '../src/bus/server.ts';
import { findExecutable } from './children.ts';

const SETPRIV = findExecutable(['/usr/bin/setpriv', '/bin/setpriv']);
const NODES = 3;

export interface ClusterNode {
  name: string;
  url: string;
  monitorUrl: string;
  pid: number | undefined;
}

export interface BenchNatsCluster {
  /** Every node's client URL, comma-separated: what `--nats-url` takes. */
  url: string;
  nodes: ClusterNode[];
  /** GET a monitoring path (`/varz`, `/connz?…`, `/jsz?…`) of node i, parsed. */
  monitor<T>(i: number, path: string): Promise<T>;
  stop(): Promise<void>;
}

const started = new Set<ChildProcess>();
const stores = new Set<string>();
let hooked = false;

/** Starts the three nodes and resolves once each reports the same JetStream meta leader. */
export async function startBenchNatsCluster(logDir: string, label = 'scaleout'): Promise<BenchNatsCluster> {
  const bin = findNatsServer();
  const dir = mkdtempSync(join(os.tmpdir(), `rlgate-bench-nats-${label}-`));
  stores.add(dir);
  const ports = [];
  for (let i = 0; i < NODES; i++) ports.push({ client: await pickFreePort(), monitor: await pickFreePort(), route: await pickFreePort() });
  const routes = ports.map((p) => `nats://127.0.0.1:${p.route}`).join(', ');
  const procs: ChildProcess[] = [];
  if (!hooked) {
    hooked = true;
    process.on('exit', () => {
      for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
      // A run stopped by a signal exits without stop(): its stores go too.
      for (const d of stores) rmSync(d, { recursive: true, force: true });
    });
  }
  const nodes: ClusterNode[] = ports.map((p, i) => {
    const name = `n${i + 1}`;
    mkdirSync(join(dir, name));
    const conf = join(dir, `${name}.conf`);
    writeFileSync(
      conf,
      [
        `server_name: ${name}`,
        `listen: "127.0.0.1:${p.client}"`,
        `http: "127.0.0.1:${p.monitor}"`,
        'max_payload: 8MB',
        // A fleet of tens of thousands of engines: every replica's connection and a
        // few thousand watch and request subscriptions each.
        'max_connections: 10000',
        `jetstream { store_dir: "${join(dir, name)}" }`,
        `cluster { name: rlgate-bench, listen: "127.0.0.1:${p.route}", routes: [ ${routes} ] }`,
        '',
      ].join('\n'),
    );
    const log = openSync(join(logDir, `nats-${label}-${name}.log`), 'a');
    const argv = ['-c', conf];
    const child = SETPRIV
      ? spawn(SETPRIV, ['--pdeathsig', 'KILL', bin, ...argv], { stdio: ['ignore', log, log] })
      : spawn(bin, argv, { stdio: ['ignore', log, log] });
    closeSync(log);
    started.add(child);
    procs.push(child);
    return { name, url: `nats://127.0.0.1:${p.client}`, monitorUrl: `http://127.0.0.1:${p.monitor}`, pid: child.pid };
  });
  const monitor = async <T>(i: number, path: string): Promise<T> => {
    const res = await fetch(`${nodes[i]!.monitorUrl}${path}`, { signal: AbortSignal.timeout(20_000) });
    if (!res.ok) throw new Error(`${nodes[i]!.name} ${path} answered ${res.status}`);
    return (await res.json()) as T;
  };
  const stop = async () => {
    await Promise.all(
      procs.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            const t = setTimeout(() => p.kill('SIGKILL'), 10_000);
            p.once('exit', () => {
              clearTimeout(t);
              started.delete(p);
              resolve();
            });
            p.kill('SIGTERM');
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
    stores.delete(dir);
  };
  try {
    const until = Date.now() + 60_000;
    let seen = '';
    for (;;) {
      const gone = procs.find((p) => p.exitCode !== null || p.signalCode !== null);
      if (gone) throw new Error(`a nats-server of the cluster exited at start; see ${logDir}/nats-${label}-*.log`);
      const leaders = await Promise.all(
        nodes.map((_, i) =>
          monitor<{ meta_cluster?: { leader?: string } }>(i, '/jsz').then(
            (j) => j.meta_cluster?.leader ?? '',
            () => '',
          ),
        ),
      );
      seen = leaders.join(',');
      if (leaders[0] && leaders.every((l) => l === leaders[0])) break;
      if (Date.now() > until) throw new Error(`the NATS cluster agreed on no meta leader within 60 s (${seen})`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: nodes.map((n) => n.url).join(','), nodes, monitor, stop };
}
