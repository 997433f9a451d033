// The scale-out benchmark: several gateway replicas on a 3-node NATS cluster in front of tens of
// thousands of simulated engines, on one machine. It starts the cluster, the engine fleet and the
// replicas, registers each replica's share of the engines, reads memory, descriptors and idle CPU
// of every process, runs one refit over every engine, SIGKILLs one replica and times the takeover
// of its engines, and counts the NATS traffic of each step from the nodes' monitoring endpoints
// (/varz, /connz, /jsz). It shrinks the fleet to what the machine's memory holds, and says so.
// It fills its result as it goes, so a step that fails leaves what was measured before it.
// docs/scale.md extrapolates from the per-unit costs it prints.

import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'undici';
import { bucketName, BUCKETS } from '../src/bus/buckets.ts';
import { join } from 'node:path';
import { Child, childEnv, ENGINES_PER_FLEET_PROCESS, live, openFds, procStat, rssMiB, startFleet, type Fleet } from './children.ts';
import { startBenchNatsCluster, type BenchNatsCluster } from './nats-cluster.ts';
import type { TagStats } from './sim-fleet.ts';

const ROOT = 'rl';
const LABEL_KEY = 'so_via';
const JSON_HEADERS = { 'content-type': 'application/json' };

/**
 * What one engine costs this machine, MiB, summed over every process (the engine's simulator, a
 * row in every replica, its share of the NATS nodes), before and apart from each process's base:
 * measured by this benchmark at 2 × 1,000 and 10 × 2,000 (docs/scale.md). Used only to decide
 * how many engines fit before starting; the run measures the real figure.
 */
export const FIT_MODEL = {
  /** Per engine, in its simulator process (97–150 KiB measured). */
  simMiB: 0.15,
  /** Per engine in every replica, owner or not (registry row, its KV copies, its data-plane client): ~30 KiB. */
  replicaMiB: 0.03,
  /** Per engine in its owner, beyond the row (actor, control connection): ~20 KiB. */
  ownerMiB: 0.02,
  /** Per engine in each NATS node (three KV records, replicated on every node). */
  natsMiB: 0.004,
  /** Per process: a replica's (110 MiB compiled, more through tsx), a simulator process's and a node's base. */
  replicaBaseMiB: 150,
  fleetBaseMiB: 80,
  natsBaseMiB: 40,
  /** Left to the rest of the machine (other work, the page cache, this process). */
  reserveMiB: 3072,
};

export interface ScaleOutOptions {
  replicas: number;
  engines: number;
  logDir: string;
  logLevel: string;
  idleSeconds: number;
  /** The replicas' `--lease-secs` (shipped: 5). */
  leaseSecs: number;
  /** POST /workers in flight over all replicas while registering. */
  registerConcurrency: number;
  /** performance.now() by which the run must be over; every wait is cut there. */
  deadline: number;
  progress(line: string): void;
}

/** Message and byte counts over a window. */
export interface Counts {
  msgs_in: number;
  msgs_out: number;
  bytes_in: number;
  bytes_out: number;
}

/** What NATS carried over one window: the nodes' totals, the gateways' own connections, the streams' writes. */
export interface Traffic {
  seconds: number;
  /** Σ over the three nodes of /varz: clients', routes' and JetStream's own messages (a message routed between nodes counts on each). */
  nodes: Counts;
  by_node: Counts[];
  /** Σ over the gateways' connections (/connz): in = what the gateways published, out = what was delivered to them. */
  gateways: Counts;
  /** Writes (deletes included) per JetStream stream: the growth of its last sequence (/jsz). */
  stream_writes: Record<string, number>;
}

/** What the nodes' monitoring endpoints said at one moment. */
export interface Snapshot {
  at: number;
  byNode: Counts[];
  conns: Map<string, Counts>;
  streams: Record<string, number>;
}

export interface ScaleOutResult {
  requested: { replicas: number; engines: number };
  replicas: number;
  engines: number;
  fit: { mem_available_mib: number; estimate_mib: number; reduced: boolean; note: string };
  errors: Array<{ step: string; message: string }>;
  start: { cluster_s: number; fleet_s: number; fleet_processes: number; gateways_s: number; node_of_replica: Record<string, string> } | null;
  register: {
    concurrency: number;
    /** First POST → every POST answered 202. */
    accepted_s: number | null;
    /** First POST → every engine's record `serving`, written by the replica its lease names. */
    owned_serving_s: number | null;
    /** Engines whose lease had left the replica they were registered through when all were serving (a lease lapsed under load). */
    moved: number;
    /** First POST → every replica's /readiness counts every engine healthy. */
    ready_s: number | null;
    /** Memory guard: registration stopped early with this many engines, and why. */
    stopped_at: { engines: number; reason: string } | null;
    cpu_ms: Record<string, number>;
    traffic: Traffic | null;
    progress: Array<[number, number]>;
  } | null;
  steady: {
    rss_mib: { replicas: number[]; nats: number[]; fleet: number[] };
    fds: { replicas: number[]; nats: number[] };
    mem_available_mib: number;
  } | null;
  idle: { window_s: number; cpu_pct: { replicas: number[]; nats: number[]; fleet: number }; traffic: Traffic } | null;
  refit: {
    id: string;
    status: number;
    wall_ms: number;
    total: number;
    succeeded: number;
    failed: number;
    skipped: number;
    duration_ms: number | null;
    phases: Record<string, number>;
    /** Σ over the phases of the slowest engine's service time (the simulators' own clock). */
    engine_time_ms: number | null;
    /** Legs counted engine-side per phase tag. */
    legs: Record<string, number>;
    cpu_ms: Record<string, number>;
    traffic: Traffic | null;
    first_error: string | null;
    /** Size of the refit's journal in the refits bucket once done (report included), and of the HTTP answer. */
    journal_bytes: number | null;
    answer_bytes: number;
  } | null;
  takeover: {
    victim: string;
    engines: number;
    lease_s: number;
    /** SIGKILL → every one of the victim's engines leased to a survivor (owners bucket). */
    owned_ms: number | null;
    /** SIGKILL → every one of them `serving` in its record, written by a survivor (engines bucket). */
    serving_ms: number | null;
    new_owners: Record<string, number>;
    /** A fan-out through a survivor to the victim's engines after the takeover: its answer and the legs the engines counted. */
    engine_check: { status: number; succeeded: number; total: number; engines_reached: number } | null;
    traffic: Traffic | null;
  } | null;
  rss_end_mib: { replicas: Array<number | null>; nats: Array<number | null> } | null;
  /** Per replica, from its log: how often it lost its lease (its heartbeats went unconfirmed) and read the leases again, and refits it took over. */
  replica_log: Record<string, { lease_lost: number; refits_taken_over: number; calls_sent_again: number }>;
  wall_seconds: number;
}

