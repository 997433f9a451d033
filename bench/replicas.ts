// The replica benchmarks: what a second gateway replica costs a refit, next to one replica in the
// same run, and how long a surviving replica takes to own and serve a SIGKILLed replica's engines.
// It owns the measurement loops, the result shape and the tables; the processes it measures are
// started and killed by run.ts through the handles it is given.

import { Agent, request } from 'undici';
import { ms, rounded, summarize, type Summary } from './stats.ts';
import type { TagStats } from './sim-fleet.ts';

/** The issues' goals. */
export const REPLICA_TARGETS = {
  /** Refit overhead p50 (ms) with one replica owning every engine (issue 19). */
  one_replica_overhead_p50_ms: 10,
  /** Refit overhead p50 (ms) with two replicas owning half the engines each (issue 19). */
  two_replica_overhead_p50_ms: 15,
  /** Refit overhead p50 (ms) at 1,000 engines, one replica (issue 19). */
  large_overhead_p50_ms: 100,
  /** Two-replica refit overhead ÷ one-replica refit overhead, at p50 and p99 (issue 8). */
  two_replica_overhead_ratio: 1.5,
  /** A takeover (SIGKILL → every engine owned by the survivor and serving) within lease + this. */
  takeover_slack_ms: 1_000,
};

/** One gateway layout whose refits are measured: where the refit goes and what to read around it. */
export interface RefitSetup {
  name: string;
  /** Gateway replicas in the layout. */
  replicas: number;
  /** The replica the trainer sends its refits to. */
  frontUrl: string;
  engines: number;
  /** The fleet's engine-side timings of the tagged requests since the last call (sim-fleet.ts). */
  fleetStats(): Promise<Record<string, TagStats>>;
  /** CPU ms so far of each process of the layout (gateways, nats-server, engines). */
  cpuTimes(): Record<string, number>;
}

export interface RefitSetupResult {
  name: string;
  replicas: number;
  engines: number;
  iterations: number;
  errors: { count: number; first: string[] };
  /** Client-observed wall time of POST /v1/rl/refits (request sent → report read). */
  wall: Summary;
  /** The engines' own time: Σ over the phases of the slowest engine's service time in that phase. */
  engine_time: Summary;
  /** wall − engine_time, per refit. */
  overhead: Summary;
  /** The report's duration_ms: the runner's transaction, first pause sent → last resume answered. */
  report_duration: Summary;
  /** wall − report_duration: queueing, journal and the report's way back to the front. */
  outside_transaction: Summary;
  /** The report's phase times (ms), p50 / p99 each. */
  phases: Record<string, { p50: number; p99: number }>;
  /** Refits whose engine-side timing did not cover every engine in every phase (left out of engine_time and overhead). */
  untimed: number;
  cpu_ms_per_refit: Record<string, number>;
  /** CPU per refit per engine (µs): every gateway replica together, and the nats-server. */
  cpu_us_per_engine: { gateway: number; nats_server: number };
  samples: { wall: number[]; overhead: number[] };
}

/** CPU µs per refit per engine from the processes' CPU ms per refit: the gateways summed. */
export function cpuPerEngine(cpu: Record<string, number>, engines: number): { gateway: number; nats_server: number } {
  const gw = Object.entries(cpu)
    .filter(([k]) => k.startsWith('gateway'))
    .reduce((sum, [, v]) => sum + v, 0);
  const r1 = (v: number) => Math.round(v * 10) / 10;
  return { gateway: r1((gw * 1000) / engines), nats_server: r1(((cpu.nats_server ?? Number.NaN) * 1000) / engines) };
}

export interface RefitComparison {
  iterations: number;
  warmup: number;
  truncated: boolean;
  setups: RefitSetupResult[];
  /** second setup ÷ first setup. */
  ratio: { overhead_p50: number; overhead_p99: number; wall_p50: number; wall_p99: number };
  wall_seconds: number;
}

interface RefitSample {
  id: string;
  wall: number;
  duration: number;
  phases: Record<string, number>;
}

const MAX_ERROR_SHARE = 0.05;

/**
 * Refits through each setup in turn, alternating which goes first, `iterations` times after
 * `warmup` unmeasured ones. Every refit is a disk refit of every engine to a new version.
 */
