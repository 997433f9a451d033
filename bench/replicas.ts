// The replica benchmarks: what a second gateway replica costs a refit, next to one replica in the
// same run, and how long a surviving replica takes to own and serve a SIGKILLed replica's engines.
// It owns the measurement loops, the result shape and the tables; the processes it measures are
// started and killed by run.ts through the handles it is given.

import { Agent, request } from 'undici';
import { ms, rounded, summarize, type Summary } from './stats.ts';
import type { TagStats } from './sim-fleet.ts';

/** The issue's goals. */
export const REPLICA_TARGETS = {
  /** Two-replica refit overhead ÷ one-replica refit overhead, at p50 and p99. */
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
  samples: { wall: number[]; overhead: number[] };
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
    samples: { wall: samples.map((x) => r3(x.wall)), overhead: timed.map((t) => r3(t.sample.wall - t.engineTime)) },
  };
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