/** What the scale-out run needs of the time budget: start-ups, registration, the idle window, a refit, a takeover. */
export function scaleOutBudgetMs(replicas: number, engines: number, idleSeconds: number): number {
  // 30 ms of wall time per engine: registration, the refit and the takeover on 2 shared cores.
  return (240 + idleSeconds + replicas * 10 + engines * 0.03) * 1000;
}

/** MemAvailable from /proc/meminfo, MiB. */
export function memAvailableMiB(): number {
  const kb = /^MemAvailable:\s+(\d+)\s+kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1];
  return kb === undefined ? Number.NaN : Math.round(Number(kb) / 1024);
}

/** Memory the layout needs by FIT_MODEL, MiB. */
export function estimateMiB(replicas: number, engines: number): number {
  const m = FIT_MODEL;
  const fleets = Math.ceil(engines / ENGINES_PER_FLEET_PROCESS);
  return Math.round(
    replicas * m.replicaBaseMiB + fleets * m.fleetBaseMiB + 3 * m.natsBaseMiB + engines * (m.simMiB + replicas * m.replicaMiB + m.ownerMiB + 3 * m.natsMiB),
  );
}

/** The largest engine count, a multiple of the replica count, whose estimate fits `availableMiB` less the reserve. */
export function enginesThatFit(replicas: number, requested: number, availableMiB: number): number {
  let n = requested - (requested % replicas);
  while (n > replicas && estimateMiB(replicas, n) > availableMiB - FIT_MODEL.reserveMiB) n -= Math.max(replicas, Math.round(n / 20 / replicas) * replicas);
  return Math.max(replicas, n);
}

const r1 = (v: number) => Math.round(v * 10) / 10;
const r3 = (v: number) => Math.round(v * 1000) / 1000;
const sleep = (t: number) => new Promise((r) => setTimeout(r, Math.max(0, t)));
const zero = (): Counts => ({ msgs_in: 0, msgs_out: 0, bytes_in: 0, bytes_out: 0 });

function emptyResult(o: ScaleOutOptions): ScaleOutResult {
  return {
    requested: { replicas: o.replicas, engines: o.engines },
    replicas: o.replicas,
    engines: o.engines,
    fit: { mem_available_mib: 0, estimate_mib: 0, reduced: false, note: '' },
    errors: [],
    start: null,
    register: null,
    steady: null,
    idle: null,
    refit: null,
    takeover: null,
    rss_end_mib: null,
    replica_log: {},
    wall_seconds: 0,
  };
}

type Varz = { in_msgs: number; out_msgs: number; in_bytes: number; out_bytes: number };
type Connz = { connections?: Array<{ cid: number; name?: string; in_msgs: number; out_msgs: number; in_bytes: number; out_bytes: number }> };
type Jsz = { account_details?: Array<{ stream_detail?: Array<{ name: string; state?: { last_seq?: number } }> }> };

async function snapshot(cluster: BenchNatsCluster, up: readonly boolean[] = [true, true, true]): Promise<Snapshot> {
  const idx = [0, 1, 2].filter((i) => up[i]);
  const byNode = await Promise.all(
    [0, 1, 2].map(async (i) => {
      if (!up[i]) return zero();
      const v = await cluster.monitor<Varz>(i, '/varz');
      return { msgs_in: v.in_msgs, msgs_out: v.out_msgs, bytes_in: v.in_bytes, bytes_out: v.out_bytes };
    }),
  );
  const conns = new Map<string, Counts>();
  const streams: Record<string, number> = {};
  for (const i of idx) {
    const z = await cluster.monitor<Connz>(i, '/connz?limit=10000');
    for (const c of z.connections ?? []) {
      if (!c.name?.startsWith('rlgate-gateway-')) continue;
      conns.set(`${i}:${c.cid}`, { msgs_in: c.in_msgs, msgs_out: c.out_msgs, bytes_in: c.in_bytes, bytes_out: c.out_bytes });
    }
    const j = await cluster.monitor<Jsz>(i, '/jsz?streams=true');
    for (const s of j.account_details?.flatMap((a) => a.stream_detail ?? []) ?? []) {
      streams[s.name] = Math.max(streams[s.name] ?? 0, s.state?.last_seq ?? 0);
    }
  }
  return { at: performance.now(), byNode, conns, streams };
}

/** What NATS carried between two snapshots. */
export function traffic(a: Snapshot, b: Snapshot): Traffic {
  const sub = (x: Counts, y: Counts): Counts => ({
    msgs_in: y.msgs_in - x.msgs_in,
    msgs_out: y.msgs_out - x.msgs_out,
    bytes_in: y.bytes_in - x.bytes_in,
    bytes_out: y.bytes_out - x.bytes_out,
  });
  const add = (x: Counts, y: Counts): Counts => ({
    msgs_in: x.msgs_in + y.msgs_in,
    msgs_out: x.msgs_out + y.msgs_out,
    bytes_in: x.bytes_in + y.bytes_in,
    bytes_out: x.bytes_out + y.bytes_out,
  });
  // A node that went down (or came up) in the window counts nothing for it.
  const byNode = b.byNode.map((y, i) => (y.msgs_in >= a.byNode[i]!.msgs_in ? sub(a.byNode[i]!, y) : zero()));
  let gateways = zero();
  // A connection seen at the end only started in the window (from zero); one seen at the start only was closed (left out).
  for (const [k, y] of b.conns) gateways = add(gateways, sub(a.conns.get(k) ?? zero(), y));
  const stream_writes: Record<string, number> = {};
  for (const [name, seq] of Object.entries(b.streams)) stream_writes[name] = seq - (a.streams[name] ?? 0);
  return { seconds: r3((b.at - a.at) / 1000), nodes: byNode.reduce(add, zero()), by_node: byNode, gateways, stream_writes };
}