export async function measureRefits(opts: {
  setups: RefitSetup[];
  iterations: number;
  warmup: number;
  deadline: number;
  label: string;
}): Promise<RefitComparison> {
  const started = performance.now();
  const agent = new Agent({ connections: 2, headersTimeout: 120_000, bodyTimeout: 120_000, keepAliveTimeout: 60_000 });
  const versions = new Map<string, number>();
  const refit = async (s: RefitSetup, id: string): Promise<RefitSample> => {
    const v = (versions.get(s.name) ?? 0) + 1;
    versions.set(s.name, v);
    const body = JSON.stringify({ refit_id: id, weight_version: String(v), source: { kind: 'disk', model_path: `/models/step-${v}` } });
    const t0 = performance.now();
    const res = await request(`${s.frontUrl}/v1/rl/refits`, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent });
    const text = await res.body.text();
    const wall = performance.now() - t0;
    const report = JSON.parse(text) as { succeeded?: number; total?: number; duration_ms?: number; phases?: Record<string, number> };
    if (res.statusCode !== 200 || report.succeeded !== s.engines) {
      throw new Error(`${s.name}: refit ${id} answered ${res.statusCode} with ${report.succeeded}/${report.total} succeeded: ${text.slice(0, 300)}`);
    }
    return { id, wall, duration: report.duration_ms ?? Number.NaN, phases: report.phases ?? {} };
  };

  try {
    for (let i = 0; i < opts.warmup && performance.now() < opts.deadline; i++) {
      for (const s of opts.setups) await refit(s, `${opts.label}-${s.name}-warmup-${i}`);
    }
    for (const s of opts.setups) await s.fleetStats(); // forget the warm-up's timings
    const cpuBefore = opts.setups.map((s) => s.cpuTimes());
    const samples: RefitSample[][] = opts.setups.map(() => []);
    const errors = opts.setups.map(() => ({ count: 0, first: [] as string[] }));
    let done = 0;
    for (let i = 0; i < opts.iterations && performance.now() < opts.deadline; i++, done++) {
      // Alternate who goes first, so neither layout always runs right after the other's work.
      const order = opts.setups.map((_, k) => k);
      if (i % 2 === 1) order.reverse();
      for (const k of order) {
        const s = opts.setups[k]!;
        try {
          samples[k]!.push(await refit(s, `${opts.label}-${s.name}-${i}`));
        } catch (err) {
          const e = errors[k]!;
          e.count++;
          if (e.first.length < 5) e.first.push(`#${i}: ${(err as Error).message}`);
          if (e.count > Math.max(3, opts.iterations * MAX_ERROR_SHARE)) throw new Error(`too many refit errors in ${s.name}; first: ${e.first.join(' | ')}`);
        }
      }
    }
    const results: RefitSetupResult[] = [];
    for (const [k, s] of opts.setups.entries()) {
      const after = s.cpuTimes();
      const before = cpuBefore[k]!;
      const cpu: Record<string, number> = {};
      for (const [name, v] of Object.entries(after))
        if (before[name] !== undefined && done > 0) cpu[name] = Math.round(((v - before[name]!) / done) * 1000) / 1000;
      results.push(setupResult(s, samples[k]!, errors[k]!, await s.fleetStats(), cpu));
    }
    const [a, b] = results;
    const r2 = (x: number, y: number) => Math.round((x / y) * 100) / 100;
    return {
      iterations: done,
      warmup: opts.warmup,
      truncated: done < opts.iterations,
      setups: results,
      ratio:
        b && a
          ? {
              overhead_p50: r2(b.overhead.p50, a.overhead.p50),
              overhead_p99: r2(b.overhead.p99, a.overhead.p99),
              wall_p50: r2(b.wall.p50, a.wall.p50),
              wall_p99: r2(b.wall.p99, a.wall.p99),
            }
          : { overhead_p50: Number.NaN, overhead_p99: Number.NaN, wall_p50: Number.NaN, wall_p99: Number.NaN },
      wall_seconds: Math.round(performance.now() - started) / 1000,
    };
  } finally {
    await agent.close();
  }
}

function setupResult(
  s: RefitSetup,
  samples: RefitSample[],
  errors: { count: number; first: string[] },
  fleet: Record<string, TagStats>,
  cpu: Record<string, number>,
): RefitSetupResult {
  // The fleet tags each refit call `refit-<id> <path>`: one tag per phase.
  const byRefit = new Map<string, TagStats[]>();
  for (const [tag, st] of Object.entries(fleet)) {
    const sp = tag.indexOf(' ');
    if (!tag.startsWith('refit-') || sp < 0) continue;
    const id = tag.slice('refit-'.length, sp);
    const list = byRefit.get(id);
    if (list) list.push(st);
    else byRefit.set(id, [st]);
  }
  let untimed = 0;
  const timed: Array<{ sample: RefitSample; engineTime: number }> = [];
  for (const sample of samples) {
    const phases = byRefit.get(sample.id) ?? [];
    // pause, load, version check, resume: each reached every engine once.
    if (phases.length !== 4 || phases.some((p) => p.n !== s.engines)) {
      untimed++;
      continue;
    }
    timed.push({ sample, engineTime: phases.reduce((sum, p) => sum + p.max_service_ms, 0) });
  }
  const phaseNames = [...new Set(samples.flatMap((x) => Object.keys(x.phases)))];
  const r3 = (v: number) => Math.round(v * 1000) / 1000;
  return {
    name: s.name,
    replicas: s.replicas,
    engines: s.engines,
    iterations: samples.length,
    errors,
    wall: rounded(summarize(samples.map((x) => x.wall))),
    engine_time: rounded(summarize(timed.map((t) => t.engineTime))),
    overhead: rounded(summarize(timed.map((t) => t.sample.wall - t.engineTime))),
    report_duration: rounded(summarize(samples.map((x) => x.duration))),
    outside_transaction: rounded(summarize(samples.map((x) => x.wall - x.duration))),
    phases: Object.fromEntries(
      phaseNames.map((p) => {
        const sm = summarize(samples.map((x) => x.phases[p] ?? Number.NaN).filter(Number.isFinite));
        return [p, { p50: sm.p50, p99: sm.p99 }];
      }),
    ),
    untimed,
    cpu_ms_per_refit: cpu,
    cpu_us_per_engine: cpuPerEngine(cpu, s.engines),
    samples: { wall: samples.map((x) => r3(x.wall)), overhead: timed.map((t) => r3(t.sample.wall - t.engineTime)) },
  };
}

/** A refit of a large fleet through one replica, next to the same calls sent straight to the engines. */
export interface LargeRefitResult {
  engines: number;
  iterations: number;
  warmup: number;
  truncated: boolean;
  errors: { count: number; first: string[] };
  /** Client-observed wall time of POST /v1/rl/refits. */
  wall: Summary;
  /** The same four phases sent by this process straight to the engines (pause, load 32 at a time, version read, resume). */
  direct_wall: Summary;
  /** wall − direct wall, paired per iteration: what the gateway adds over a client calling the engines itself. */
  overhead: Summary;
  /** Σ over the phases of the slowest engine's service time (the engines share one process here: see the notes). */
  engine_time: Summary;
  /** wall − engine_time, per refit. */
  overhead_vs_engine_time: Summary;
  report_duration: Summary;
  phases: Record<string, { p50: number; p99: number }>;
  /** CPU ms per refit of the gateway and its nats-server, read around each refit alone. */
  cpu_ms_per_refit: Record<string, number>;
  cpu_us_per_engine: { gateway: number; nats_server: number };
  samples: { wall: number[]; direct_wall: number[] };
  wall_seconds: number;
}

/** Load calls in flight at once, as the gateway sends weight loads (docs/performance.md, "Concurrency"). */
const LOAD_CONCURRENCY = 32;

/**
 * `iterations` refits of every engine through `frontUrl` after `warmup` unmeasured ones, each
 * paired with the same four phases sent straight to the engines by this process (the yardstick:
 * the engines share processes and cores with everything else here, so their own time is what a
 * client that calls them directly takes). Every refit and direct load brings a new version.
 */