/** The engines bucket and the owners bucket as the bench sees them, by worker id. */
class FleetWatch {
  readonly urlOf = new Map<string, string>();
  readonly state = new Map<string, string>();
  readonly writer = new Map<string, string>();
  readonly owner = new Map<string, string>();
  private stops: Array<() => void> = [];
  private nc: NatsConnection | undefined;

  /** Opens the watches afresh (what an earlier watch saw is forgotten); a NATS request that times out on a loaded host is tried again. */
  async start(servers: string[], attempts = 3): Promise<void> {
    for (let k = 1; ; k++) {
      try {
        return await this.open(servers);
      } catch (err) {
        await this.stop();
        if (k >= attempts) throw new Error(`the bench's watch of the engines and owners buckets: ${(err as Error).message}`);
      }
    }
  }

  private async open(servers: string[]): Promise<void> {
    for (const m of [this.urlOf, this.state, this.writer, this.owner]) m.clear();
    this.nc = await connect({ servers, name: 'rlgate-bench-scaleout' });
    const kvm = new Kvm(this.nc);
    const engines = await kvm.open(bucketName(ROOT, BUCKETS.engines));
    const owners = await kvm.open(bucketName(ROOT, BUCKETS.owners));
    const we = await engines.watch({ include: '' as never });
    const wo = await owners.watch({ include: '' as never });
    this.stops.push(
      () => we.stop(),
      () => wo.stop(),
    );
    void (async () => {
      for await (const e of we) {
        if (e.operation !== 'PUT') continue;
        try {
          const v = e.json<{ url?: string; state?: string; owner?: string }>();
          if (v.url) this.urlOf.set(e.key, v.url);
          if (v.state) this.state.set(e.key, v.state);
          if (v.owner) this.writer.set(e.key, v.owner);
        } catch {
          // not a record of ours
        }
      }
    })().catch(() => {});
    void (async () => {
      for await (const e of wo) {
        if (e.operation !== 'PUT') continue;
        try {
          const v = e.json<{ replica?: string }>();
          if (v.replica) this.owner.set(e.key, v.replica);
        } catch {
          // not a lease of ours
        }
      }
    })().catch(() => {});
  }

  async stop(): Promise<void> {
    for (const s of this.stops.splice(0)) s();
    await this.nc?.close().catch(() => {});
    this.nc = undefined;
  }
}

interface Replica {
  id: string;
  child: Child;
  url: string;
}

/**
 * The whole run: cluster, fleet, replicas, then the steps in order. Every process it starts is
 * stopped before it returns (also on failure).
 */
export async function runScaleOut(o: ScaleOutOptions): Promise<ScaleOutResult> {
  const t0 = performance.now();
  const r = emptyResult(o);
  const avail = memAvailableMiB();
  const fitting = enginesThatFit(o.replicas, o.engines, avail);
  r.engines = Math.min(o.engines - (o.engines % o.replicas), fitting);
  r.fit = {
    mem_available_mib: avail,
    estimate_mib: estimateMiB(o.replicas, r.engines),
    reduced: r.engines < o.engines,
    note:
      r.engines < o.engines
        ? `${o.engines.toLocaleString('en-US')} engines would need about ${estimateMiB(o.replicas, o.engines).toLocaleString('en-US')} MiB by the fit model, ${avail.toLocaleString('en-US')} MiB are available (keeping ${FIT_MODEL.reserveMiB} MiB back): ${r.engines.toLocaleString('en-US')} engines, the largest that fits`
        : `${avail.toLocaleString('en-US')} MiB available, about ${estimateMiB(o.replicas, r.engines).toLocaleString('en-US')} MiB needed by the fit model`,
  };
  o.progress(`${o.replicas} replicas × ${r.engines} engines (${r.fit.note})`);
  let cluster: BenchNatsCluster | undefined;
  let fleet: Fleet | undefined;
  const replicas: Replica[] = [];
  const watch = new FleetWatch();
  let step = 'start';
  try {
    const c0 = performance.now();
    cluster = await startBenchNatsCluster(o.logDir);
    const cluster_s = r3((performance.now() - c0) / 1000);
    const f0 = performance.now();
    fleet = await startFleet(r.engines, o.logDir, ['--token-rate', '0'], 'scaleout', Math.min(60_000 + r.engines * 20, o.deadline - performance.now()));
    const fleet_s = r3((performance.now() - f0) / 1000);
    o.progress(`cluster up in ${cluster_s} s; ${r.engines} engines listening in ${fleet.children.length} processes after ${fleet_s} s`);
    const g0 = performance.now();
    const flags = (id: string) => ['--nats-url', cluster!.url, '--replica-id', id, '--lease-secs', String(o.leaseSecs), '--log-level', o.logLevel];
    // The published entry point (the compiled CLI in dist/, or the sources through tsx when dist/
    // is not built): ten replicas starting at once on two shared cores need more than a minute.
    const startReplica = async (i: number): Promise<Replica> => {
      const id = `so-r${i}`;
      const child = new Child(
        `gateway(${id})`,
        ['bin/rlgate.mjs', 'gateway', '--host', '127.0.0.1', '--port', '0', '--enable-rl', ...flags(id)],
        join(o.logDir, `gateway-scaleout-${id}.log`),
        childEnv(),
      );
      live.add(child);
      replicas.push({ id, child, url: '' });
      const line = await child.next('listening', Math.max(30_000, Math.min(300_000, o.deadline - performance.now())));
      const rep = replicas.find((x) => x.id === id)!;
      rep.url = line.url as string;
      return rep;
    };
    // The first creates the buckets and the refit stream; the others join them, two at a time.
    await startReplica(0);
    let nextReplica = 1;
    await Promise.all(
      [0, 1].map(async () => {
        while (nextReplica < o.replicas) await startReplica(nextReplica++);
      }),
    );
    replicas.sort((a, b) => Number(a.id.slice(4)) - Number(b.id.slice(4)));
    const node_of_replica: Record<string, string> = {};
    for (const [i, n] of cluster.nodes.entries()) {
      const z = await cluster.monitor<Connz>(i, '/connz?limit=10000');
      for (const c of z.connections ?? []) if (c.name?.startsWith('rlgate-gateway-')) node_of_replica[c.name.slice('rlgate-gateway-'.length)] = n.name;
    }
    r.start = { cluster_s, fleet_s, fleet_processes: fleet.children.length, gateways_s: r3((performance.now() - g0) / 1000), node_of_replica };

    step = 'register';
    await watch.start(cluster.nodes.map((n) => n.url));
    await register(o, r, cluster, fleet, replicas, watch);
    await watch.stop();
    if (r.register?.ready_s == null || r.register.owned_serving_s == null) throw new Error('not every engine ready: the later steps need the whole fleet');

    step = 'steady';
    await sleep(2_000);
    const natsPids = cluster.nodes.map((n) => n.pid);
    r.steady = {
      rss_mib: {
        replicas: replicas.map((x) => rssMiB(x.child.pid) ?? Number.NaN),
        nats: natsPids.map((p) => rssMiB(p) ?? Number.NaN),
        fleet: fleet.children.map((c) => rssMiB(c.pid) ?? Number.NaN),
      },
      fds: { replicas: replicas.map((x) => openFds(x.child.pid) ?? Number.NaN), nats: natsPids.map((p) => openFds(p) ?? Number.NaN) },
      mem_available_mib: memAvailableMiB(),
    };

    step = 'idle';
    await idleWindow(o, r, cluster, fleet, replicas);
    step = 'refit';
    await refit(o, r, cluster, fleet, replicas);
    step = 'takeover';
    await takeover(o, r, cluster, fleet, replicas, watch);
    r.rss_end_mib = { replicas: replicas.map((x) => rssMiB(x.child.pid) ?? null), nats: natsPids.map((p) => rssMiB(p) ?? null) };
  } catch (err) {
    r.errors.push({ step, message: (err as Error).message });
  } finally {
    await watch.stop();
    await Promise.allSettled(
      replicas.map(async (x) => {
        await x.child.stop(10_000);
        live.delete(x.child);
        r.replica_log[x.id] = replicaLog(x.child.logPath);
      }),
    );
    await fleet?.stop();
    await cluster?.stop();
    r.wall_seconds = r3((performance.now() - t0) / 1000);
  }
  return r;
}