export async function measureLargeRefit(opts: {
  frontUrl: string;
  engineUrls: string[];
  fleetStats(): Promise<Record<string, TagStats>>;
  cpuTimes(): Record<string, number>;
  iterations: number;
  warmup: number;
  deadline: number;
  label: string;
}): Promise<LargeRefitResult> {
  const started = performance.now();
  const n = opts.engineUrls.length;
  const agent = new Agent({ connections: 2, headersTimeout: 300_000, bodyTimeout: 300_000, keepAliveTimeout: 60_000 });
  const engines = new Agent({ connections: 1, keepAliveTimeout: 60_000, headersTimeout: 60_000, bodyTimeout: 60_000 });
  let version = 1_000_000; // above anything the small layouts reach: the fleet's version only rises
  const refit = async (id: string): Promise<RefitSample> => {
    version++;
    const body = JSON.stringify({ refit_id: id, weight_version: String(version), source: { kind: 'disk', model_path: `/models/step-${version}` } });
    const t0 = performance.now();
    const res = await request(`${opts.frontUrl}/v1/rl/refits`, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent });
    const text = await res.body.text();
    const wall = performance.now() - t0;
    const report = JSON.parse(text) as { succeeded?: number; total?: number; duration_ms?: number; phases?: Record<string, number> };
    if (res.statusCode !== 200 || report.succeeded !== n)
      throw new Error(`refit ${id} answered ${res.statusCode} with ${report.succeeded}/${report.total} succeeded: ${text.slice(0, 300)}`);
    return { id, wall, duration: report.duration_ms ?? Number.NaN, phases: report.phases ?? {} };
  };
  const call = async (url: string, method: 'GET' | 'POST', path: string, tag: string, body?: unknown) => {
    const res = await request(`${url}/${path}`, {
      method,
      dispatcher: engines,
      headers: { 'x-request-id': tag, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    await res.body.text();
    if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`${method} ${url}/${path} answered ${res.statusCode}`);
  };
  const fan = async (limit: number, each: (url: string) => Promise<void>) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(limit, n) }, async () => {
        for (let i = next++; i < n; i = next++) await each(opts.engineUrls[i]!);
      }),
    );
  };
  const direct = async (id: string): Promise<number> => {
    version++;
    const tag = `refit-${id}`;
    const load = { model_path: `/models/step-${version}`, weight_version: String(version), flush_cache: true };
    const t0 = performance.now();
    await fan(n, (u) => call(u, 'POST', 'pause_generation', tag, {}));
    await fan(LOAD_CONCURRENCY, (u) => call(u, 'POST', 'update_weights_from_disk', tag, load));
    await fan(n, (u) => call(u, 'GET', 'model_info', tag));
    await fan(n, (u) => call(u, 'POST', 'continue_generation', tag, {}));
    return performance.now() - t0;
  };
  const samples: RefitSample[] = [];
  const directs: number[] = [];
  const errors = { count: 0, first: [] as string[] };
  const cpu: Record<string, number> = {};
  let done = 0;
  try {
    for (let i = 0; i < opts.warmup && performance.now() < opts.deadline; i++) {
      await refit(`${opts.label}-large-warmup-${i}`);
      await direct(`${opts.label}-large-direct-warmup-${i}`);
    }
    await opts.fleetStats(); // forget the warm-up's timings
    for (let i = 0; i < opts.iterations && performance.now() < opts.deadline; i++, done++) {
      // Alternate who goes first, so neither always runs right after the other's work.
      const viaGateway = async () => {
        const before = opts.cpuTimes();
        try {
          samples.push(await refit(`${opts.label}-large-${i}`));
        } catch (err) {
          errors.count++;
          if (errors.first.length < 5) errors.first.push(`#${i}: ${(err as Error).message}`);
          if (errors.count > 3) throw new Error(`too many refit errors at ${n} engines; first: ${errors.first.join(' | ')}`);
        }
        for (const [k, v] of Object.entries(opts.cpuTimes())) cpu[k] = (cpu[k] ?? 0) + v - (before[k] ?? v);
      };
      const straight = async () => {
        directs.push(await direct(`${opts.label}-large-direct-${i}`));
      };
      if (i % 2 === 0) {
        await viaGateway();
        await straight();
      } else {
        await straight();
        await viaGateway();
      }
    }
  } finally {
    await agent.close();
    await engines.close();
  }
  const fleet = await opts.fleetStats();
  const engineTime = new Map<string, number>();
  for (const [tag, st] of Object.entries(fleet)) {
    const sp = tag.indexOf(' ');
    if (!tag.startsWith('refit-') || sp < 0) continue;
    const id = tag.slice('refit-'.length, sp);
    engineTime.set(id, (engineTime.get(id) ?? 0) + st.max_service_ms);
  }
  const perRefit: Record<string, number> = {};
  for (const [k, v] of Object.entries(cpu)) perRefit[k] = samples.length ? Math.round((v / samples.length) * 1000) / 1000 : Number.NaN;
  const paired = samples.map((x, i) => x.wall - (directs[i] ?? Number.NaN)).filter(Number.isFinite);
  const timed = samples.filter((x) => engineTime.has(x.id));
  const phaseNames = [...new Set(samples.flatMap((x) => Object.keys(x.phases)))];
  const r1 = (v: number) => Math.round(v * 10) / 10;
  return {
    engines: n,
    iterations: done,
    warmup: opts.warmup,
    truncated: done < opts.iterations,
    errors,
    wall: rounded(summarize(samples.map((x) => x.wall))),
    direct_wall: rounded(summarize(directs)),
    overhead: rounded(summarize(paired)),
    engine_time: rounded(summarize(timed.map((x) => engineTime.get(x.id)!))),
    overhead_vs_engine_time: rounded(summarize(timed.map((x) => x.wall - engineTime.get(x.id)!))),
    report_duration: rounded(summarize(samples.map((x) => x.duration))),
    phases: Object.fromEntries(
      phaseNames.map((p) => {
        const sm = summarize(samples.map((x) => x.phases[p] ?? Number.NaN).filter(Number.isFinite));
        return [p, { p50: sm.p50, p99: sm.p99 }];
      }),
    ),
    cpu_ms_per_refit: perRefit,
    cpu_us_per_engine: cpuPerEngine(perRefit, n),
    samples: { wall: samples.map((x) => r1(x.wall)), direct_wall: directs.map(r1) },
    wall_seconds: Math.round(performance.now() - started) / 1000,
  };
}

/** POST /workers for each URL through `gatewayUrl`, `inFlight` at a time, each answered 202; readiness is the caller's. */
export async function registerConcurrently(gatewayUrl: string, urls: string[], inFlight: number): Promise<void> {
  const agent = new Agent({ connections: inFlight });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: Math.min(inFlight, urls.length) }, async () => {
        for (let i = next++; i < urls.length; i = next++) {
          const res = await request(`${gatewayUrl}/workers`, {
            method: 'POST',
            body: JSON.stringify({ url: urls[i] }),
            headers: { 'content-type': 'application/json' },
            dispatcher: agent,
          });
          const text = await res.body.text();
          if (res.statusCode !== 202) throw new Error(`POST /workers ${urls[i]} answered ${res.statusCode}: ${text}`);
        }
      }),
    );
  } finally {
    await agent.close();
  }
}

/** A gateway replica the takeover benchmark may start and SIGKILL. */
export interface ReplicaHandle {
  id: string;
  url: string;
  kill(): Promise<void>;
}

export interface TakeoverResult {
  lease_secs: number;
  engines: number;
  trials: number;
  truncated: boolean;
  /** SIGKILL of the owner → the survivor lists every engine with itself as owner. */
  owned: Summary;
  /** SIGKILL of the owner → the survivor lists every engine owned by it and `serving`. */
  serving: Summary;
  /** Trials whose takeover did not finish within lease + 30 s (not in the summaries). */
  timed_out: number;
  samples: { owned: number[]; serving: number[] };
  wall_seconds: number;
}

type Row = { url: string; owner: string | null; state: string; health: string };

const POLL_MS = 20;

async function rows(url: string, agent: Agent): Promise<Row[]> {
  const res = await request(`${url}/v1/rl/workers`, { dispatcher: agent });
  const body = (await res.body.json()) as { workers?: Row[] };
  return body.workers ?? [];
}