/** Counts, in a replica's log, the lines that say it lost its lease, took a refit over, or sent a call again. */
function replicaLog(path: string): ScaleOutResult['replica_log'][string] {
  const out = { lease_lost: 0, refits_taken_over: 0, calls_sent_again: 0 };
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n')) {
    if (line.includes('after this replica lost its lease')) out.lease_lost++;
    else if (line.includes('taking over a refit whose replica stopped')) out.refits_taken_over++;
    else if (line.includes('sending it again')) out.calls_sent_again++;
  }
  return out;
}

/** The refit's journal as the refits bucket holds it, its size in bytes. */
async function journalBytes(servers: string[], id: string): Promise<number | null> {
  const nc = await connect({ servers, name: 'rlgate-bench-scaleout-journal' });
  try {
    const kv = await new Kvm(nc).open(bucketName(ROOT, BUCKETS.refits));
    const e = await kv.get(id);
    return e ? e.value.length : null;
  } catch {
    return null;
  } finally {
    await nc.close().catch(() => {});
  }
}

function cpuOf(pids: Record<string, Array<number | undefined>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, list] of Object.entries(pids)) out[name] = list.reduce((s: number, p) => s + ((p === undefined ? undefined : procStat(p)?.cpuMs) ?? 0), 0);
  return out;
}

function pidsOf(cluster: BenchNatsCluster, fleet: Fleet, replicas: Replica[]): Record<string, Array<number | undefined>> {
  return { gateways: replicas.map((x) => x.child.pid), nats: cluster.nodes.map((n) => n.pid), engines: fleet.children.map((c) => c.pid) };
}

function cpuDelta(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.keys(b).map((k) => [k, Math.round(b[k]! - (a[k] ?? 0))]));
}