/** Waits until the replica lists `n` engines, each ready, serving and owned by `owner`. */
export async function settled(url: string, n: number, owner: (row: Row) => boolean, timeoutMs: number, what: string): Promise<void> {
  const agent = new Agent({ connections: 1 });
  try {
    const until = performance.now() + timeoutMs;
    let last = '';
    while (performance.now() < until) {
      const r = await rows(url, agent).catch(() => []);
      if (r.length === n && r.every((w) => w.health === 'ready' && w.state === 'serving' && owner(w))) return;
      last = `${r.length} listed, ${r.filter((w) => w.state === 'serving').length} serving, owners ${JSON.stringify([...new Set(r.map((w) => w.owner))])}`;
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error(`${what}: not settled within ${timeoutMs} ms (${last})`);
  } finally {
    await agent.close();
  }
}

/**
 * `trials` takeovers: every engine owned by one replica, another replica running beside it;
 * SIGKILL the owner and poll the survivor's GET /v1/rl/workers every 20 ms until it owns every
 * engine, then until every engine is also `serving` again. A fresh replica is started after
 * each kill, and the survivor is the next trial's victim.
 */
export async function measureTakeover(opts: {
  leaseSecs: number;
  engineUrls: string[];
  trials: number;
  deadline: number;
  startReplica(): Promise<ReplicaHandle>;
  register(frontUrl: string, engineUrls: string[]): Promise<void>;
}): Promise<TakeoverResult> {
  const started = performance.now();
  const n = opts.engineUrls.length;
  const leaseMs = opts.leaseSecs * 1000;
  const boundMs = leaseMs + 30_000;
  const agent = new Agent({ connections: 1, keepAliveTimeout: 60_000 });
  let owner = await opts.startReplica();
  let survivor = await opts.startReplica();
  await opts.register(owner.url, opts.engineUrls);
  const owned: number[] = [];
  const serving: number[] = [];
  let timedOut = 0;
  let done = 0;
  try {
    for (let t = 0; t < opts.trials && performance.now() + boundMs < opts.deadline; t++, done++) {
      const victim = owner.id;
      await settled(survivor.url, n, (w) => w.owner === victim, 60_000, `before takeover ${t}, ${survivor.id}`);
      // Land the kill at a random point of the victim's heartbeat period (lease / 5).
      await new Promise((r) => setTimeout(r, Math.random() * (leaseMs / 5) + 200));
      const t0 = performance.now();
      const killed = owner.kill();
      let ownedAt: number | undefined;
      let servingAt: number | undefined;
      while (performance.now() - t0 < boundMs) {
        const r = await rows(survivor.url, agent).catch(() => []);
        const now = performance.now();
        const mine = r.length === n && r.every((w) => w.owner === survivor.id);
        if (mine && ownedAt === undefined) ownedAt = now;
        if (mine && r.every((w) => w.state === 'serving')) {
          servingAt = now;
          break;
        }
        await new Promise((res) => setTimeout(res, POLL_MS));
      }
      await killed;
      if (ownedAt === undefined || servingAt === undefined) timedOut++;
      else {
        owned.push(ownedAt - t0);
        serving.push(servingAt - t0);
      }
      // The survivor owns the fleet now and is the next victim; a fresh replica stands beside it.
      owner = survivor;
      survivor = await opts.startReplica();
    }
  } finally {
    await agent.close();
  }
  const r1 = (v: number) => Math.round(v * 10) / 10;
  return {
    lease_secs: opts.leaseSecs,
    engines: n,
    trials: done,
    truncated: done < opts.trials,
    owned: rounded(summarize(owned)),
    serving: rounded(summarize(serving)),
    timed_out: timedOut,
    samples: { owned: owned.map(r1), serving: serving.map(r1) },
    wall_seconds: Math.round(performance.now() - started) / 1000,
  };
}

export interface ReplicasResult {
  refits: RefitComparison | null;
  /** The refit at `--refit-large-engines` engines (null when skipped). */
  large: LargeRefitResult | null;
  takeovers: TakeoverResult[];
  notes: string[];
}

export function replicasMarkdown(r: ReplicasResult, facts: { date: string; machine: string; setup: string }): string {
  const pair = (s: Summary) => `${ms(s.p50)} / ${ms(s.p99)}`;
  const lines = [`# Gateway replicas: refit overhead and takeover time, ${facts.date}`, '', facts.machine, '', facts.setup, ''];
  const c = r.refits;
  if (c) {
    const goal = REPLICA_TARGETS.two_replica_overhead_ratio;
    const met = (x: number) => (x <= goal ? 'met' : '**missed**');
    lines.push(
      `## Refit overhead, two replicas vs one (${c.iterations} refits per layout${c.truncated ? ', cut short by the time budget' : ''}, after ${c.warmup} unmeasured)`,
      '',
      'Wall = client-observed time of `POST /v1/rl/refits` (disk source, every engine, answered 200).',
      "Engine time = Σ over the four phases (pause, load, version check, resume) of the slowest engine's",
      'service time in that phase, measured inside the simulator process. Overhead = wall − engine time,',
      "per refit. Transaction = the report's `duration_ms` (first pause sent → last resume answered, on",
      "the runner); outside = wall − transaction (queueing on the stream, the journal, the report's way",
      'back to the replica the trainer called). Percentiles are nearest-rank; all values in ms.',
      '',
      '| layout | replicas | engines | wall p50 / p99 | engine time p50 / p99 | overhead p50 / p99 | transaction p50 / p99 | outside p50 / p99 | errors |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...c.setups.map(
        (s) =>
          `| ${s.name} | ${s.replicas} | ${s.engines} | ${pair(s.wall)} | ${pair(s.engine_time)} | ${pair(s.overhead)} | ${pair(s.report_duration)} | ${pair(s.outside_transaction)} | ${s.errors.count}${s.untimed ? ` (${s.untimed} untimed)` : ''} |`,
      ),
      '',
      ...c.setups.map((s) => {
        const target = s.replicas === 1 ? REPLICA_TARGETS.one_replica_overhead_p50_ms : REPLICA_TARGETS.two_replica_overhead_p50_ms;
        return `- **${s.name}**: overhead p50 **${ms(s.overhead.p50)} ms** (goal ≤ ${target} ms: ${s.overhead.p50 <= target ? 'met' : '**missed**'}), p99 ${ms(s.overhead.p99)} ms.`;
      }),
      '',
      `Two replicas ÷ one: overhead p50 **${c.ratio.overhead_p50.toFixed(2)}×** (goal ≤ ${goal}×: ${met(c.ratio.overhead_p50)}), ` +
        `overhead p99 **${c.ratio.overhead_p99.toFixed(2)}×** (goal ≤ ${goal}×: ${met(c.ratio.overhead_p99)}); wall p50 ${c.ratio.wall_p50.toFixed(2)}×, wall p99 ${c.ratio.wall_p99.toFixed(2)}×.`,
      '',
      "Phase times from the reports (the runner's clock), p50 / p99:",
      '',
      `| layout | ${Object.keys(c.setups[0]?.phases ?? {}).join(' | ')} |`,
      `|---|${Object.keys(c.setups[0]?.phases ?? {})
        .map(() => '---:')
        .join('|')}|`,
      ...c.setups.map(
        (s) =>
          `| ${s.name} | ${Object.keys(c.setups[0]?.phases ?? {})
            .map((p) => (s.phases[p] ? `${ms(s.phases[p]!.p50)} / ${ms(s.phases[p]!.p99)}` : '–'))
            .join(' | ')} |`,
      ),
      '',
      'CPU time per refit by process (/proc, over the measured loop; idle probes included):',
      '',
      '| layout | ' + [...new Set(c.setups.flatMap((s) => Object.keys(s.cpu_ms_per_refit)))].join(' | ') + ' |',
      '|---|' + [...new Set(c.setups.flatMap((s) => Object.keys(s.cpu_ms_per_refit)))].map(() => '---:').join('|') + '|',
      ...c.setups.map(
        (s) =>
          `| ${s.name} | ${[...new Set(c.setups.flatMap((x) => Object.keys(x.cpu_ms_per_refit)))].map((k) => ms(s.cpu_ms_per_refit[k] ?? Number.NaN)).join(' | ')} |`,
      ),
      '',
      'CPU per refit per engine (µs; the gateways together): ' +
        c.setups.map((s) => `${s.name}: gateway ${s.cpu_us_per_engine.gateway}, nats-server ${s.cpu_us_per_engine.nats_server}`).join('; ') +
        '.',
      '',
    );
  }
  const L = r.large;
  if (L) {
    const goal = REPLICA_TARGETS.large_overhead_p50_ms;
    lines.push(
      `## A refit of ${L.engines.toLocaleString('en-US')} engines, one replica (${L.iterations} refits${L.truncated ? ', cut short by the time budget' : ''}, after ${L.warmup} unmeasured)`,
      '',
      'Each refit through the gateway is paired with the same four phases sent by this process straight to the',
      'engines (pause, load 32 at a time as the gateway does, version read, resume; each phase to every engine),',
      'alternating which goes first. The engines share one simulator process and the machine with the gateway,',
      'so what they take is what a client calling them directly takes: overhead = gateway wall − direct wall,',
      "paired per refit. Engine time (Σ over phases of the slowest engine's service time) is shown for",
      'reference. CPU read around each gateway refit alone. ms unless said.',
      '',
      '| engines | wall p50 / p99 | direct p50 / p99 | overhead p50 / p99 | engine time p50 / p99 | wall − engine time p50 | transaction p50 | CPU per refit, gateway / nats-server | per engine, µs | errors |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      `| ${L.engines} | ${pair(L.wall)} | ${pair(L.direct_wall)} | ${pair(L.overhead)} | ${pair(L.engine_time)} | ${ms(L.overhead_vs_engine_time.p50)} | ${ms(L.report_duration.p50)} | ${ms(L.cpu_ms_per_refit.gateway ?? Number.NaN)} / ${ms(L.cpu_ms_per_refit.nats_server ?? Number.NaN)} | ${L.cpu_us_per_engine.gateway} / ${L.cpu_us_per_engine.nats_server} | ${L.errors.count} |`,
      '',
      `Overhead p50 at ${L.engines.toLocaleString('en-US')} engines: **${ms(L.overhead.p50)} ms** (goal ≤ ${goal} ms: ${L.overhead.p50 <= goal ? 'met' : '**missed**'}).`,
      '',
      "Phase times from the reports (the runner's clock), p50 / p99: " +
        Object.entries(L.phases)
          .map(([p, v]) => `${p} ${ms(v.p50)} / ${ms(v.p99)}`)
          .join(', ') +
        '.',
      '',
    );
  }
  if (r.takeovers.length > 0) {
    const slack = REPLICA_TARGETS.takeover_slack_ms;
    lines.push(
      '## Takeover time',
      '',
      'Two replicas on one nats-server; every engine owned by one of them. SIGKILL of the owner, then the',
      "survivor's `GET /v1/rl/workers` is polled every 20 ms. Owned = every engine listed with the",
      'survivor as owner; serving = owned and every engine `serving` again (rediscovered by its new owner).',
      "Measured from the SIGKILL; the kill lands at a random point of the victim's heartbeat period.",
      '',
      '| lease | engines | trials | owned p50 / max | serving p50 / max | goal (serving ≤ lease + 1 s) |',
      '|---:|---:|---:|---:|---:|---|',
      ...r.takeovers.map((t) => {
        const goal = t.lease_secs * 1000 + slack;
        const verdict = t.timed_out > 0 ? `**missed** (${t.timed_out} timed out)` : t.serving.max <= goal ? `met (≤ ${goal} ms)` : `**missed** (> ${goal} ms)`;
        return `| ${t.lease_secs} s | ${t.engines} | ${t.trials}${t.truncated ? ' (cut short)' : ''} | ${ms(t.owned.p50)} / ${ms(t.owned.max)} | ${ms(t.serving.p50)} / ${ms(t.serving.max)} | ${verdict} |`;
      }),
      '',
      'Every trial, serving (ms): ' + r.takeovers.map((t) => `lease ${t.lease_secs} s: ${t.samples.serving.join(', ')}`).join('; ') + '.',
      '',
    );
  }
  if (r.notes.length) lines.push(...r.notes.map((n) => `- ${n}`), '');
  return lines.join('\n');
}