async function register(o: ScaleOutOptions, r: ScaleOutResult, cluster: BenchNatsCluster, fleet: Fleet, replicas: Replica[], watch: FleetWatch): Promise<void> {
  const n = r.engines;
  const per = n / replicas.length;
  const concurrency = Math.max(1, Math.ceil(o.registerConcurrency / replicas.length));
  const reg: NonNullable<ScaleOutResult['register']> = (r.register = {
    concurrency: concurrency * replicas.length,
    accepted_s: null,
    owned_serving_s: null,
    moved: 0,
    ready_s: null,
    stopped_at: null,
    cpu_ms: {},
    traffic: null,
    progress: [],
  });
  const registrar = new Map<string, number>();
  const before = await snapshot(cluster);
  const cpu0 = cpuOf(pidsOf(cluster, fleet, replicas));
  const agent = new Agent({ connections: concurrency, keepAliveTimeout: 30_000, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const t0 = performance.now();
  let posted = 0;
  let failures = 0;
  let first = '';
  let stop: string | null = null;
  // The memory guard: the machine must keep its reserve; a registration that would eat it stops.
  const guard = setInterval(() => {
    const m = memAvailableMiB();
    if (m < FIT_MODEL.reserveMiB / 2 && !stop) stop = `MemAvailable fell to ${m} MiB`;
  }, 500);
  try {
    await Promise.all(
      replicas.map(async (rep, i) => {
        const urls = fleet.urls.slice(i * per, (i + 1) * per);
        let next = 0;
        const worker = async () => {
          while (next < urls.length && !stop && performance.now() < o.deadline) {
            const url = urls[next++]!;
            registrar.set(url, i);
            try {
              const res = await request(`${rep.url}/workers`, {
                method: 'POST',
                body: JSON.stringify({ url, labels: { [LABEL_KEY]: `r${i}` } }),
                headers: JSON_HEADERS,
                dispatcher: agent,
              });
              const text = await res.body.text();
              if (res.statusCode !== 202) throw new Error(`answered ${res.statusCode}: ${text.slice(0, 200)}`);
              posted++;
            } catch (err) {
              failures++;
              first ||= `POST /workers ${url} through ${rep.id}: ${(err as Error).message}`;
            }
          }
        };
        await Promise.all(Array.from({ length: concurrency }, worker));
      }),
    );
    if (failures) throw new Error(`${failures} of ${n} registrations failed; first: ${first}`);
    if (stop || posted < n) {
      reg.stopped_at = { engines: posted, reason: stop ?? 'the time budget' };
      throw new Error(`registration stopped after ${posted} of ${n} engines: ${reg.stopped_at.reason}`);
    }
    reg.accepted_s = r3((performance.now() - t0) / 1000);
    o.progress(`all ${n} registrations accepted after ${reg.accepted_s} s; waiting for every engine owned and serving...`);
    const readiness = new Agent({ connections: 1 });
    try {
      for (;;) {
        const now = performance.now();
        if (reg.owned_serving_s === null) {
          let ok = 0;
          let moved = 0;
          for (const [id, url] of watch.urlOf) {
            const i = registrar.get(url);
            const owner = watch.owner.get(id);
            if (i === undefined || owner === undefined || watch.writer.get(id) !== owner || watch.state.get(id) !== 'serving') continue;
            ok++;
            if (owner !== replicas[i]!.id) moved++;
          }
          reg.progress.push([r3((now - t0) / 1000), ok]);
          if (ok === n) {
            reg.owned_serving_s = r3((now - t0) / 1000);
            reg.moved = moved;
          }
        }
        if (reg.owned_serving_s !== null) {
          const views = await Promise.all(
            replicas.map(async (x) => {
              const res = await request(`${x.url}/readiness`, { dispatcher: readiness, signal: AbortSignal.timeout(30_000) });
              return (await res.body.json()) as { healthy_workers?: number; total_workers?: number };
            }),
          );
          if (views.every((v) => v.healthy_workers === n && v.total_workers === n)) {
            reg.ready_s = r3((performance.now() - t0) / 1000);
            break;
          }
        }
        if (stop) throw new Error(`memory guard while waiting for ready: ${stop}`);
        if (performance.now() > o.deadline - 60_000)
          throw new Error(`not every engine ready in time: ${reg.progress.at(-1)?.[1] ?? 0} of ${n} owned and serving`);
        await sleep(500);
      }
    } finally {
      await readiness.close();
    }
    reg.cpu_ms = cpuDelta(cpu0, cpuOf(pidsOf(cluster, fleet, replicas)));
    reg.traffic = traffic(before, await snapshot(cluster));
    o.progress(`every engine owned and serving after ${reg.owned_serving_s} s, every replica ready after ${reg.ready_s} s`);
  } finally {
    clearInterval(guard);
    await agent.close();
  }
}

async function idleWindow(o: ScaleOutOptions, r: ScaleOutResult, cluster: BenchNatsCluster, fleet: Fleet, replicas: Replica[]): Promise<void> {
  const windowMs = Math.max(5_000, Math.min(o.idleSeconds * 1000, o.deadline - performance.now() - 120_000));
  o.progress(`idle window of ${windowMs / 1000} s...`);
  const cpu = () => ({
    replicas: replicas.map((x) => procStat(x.child.pid!)?.cpuMs ?? Number.NaN),
    nats: cluster.nodes.map((n) => procStat(n.pid!)?.cpuMs ?? Number.NaN),
    fleet: fleet.children.reduce((s, c) => s + (procStat(c.pid!)?.cpuMs ?? 0), 0),
  });
  const a = await snapshot(cluster);
  const c0 = cpu();
  const t0 = performance.now();
  await sleep(windowMs);
  const c1 = cpu();
  const elapsed = performance.now() - t0;
  const b = await snapshot(cluster);
  const pct = (d: number) => r1((d / elapsed) * 100);
  r.idle = {
    window_s: r3(elapsed / 1000),
    cpu_pct: {
      replicas: c1.replicas.map((v, i) => pct(v - c0.replicas[i]!)),
      nats: c1.nats.map((v, i) => pct(v - c0.nats[i]!)),
      fleet: pct(c1.fleet - c0.fleet),
    },
    traffic: traffic(a, b),
  };
}

async function refit(o: ScaleOutOptions, r: ScaleOutResult, cluster: BenchNatsCluster, fleet: Fleet, replicas: Replica[]): Promise<void> {
  const id = `so-${Date.now().toString(36)}`;
  await fleet.stats(); // forget what came before
  o.progress(`refit ${id} over all ${r.engines} engines through ${replicas[0]!.id}...`);
  const agent = new Agent({ connections: 1, headersTimeout: 0, bodyTimeout: 0 });
  const a = await snapshot(cluster);
  const cpu0 = cpuOf(pidsOf(cluster, fleet, replicas));
  const t0 = performance.now();
  try {
    const res = await request(`${replicas[0]!.url}/v1/rl/refits`, {
      method: 'POST',
      body: JSON.stringify({ refit_id: id, weight_version: '1', source: { kind: 'disk', model_path: '/models/step-1' } }),
      headers: JSON_HEADERS,
      dispatcher: agent,
      signal: AbortSignal.timeout(Math.round(Math.max(10_000, o.deadline - performance.now() - 90_000))),
    });
    const text = await res.body.text();
    const wall = performance.now() - t0;
    const cpu_ms = cpuDelta(cpu0, cpuOf(pidsOf(cluster, fleet, replicas)));
    // The journal's last writes and the events land just after the answer: read the counters once the report is in.
    await sleep(1_000);
    const b = await snapshot(cluster);
    let report: {
      total?: number;
      succeeded?: number;
      failed?: unknown[];
      skipped?: unknown[];
      duration_ms?: number;
      phases?: Record<string, number>;
      error?: string;
      message?: string;
    } = {};
    try {
      report = JSON.parse(text) as typeof report;
    } catch {
      report = { error: 'not_json', message: text.slice(0, 300) };
    }
    const tags = Object.entries(await fleet.stats()).filter(([tag]) => tag.startsWith(`refit-${id} `)) as Array<[string, TagStats]>;
    const legs = Object.fromEntries(tags.map(([tag, st]) => [tag.slice(`refit-${id} `.length), st.n]));
    const timed = tags.length === 4 && tags.every(([, st]) => st.n === r.engines);
    const failedLeg = Array.isArray(report.failed) ? (report.failed[0] as { error?: string; message?: string } | undefined) : undefined;
    r.refit = {
      id,
      status: res.statusCode,
      wall_ms: Math.round(wall),
      total: report.total ?? 0,
      succeeded: report.succeeded ?? 0,
      failed: Array.isArray(report.failed) ? report.failed.length : 0,
      skipped: report.skipped?.length ?? 0,
      duration_ms: report.duration_ms ?? null,
      phases: report.phases ?? {},
      engine_time_ms: timed ? Math.round(tags.reduce((s, [, st]) => s + st.max_service_ms, 0)) : null,
      legs,
      cpu_ms,
      traffic: traffic(a, b),
      journal_bytes: await journalBytes(
        cluster.nodes.map((n) => n.url),
        id,
      ),
      answer_bytes: Buffer.byteLength(text),
      first_error: report.error ? `${report.error}: ${report.message ?? ''}` : failedLeg ? `${failedLeg.error}: ${failedLeg.message ?? ''}` : null,
    };
    o.progress(`refit answered ${res.statusCode} after ${r.refit.wall_ms} ms: ${r.refit.succeeded}/${r.refit.total} succeeded`);
  } finally {
    await agent.close();
  }
}

async function takeover(o: ScaleOutOptions, r: ScaleOutResult, cluster: BenchNatsCluster, fleet: Fleet, replicas: Replica[], watch: FleetWatch): Promise<void> {
  const victim = replicas.at(-1)!;
  const vi = replicas.length - 1;
  const survivors = new Set(replicas.slice(0, -1).map((x) => x.id));
  await watch.start(cluster.nodes.map((n) => n.url));
  // The watch has every record once the owners it reports cover the fleet.
  const loadedBy = performance.now() + 60_000;
  while (watch.owner.size < r.engines || watch.urlOf.size < r.engines) {
    if (performance.now() > loadedBy) throw new Error(`the bench's watch holds ${watch.owner.size} leases and ${watch.urlOf.size} records of ${r.engines}`);
    await sleep(200);
  }
  // Its share, unless leases lapsed under load and moved some: what it owns now is what is taken over.
  const mine = [...watch.owner].filter(([, rep]) => rep === victim.id).map(([id]) => id);
  if (mine.length === 0) throw new Error(`${victim.id} owns no engine before the kill`);
  const t: NonNullable<ScaleOutResult['takeover']> = (r.takeover = {
    victim: victim.id,
    engines: mine.length,
    lease_s: o.leaseSecs,
    owned_ms: null,
    serving_ms: null,
    new_owners: {},
    engine_check: null,
    traffic: null,
  });
  // Land the kill at a random point of the victim's heartbeat period (a fifth of the lease).
  await sleep(Math.random() * ((o.leaseSecs * 1000) / 5) + 200);
  const a = await snapshot(cluster);
  const k0 = performance.now();
  o.progress(`SIGKILL ${victim.id}, owner of ${mine.length} engines...`);
  await victim.child.kill();
  live.delete(victim.child);
  const bound = k0 + o.leaseSecs * 1000 + 180_000;
  for (;;) {
    const now = performance.now();
    let owned = 0;
    let serving = 0;
    for (const id of mine) {
      const ow = watch.owner.get(id);
      if (ow === undefined || !survivors.has(ow)) continue;
      owned++;
      if (watch.writer.get(id) === ow && watch.state.get(id) === 'serving') serving++;
    }
    if (t.owned_ms === null && owned === mine.length) t.owned_ms = Math.round(now - k0);
    if (serving === mine.length) {
      t.serving_ms = Math.round(now - k0);
      break;
    }
    if (now > Math.min(bound, o.deadline - 30_000))
      throw new Error(`takeover not over: ${owned} owned and ${serving} serving of ${mine.length} after ${Math.round(now - k0)} ms`);
    await sleep(20);
  }
  for (const id of mine) {
    const ow = watch.owner.get(id)!;
    t.new_owners[ow] = (t.new_owners[ow] ?? 0) + 1;
  }
  await watch.stop();
  t.traffic = traffic(a, await snapshot(cluster));
  o.progress(`owned after ${t.owned_ms} ms, serving after ${t.serving_ms} ms; checking on the engines...`);
  // The engines' side: a call to every engine the victim owned, through a survivor, counted by the simulators.
  await fleet.stats();
  const tag = `takeover-${Date.now().toString(36)}`;
  const agent = new Agent({ connections: 1, headersTimeout: 120_000, bodyTimeout: 120_000 });
  try {
    const res = await request(`${replicas[0]!.url}/v1/rl/engine/flush_cache?selector=${encodeURIComponent(`${LABEL_KEY}=r${vi}`)}&bench=${tag}`, {
      method: 'POST',
      body: '{}',
      headers: JSON_HEADERS,
      dispatcher: agent,
    });
    const body = (await res.body.json()) as { succeeded?: number; total?: number };
    const seen = (await fleet.stats())[tag]?.n ?? 0;
    t.engine_check = { status: res.statusCode, succeeded: body.succeeded ?? 0, total: body.total ?? 0, engines_reached: seen };
  } finally {
    await agent.close();
  }
}

// ---- the tables ----

const int = (v: number | null | undefined) => (v == null || !Number.isFinite(v) ? '–' : Math.round(v).toLocaleString('en-US'));
const dec = (v: number | null | undefined, d = 1) => (v == null || !Number.isFinite(v) ? '–' : v.toFixed(d));
const sum = (xs: number[]) => xs.reduce((s, v) => s + (Number.isFinite(v) ? v : 0), 0);
const spread = (xs: number[], d = 0) => (xs.length ? `${dec(Math.min(...xs), d)}–${dec(Math.max(...xs), d)}` : '–');

/** The per-unit costs docs/scale.md extrapolates from, computed from a result. */
export function perUnit(r: ScaleOutResult) {
  const e = r.engines;
  const reg = r.register?.traffic;
  const idle = r.idle;
  const minutes = idle ? idle.window_s / 60 : Number.NaN;
  const kv = (t: Traffic | null | undefined, b: string) => t?.stream_writes[`KV_${bucketName(ROOT, b)}`] ?? Number.NaN;
  const kvAll = (t: Traffic | null | undefined) =>
    t
      ? Object.entries(t.stream_writes)
          .filter(([k]) => k.startsWith('KV_'))
          .reduce((s, [, v]) => s + v, 0)
      : Number.NaN;
  return {
    register: {
      kv_writes_per_engine: reg ? r3(kvAll(reg) / e) : Number.NaN,
      kv_by_bucket_per_engine: reg ? Object.fromEntries(Object.values(BUCKETS).map((b) => [b, r3(kv(reg, b) / e)])) : {},
      gateway_msgs_published_per_engine: reg ? r1(reg.gateways.msgs_in / e) : Number.NaN,
      gateway_msgs_delivered_per_engine: reg ? r1(reg.gateways.msgs_out / e) : Number.NaN,
      node_msgs_in_per_engine: reg ? r1(reg.nodes.msgs_in / e) : Number.NaN,
      gateway_cpu_ms_per_engine: r.register ? r3((r.register.cpu_ms.gateways ?? Number.NaN) / e) : Number.NaN,
      nats_cpu_ms_per_engine: r.register ? r3((r.register.cpu_ms.nats ?? Number.NaN) / e) : Number.NaN,
    },
    idle: idle
      ? {
          node_msgs_in_per_engine_per_min: r3(idle.traffic.nodes.msgs_in / e / minutes),
          node_bytes_in_per_engine_per_min: r1(idle.traffic.nodes.bytes_in / e / minutes),
          gateway_msgs_published_per_min: Math.round(idle.traffic.gateways.msgs_in / minutes),
          gateway_msgs_published_per_engine_per_min: r3(idle.traffic.gateways.msgs_in / e / minutes),
          kv_writes_per_min: Math.round(kvAll(idle.traffic) / minutes),
          heartbeats_per_replica_per_min: r1(kv(idle.traffic, BUCKETS.replicas) / r.replicas / minutes),
          gateway_cpu_pct_per_1000_engines: r3((sum(idle.cpu_pct.replicas) / e) * 1000),
        }
      : null,
    refit: r.refit?.traffic
      ? {
          node_msgs_in: r.refit.traffic.nodes.msgs_in,
          node_bytes_in: r.refit.traffic.nodes.bytes_in,
          gateway_msgs_published: r.refit.traffic.gateways.msgs_in,
          gateway_bytes_published: r.refit.traffic.gateways.bytes_in,
          kv_writes: kvAll(r.refit.traffic),
          kv_writes_per_engine: r3(kvAll(r.refit.traffic) / e),
          node_msgs_in_per_engine: r1(r.refit.traffic.nodes.msgs_in / e),
          gateway_cpu_ms_per_engine: r3((r.refit.cpu_ms.gateways ?? Number.NaN) / e),
        }
      : null,
    memory: r.steady
      ? {
          replica_rss_mib: r1(sum(r.steady.rss_mib.replicas) / r.replicas),
          fleet_rss_kib_per_engine: r1((sum(r.steady.rss_mib.fleet) * 1024) / e),
          nats_rss_mib: r1(sum(r.steady.rss_mib.nats) / 3),
          replica_fds: r1(sum(r.steady.fds.replicas) / r.replicas),
        }
      : null,
  };
}

export function scaleOutMarkdown(r: ScaleOutResult, facts: { date: string; machine: string; setup: string }): string {
  const u = perUnit(r);
  const reg = r.register;
  const lines = [
    `# Scale-out: ${r.replicas} replicas, ${r.engines.toLocaleString('en-US')} engines, a 3-node NATS cluster, ${facts.date}`,
    '',
    facts.machine,
    '',
    facts.setup,
    '',
    `Fleet size: ${r.fit.reduced ? '**reduced**: ' : ''}${r.fit.note}.${reg?.stopped_at ? ` Registration stopped at ${reg.stopped_at.engines.toLocaleString('en-US')} engines: ${reg.stopped_at.reason}.` : ''}`,
    '',
    '| step | figure |',
    '|---|---|',
    `| start: cluster / fleet (${r.start?.fleet_processes ?? '–'} processes) / replicas | ${dec(r.start?.cluster_s)} s / ${dec(r.start?.fleet_s)} s / ${dec(r.start?.gateways_s)} s |`,
    `| registration, ${r.engines.toLocaleString('en-US')} engines over ${r.replicas} replicas (${reg?.concurrency ?? '–'} in flight): all accepted / all owned and serving / every replica ready | ${dec(reg?.accepted_s)} s / ${dec(reg?.owned_serving_s)} s / ${dec(reg?.ready_s)} s${reg?.moved ? ` (${int(reg.moved)} engines had moved to another replica by then)` : ''} |`,
    `| registration CPU per engine: replicas / NATS nodes | ${dec(u.register.gateway_cpu_ms_per_engine, 2)} ms / ${dec(u.register.nats_cpu_ms_per_engine, 2)} ms |`,
    `| RSS per replica (min–max) / per NATS node / simulators per engine | ${spread(r.steady?.rss_mib.replicas ?? [])} MiB / ${spread(r.steady?.rss_mib.nats ?? [])} MiB / ${dec(u.memory?.fleet_rss_kib_per_engine)} KiB |`,
    `| open fds per replica (min–max) / per NATS node | ${spread(r.steady?.fds.replicas ?? [])} / ${spread(r.steady?.fds.nats ?? [])} |`,
    `| idle CPU (${dec(r.idle?.window_s, 0)} s), % of a core: replicas Σ (each) / NATS nodes Σ (each) / simulators | ${dec(sum(r.idle?.cpu_pct.replicas ?? []))} (${spread(r.idle?.cpu_pct.replicas ?? [], 1)}) / ${dec(sum(r.idle?.cpu_pct.nats ?? []))} (${(r.idle?.cpu_pct.nats ?? []).map((v) => dec(v)).join(', ')}) / ${dec(r.idle?.cpu_pct.fleet)} |`,
    `| refit over every engine: answer, succeeded / failed / skipped of total | ${r.refit ? `${r.refit.status}, ${int(r.refit.succeeded)} / ${int(r.refit.failed)} / ${int(r.refit.skipped)} of ${int(r.refit.total)}` : '–'} |`,
    `| refit: wall / transaction (report) / engine time / overhead (wall − engine time) | ${r.refit ? `${int(r.refit.wall_ms)} / ${int(r.refit.duration_ms)} / ${int(r.refit.engine_time_ms)} / ${r.refit.engine_time_ms === null ? '–' : int(r.refit.wall_ms - r.refit.engine_time_ms)} ms` : '–'} |`,
    `| refit: journal in the refits bucket (report included) / the HTTP answer | ${r.refit?.journal_bytes == null ? '–' : `${dec(r.refit.journal_bytes / 1024)} KiB`} / ${r.refit ? `${dec(r.refit.answer_bytes / 1024)} KiB` : '–'} |`,
    `| takeover of ${int(r.takeover?.engines)} engines after SIGKILL (lease ${r.takeover?.lease_s ?? '–'} s): all owned by survivors / all serving | ${int(r.takeover?.owned_ms)} / ${int(r.takeover?.serving_ms)} ms |`,
    `| takeover, the engines' side: a fan-out through a survivor to them | ${r.takeover?.engine_check ? `${r.takeover.engine_check.status}, ${int(r.takeover.engine_check.succeeded)} of ${int(r.takeover.engine_check.total)} succeeded, ${int(r.takeover.engine_check.engines_reached)} engines counted the call` : '–'} |`,
    '',
    'NATS traffic (counted by the three nodes: /varz summed over nodes, so a message crossing a route counts on both;',
    "/connz of the gateways' connections: published by the gateways, delivered to them; /jsz: stream writes, deletes included):",
    '',
    '| window | seconds | node msgs in | node MiB in | gateways published msgs | gateways delivered msgs | KV writes (workers / engines / owners / replicas / owed / refits) | other stream writes |',
    '|---|---:|---:|---:|---:|---:|---|---|',
    ...(
      [
        ['registration', reg?.traffic],
        ['idle', r.idle?.traffic],
        ['one refit', r.refit?.traffic],
        ['takeover', r.takeover?.traffic],
      ] as Array<[string, Traffic | null | undefined]>
    ).map(([name, t]) =>
      t
        ? `| ${name} | ${dec(t.seconds)} | ${int(t.nodes.msgs_in)} | ${dec(t.nodes.bytes_in / 2 ** 20)} | ${int(t.gateways.msgs_in)} | ${int(t.gateways.msgs_out)} | ${Object.values(
            BUCKETS,
          )
            .map((b) => int(t.stream_writes[`KV_${bucketName(ROOT, b)}`] ?? 0))
            .join(' / ')} | ${
            Object.entries(t.stream_writes)
              .filter(([k, v]) => !k.startsWith('KV_') && v)
              .map(([k, v]) => `${k} ${int(v)}`)
              .join(', ') || '–'
          } |`
        : `| ${name} | – | – | – | – | – | – | – |`,
    ),
    '',
    'Per unit (what docs/scale.md extrapolates from):',
    '',
    '| unit | figure |',
    '|---|---|',
    `| KV writes per engine registered (all buckets) | ${dec(u.register.kv_writes_per_engine, 2)} (${Object.entries(u.register.kv_by_bucket_per_engine)
      .filter(([, v]) => v)
      .map(([k, v]) => `${k} ${dec(v, 2)}`)
      .join(', ')}) |`,
    `| messages per engine registered: node msgs in / gateways published / delivered to gateways | ${dec(u.register.node_msgs_in_per_engine)} / ${dec(u.register.gateway_msgs_published_per_engine)} / ${dec(u.register.gateway_msgs_delivered_per_engine)} |`,
    `| idle: node msgs in per engine per minute / bytes | ${dec(u.idle?.node_msgs_in_per_engine_per_min, 3)} / ${dec(u.idle?.node_bytes_in_per_engine_per_min)} |`,
    `| idle: gateways publish per minute (per engine) / KV writes per minute | ${int(u.idle?.gateway_msgs_published_per_min)} (${dec(u.idle?.gateway_msgs_published_per_engine_per_min, 3)}) / ${int(u.idle?.kv_writes_per_min)} |`,
    `| lease heartbeats per replica per minute | ${dec(u.idle?.heartbeats_per_replica_per_min)} |`,
    `| idle replica CPU per 1,000 engines (Σ replicas), % of a core | ${dec(u.idle?.gateway_cpu_pct_per_1000_engines, 2)} |`,
    `| per refit: node msgs in / MiB / gateways published / KV writes (per engine) | ${u.refit ? `${int(u.refit.node_msgs_in)} / ${dec(u.refit.node_bytes_in / 2 ** 20)} / ${int(u.refit.gateway_msgs_published)} / ${int(u.refit.kv_writes)} (${dec(u.refit.kv_writes_per_engine, 2)})` : '–'} |`,
    `| per refit: replica CPU per engine | ${dec(u.refit?.gateway_cpu_ms_per_engine, 3)} ms |`,
    '',
  ];
  if (r.refit?.first_error) lines.push(`Refit, first failure: \`${r.refit.first_error.replace(/`/g, "'").slice(0, 300)}\``, '');
  if (r.takeover)
    lines.push(
      `Takeover of ${r.takeover.victim}'s engines, by new owner: ${
        Object.entries(r.takeover.new_owners)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || '–'
      }.`,
      '',
    );
  const logs = Object.entries(r.replica_log).filter(([, v]) => v.lease_lost || v.refits_taken_over || v.calls_sent_again);
  lines.push(
    logs.length
      ? `What the replicas logged: ${logs.map(([k, v]) => `${k} lost its lease ${v.lease_lost}×, took ${v.refits_taken_over} refit(s) over, sent ${v.calls_sent_again} call(s) again`).join('; ')}.`
      : 'No replica lost its lease, took a refit over or sent a call again (from their logs).',
    '',
  );
  if (r.start)
    lines.push(
      `Replica connections by node: ${Object.entries(r.start.node_of_replica)
        .map(([k, v]) => `${k} → ${v}`)
        .join(', ')}.`,
      '',
    );
  if (r.errors.length) {
    lines.push('Failures:', '');
    for (const e of r.errors) lines.push(`- step \`${e.step}\`: ${e.message.replace(/\s+/g, ' ').slice(0, 600)}`);
    lines.push('');
  }
  return lines.join('\n');
}
