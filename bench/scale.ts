// The scale benchmark: one gateway in front of thousands of engines. For one fleet size it
// registers every engine (bounded client parallelism) and times it, reads the gateway's memory and
// its CPU at idle, fans a call out to 1,000 engines and lists the fleet. It fills a result as it
// goes, so a failure part-way (EMFILE, a timeout) leaves what was measured and says what failed.
// It owns the measurement, the result shape and the tables; it never starts or stops a process
// (run.ts does).

import { Agent, request } from 'undici';
import { mainThreadCpuMs, openFds, procStat, rssMiB } from './children.ts';
import { ms, rounded, summarize, type Summary } from './stats.ts';

/** The goals: issue 19's fleet goals (ready, RSS, idle CPU, listing); the fan-out's from issue 9. */
export const SCALE_GOALS = {
  /** First POST /workers → every engine listed `ready` by /v1/rl/workers. */
  register_ready_s: 5,
  /** Gateway process + its nats-server, resident, at any reading. */
  rss_mib: 400,
  /** Gateway process + its nats-server over the idle window, % of one core. */
  idle_cpu_pct: 3,
  /** Client-observed fan-out to 1,000 engines, p50 and p99. */
  fanout_ms: 50,
  /** GET /v1/rl/workers and GET /workers, p50 and p99. */
  listing_ms: 100,
};

/** The engines the fan-out addresses: the first 1,000 registered carry this label. */
export const FANOUT_GROUP = { key: 'bench_group', value: 'g0', engines: 1000 };
export const FANOUT_ROUTE = 'flush_cache';
/** Rows of the paged listing the bench times (its `total` still counts the whole fleet). */
export const LISTING_PAGE = 1000;

export interface ScaleOptions {
  gatewayUrl: string;
  engineUrls: string[];
  gatewayPid: number | undefined;
  natsPid: number | undefined;
  /** performance.now() by which this size must be done; every wait is cut there. */
  deadline: number;
  idleSeconds: number;
  registerConcurrency: number;
  fanouts: number;
  fanoutWarmup: number;
  listings: number;
  progress(line: string): void;
}

interface Rss {
  gateway: number | null;
  nats_server: number | null;
  total: number | null;
}

interface Timed {
  calls: number;
  wall: Summary;
  bytes: number;
}

export interface ScaleSizeResult {
  engines: number;
  /**
   * Steps that failed, with what they said. A failed start or registration ends the size; the
   * idle window, the fan-out and the listings are independent of each other and each still runs.
   */
  errors: Array<{ step: string; message: string }>;
  fleet: { processes: number; start_s: number; fd_limits: Array<number | null> } | null;
  gateway: { start_s: number; fd_limit: number | null } | null;
  register: {
    concurrency: number;
    labelled: number;
    /** First POST sent → every POST answered 202. */
    accepted_s: number | null;
    /** First POST sent → /v1/rl/workers lists every engine ready (poll resolution below). */
    ready_s: number | null;
    polls: number;
    /** Longest single poll of /v1/rl/workers while waiting (the poll waits at least as long before the next). */
    max_poll_ms: number;
    /** [seconds since the first POST, engines ready] at each poll. */
    progress: Array<[number, number]>;
    /**
     * CPU (ms, /proc) of the gateway and of its nats-server from the first POST to every engine
     * ready, per engine: what registering one engine costs, whatever the machine's load (wall
     * time is not). The readiness polls are in it.
     */
    cpu_ms_per_engine: { gateway: number; nats_server: number } | null;
  } | null;
  rss_mib: { ready: Rss | null; after_idle: Rss | null; end: Rss | null };
  open_fds: { gateway_at_ready: number | null; nats_server_at_ready: number | null };
  idle: {
    window_s: number;
    truncated: boolean;
    gateway_pct: number;
    /** The gateway's main thread (JavaScript, and the GC pauses in it); the rest of gateway_pct is its other threads (GC helpers, libuv pool). */
    gateway_main_thread_pct: number;
    nats_server_pct: number;
    total_pct: number;
    slices_pct: number[];
  } | null;
  fanout: {
    engines: number;
    selector: string;
    iterations: number;
    warmup: number;
    errors: number;
    envelope: Summary;
    /** envelope − max results[*].latency_ms (whole ms) per fan-out. */
    overhead: Summary;
    cpu_ms_per_fanout: { gateway: number; nats_server: number };
    /**
     * The yardstick: the same call from this process to the same engines at once (undici,
     * Promise.all), after the gateway's, the same counts: what the engines and the machine allow.
     */
    direct_envelope: Summary | null;
  } | null;
  /** `rl_workers_page`: GET /v1/rl/workers?limit=1000, the first page (the listings page since issue 19). */
  listing: { rl_workers: Timed; workers: Timed; rl_workers_page?: Timed } | null;
  /** The gateway's first error lines (pino level ≥ 50, or about EMFILE or the open-file limit), from its log. */
  gateway_errors: string[];
  /** The gateway's warnings, counted by message (numbers folded to N), the most frequent first. */
  gateway_warnings: Record<string, number>;
  wall_seconds: number;
}

export function emptyScaleResult(engines: number): ScaleSizeResult {
  return {
    engines,
    errors: [],
    fleet: null,
    gateway: null,
    register: null,
    rss_mib: { ready: null, after_idle: null, end: null },
    open_fds: { gateway_at_ready: null, nats_server_at_ready: null },
    idle: null,
    fanout: null,
    listing: null,
    gateway_errors: [],
    gateway_warnings: {},
    wall_seconds: 0,
  };
}

const JSON_HEADERS = { 'content-type': 'application/json' };
const sleep = (msTime: number) => new Promise((r) => setTimeout(r, Math.max(0, msTime)));
const r3 = (v: number) => Math.round(v * 1000) / 1000;

/** A timeout for one request: 30 s, or what is left before `deadline` (at least 1 s). */
function timeoutTo(deadline: number): AbortSignal {
  return AbortSignal.timeout(Math.max(1_000, Math.min(30_000, deadline - performance.now())));
}

function rss(o: ScaleOptions): Rss {
  const gateway = rssMiB(o.gatewayPid) ?? null;
  const nats = rssMiB(o.natsPid) ?? null;
  return { gateway, nats_server: nats, total: gateway === null ? null : Math.round((gateway + (nats ?? 0)) * 10) / 10 };
}

function cpuMs(pid: number | undefined): number {
  return (pid === undefined ? undefined : procStat(pid)?.cpuMs) ?? NaN;
}

/** Runs the steps in order into `r`, recording each failure; without every engine ready, nothing else runs. */
export async function measureScale(o: ScaleOptions, r: ScaleSizeResult): Promise<void> {
  const step = async (name: string, f: () => Promise<void>) => {
    if (performance.now() > o.deadline) {
      r.errors.push({ step: name, message: 'not run: the time budget of this size ran out' });
      return;
    }
    try {
      await f();
    } catch (err) {
      r.errors.push({ step: name, message: (err as Error).message });
    }
  };
  // The time the later steps need, kept back from the registration wait.
  const reserveMs = (o.idleSeconds + 25) * 1000;
  await step('register', () => register(o, r, o.deadline - reserveMs));
  if (r.register?.ready_s == null) {
    r.rss_mib.end = rss(o);
    return;
  }
  r.rss_mib.ready = rss(o);
  r.open_fds = { gateway_at_ready: openFds(o.gatewayPid) ?? null, nats_server_at_ready: openFds(o.natsPid) ?? null };
  await step('idle', () => idle(o, r));
  if (r.idle) r.rss_mib.after_idle = rss(o);
  await step('fanout', () => fanout(o, r));
  await step('listing', () => listing(o, r));
  r.rss_mib.end = rss(o);
}

async function register(o: ScaleOptions, r: ScaleSizeResult, readyBy: number): Promise<void> {
  const n = o.engineUrls.length;
  const labelled = Math.min(FANOUT_GROUP.engines, n);
  const reg = (r.register = {
    concurrency: o.registerConcurrency,
    labelled,
    accepted_s: null as number | null,
    ready_s: null as number | null,
    polls: 0,
    max_poll_ms: 0,
    progress: [] as Array<[number, number]>,
    cpu_ms_per_engine: null as { gateway: number; nats_server: number } | null,
  });
  const agent = new Agent({ connections: o.registerConcurrency, keepAliveTimeout: 30_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  try {
    const g0 = cpuMs(o.gatewayPid);
    const n0 = cpuMs(o.natsPid);
    const t0 = performance.now();
    let next = 0;
    let failures = 0;
    let first = '';
    const post = async () => {
      while (next < n && performance.now() < readyBy) {
        const i = next++;
        const body = i < labelled ? { url: o.engineUrls[i], labels: { [FANOUT_GROUP.key]: FANOUT_GROUP.value } } : { url: o.engineUrls[i] };
        try {
          const res = await request(`${o.gatewayUrl}/workers`, {
            method: 'POST',
            body: JSON.stringify(body),
            headers: JSON_HEADERS,
            dispatcher: agent,
            signal: timeoutTo(readyBy),
          });
          const text = await res.body.text();
          if (res.statusCode !== 202) throw new Error(`answered ${res.statusCode}: ${text.slice(0, 200)}`);
        } catch (err) {
          failures++;
          first ||= `POST /workers ${o.engineUrls[i]}: ${(err as Error).message}`;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(o.registerConcurrency, n) }, post));
    if (failures) throw new Error(`${failures} of ${n} registrations failed; first: ${first}`);
    if (next < n) throw new Error(`registration cut by the time budget after ${next} of ${n} POSTs`);
    reg.accepted_s = r3((performance.now() - t0) / 1000);
    o.progress(`all ${n} registrations accepted after ${reg.accepted_s} s; waiting for ready...`);

    // One poll at a time, and after each a pause at least as long as it took: the poll never
    // takes more than half of the gateway's time from the discovery it waits for.
    let last = 'no poll answered';
    for (;;) {
      const p0 = performance.now();
      let body: { workers?: Array<{ health?: string }> };
      try {
        const res = await request(`${o.gatewayUrl}/v1/rl/workers`, { dispatcher: agent, signal: timeoutTo(readyBy) });
        body = (await res.body.json()) as typeof body;
      } catch (err) {
        throw new Error(
          `GET /v1/rl/workers (poll ${reg.polls + 1}) failed after ${Math.round(performance.now() - p0)} ms: ${(err as Error).message}; last poll: ${last} after ${reg.progress.at(-1)?.[0] ?? '–'} s`,
        );
      }
      const took = performance.now() - p0;
      reg.polls++;
      reg.max_poll_ms = Math.max(reg.max_poll_ms, Math.round(took));
      const rows = body.workers ?? [];
      let ready = 0;
      for (const w of rows) if (w.health === 'ready') ready++;
      reg.progress.push([r3((performance.now() - t0) / 1000), ready]);
      if (rows.length === n && ready === n) {
        reg.ready_s = r3((performance.now() - t0) / 1000);
        const per = (d: number) => (Number.isFinite(d) ? Math.round((d / n) * 1000) / 1000 : NaN);
        reg.cpu_ms_per_engine = { gateway: per(cpuMs(o.gatewayPid) - g0), nats_server: per(cpuMs(o.natsPid) - n0) };
        return;
      }
      last = `${ready} of ${n} ready (${rows.length} listed)`;
      if (performance.now() + Math.max(250, took) > readyBy)
        throw new Error(`not every engine ready in time: ${last} after ${r3((performance.now() - t0) / 1000)} s`);
      await sleep(Math.max(250, took));
    }
  } finally {
    await agent.close();
  }
}

async function idle(o: ScaleOptions, r: ScaleSizeResult): Promise<void> {
  const SLICE_MS = 5_000;
  const planned = o.idleSeconds * 1000;
  const room = o.deadline - performance.now() - 20_000; // the fan-out and listings come after
  const windowMs = Math.max(SLICE_MS, Math.min(planned, room));
  o.progress(`idle window of ${windowMs / 1000} s...`);
  const g0 = cpuMs(o.gatewayPid);
  const m0 = mainThreadCpuMs(o.gatewayPid) ?? NaN;
  const n0 = cpuMs(o.natsPid);
  const t0 = performance.now();
  const slices: number[] = [];
  let prev = g0 + (Number.isFinite(n0) ? n0 : 0);
  let prevT = t0;
  while (performance.now() - t0 < windowMs - 1) {
    await sleep(Math.min(SLICE_MS, windowMs - (performance.now() - t0)));
    const now = cpuMs(o.gatewayPid) + (Number.isFinite(n0) ? cpuMs(o.natsPid) : 0);
    const t = performance.now();
    slices.push(Math.round(((now - prev) / (t - prevT)) * 1000) / 10);
    prev = now;
    prevT = t;
  }
  const elapsed = performance.now() - t0;
  const pct = (d: number) => Math.round((d / elapsed) * 1000) / 10;
  const g = pct(cpuMs(o.gatewayPid) - g0);
  const main = pct((mainThreadCpuMs(o.gatewayPid) ?? NaN) - m0);
  const nats = Number.isFinite(n0) ? pct(cpuMs(o.natsPid) - n0) : NaN;
  if (!Number.isFinite(g)) throw new Error('the gateway process is gone (no /proc entry)');
  r.idle = {
    window_s: Math.round(elapsed) / 1000,
    truncated: windowMs < planned,
    gateway_pct: g,
    gateway_main_thread_pct: main,
    nats_server_pct: nats,
    total_pct: Math.round((g + (Number.isFinite(nats) ? nats : 0)) * 10) / 10,
    slices_pct: slices,
  };
}

async function fanout(o: ScaleOptions, r: ScaleSizeResult): Promise<void> {
  const engines = Math.min(FANOUT_GROUP.engines, o.engineUrls.length);
  const selector = `${FANOUT_GROUP.key}=${FANOUT_GROUP.value}`;
  const url = `${o.gatewayUrl}/v1/rl/engine/${FANOUT_ROUTE}?selector=${encodeURIComponent(selector)}`;
  const agent = new Agent({ connections: 1, keepAliveTimeout: 30_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const envelopes: number[] = [];
  const overheads: number[] = [];
  let errors = 0;
  let first = '';
  o.progress(`fan-out to ${engines} engines (${selector}), ${o.fanoutWarmup} + ${o.fanouts}...`);
  const once = async (): Promise<void> => {
    const t0 = performance.now();
    const res = await request(url, { method: 'POST', body: '{}', headers: JSON_HEADERS, dispatcher: agent, signal: timeoutTo(o.deadline) });
    const text = await res.body.text();
    const envelope = performance.now() - t0;
    const body = JSON.parse(text) as { succeeded?: number; total?: number; results?: Record<string, { latency_ms: number }> };
    if (res.statusCode !== 200 || body.succeeded !== engines || body.total !== engines) {
      throw new Error(`answered ${res.statusCode} with ${body.succeeded}/${body.total} succeeded (want ${engines}): ${text.slice(0, 300)}`);
    }
    envelopes.push(envelope);
    overheads.push(envelope - Math.max(...Object.values(body.results ?? {}).map((x) => x.latency_ms)));
  };
  try {
    for (let i = 0; i < o.fanoutWarmup && performance.now() < o.deadline; i++) await once();
    envelopes.length = 0;
    overheads.length = 0;
    const g0 = cpuMs(o.gatewayPid);
    const n0 = cpuMs(o.natsPid);
    let done = 0;
    for (; done < o.fanouts && performance.now() < o.deadline; done++) {
      try {
        await once();
      } catch (err) {
        errors++;
        first ||= (err as Error).message;
        if (errors > 2) throw new Error(`${errors} fan-outs failed; first: ${first}`);
      }
    }
    const per = (d: number) => Math.round((d / Math.max(1, done)) * 100) / 100;
    r.fanout = {
      engines,
      selector,
      iterations: done,
      warmup: o.fanoutWarmup,
      errors,
      envelope: rounded(summarize(envelopes)),
      overhead: rounded(summarize(overheads)),
      cpu_ms_per_fanout: { gateway: per(cpuMs(o.gatewayPid) - g0), nats_server: per(cpuMs(o.natsPid) - n0) },
      direct_envelope: null,
    };
  } finally {
    await agent.close();
  }
  // The yardstick comes after the gateway's loop, so that loop's CPU reading holds the gateway's fan-outs alone.
  const urls = o.engineUrls.slice(0, engines);
  const toEngines = new Agent({ connections: 1, keepAliveTimeout: 30_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const direct = async (): Promise<number> => {
    const t0 = performance.now();
    const statuses = await Promise.all(
      urls.map(async (u) => {
        const res = await request(`${u}/${FANOUT_ROUTE}`, {
          method: 'POST',
          body: '{}',
          headers: JSON_HEADERS,
          dispatcher: toEngines,
          signal: timeoutTo(o.deadline),
        });
        await res.body.text();
        return res.statusCode;
      }),
    );
    const envelope = performance.now() - t0;
    if (statuses.some((st) => st !== 200)) throw new Error(`direct fan-out: an engine answered ${statuses.find((st) => st !== 200)}`);
    return envelope;
  };
  try {
    for (let i = 0; i < o.fanoutWarmup && performance.now() < o.deadline; i++) await direct();
    const samples: number[] = [];
    for (let i = 0; i < o.fanouts && performance.now() < o.deadline; i++) samples.push(await direct());
    r.fanout.direct_envelope = rounded(summarize(samples));
  } finally {
    await toEngines.close();
  }
}

async function listing(o: ScaleOptions, r: ScaleSizeResult): Promise<void> {
  const agent = new Agent({ connections: 1, keepAliveTimeout: 30_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const n = o.engineUrls.length;
  const timed = async (path: string): Promise<Timed> => {
    const walls: number[] = [];
    let bytes = 0;
    // One unmeasured call first: the connection, and the route's first run.
    for (let i = 0; i <= o.listings && performance.now() < o.deadline; i++) {
      const t0 = performance.now();
      const res = await request(`${o.gatewayUrl}${path}`, { dispatcher: agent, signal: timeoutTo(o.deadline) });
      const text = await res.body.text();
      const wall = performance.now() - t0;
      if (res.statusCode !== 200) throw new Error(`GET ${path} answered ${res.statusCode}: ${text.slice(0, 200)}`);
      const total = (JSON.parse(text) as { total?: number }).total;
      if (total !== n) throw new Error(`GET ${path} listed ${total} workers, not ${n}`);
      bytes = Buffer.byteLength(text);
      if (i > 0) walls.push(wall);
    }
    return { calls: walls.length, wall: rounded(summarize(walls)), bytes };
  };
  try {
    o.progress(`listing the fleet, ${o.listings} calls each...`);
    const rlWorkers = await timed('/v1/rl/workers');
    const workers = await timed('/workers');
    const page = await timed(`/v1/rl/workers?limit=${LISTING_PAGE}`);
    r.listing = { rl_workers: rlWorkers, workers, rl_workers_page: page };
  } finally {
    await agent.close();
  }
}

/** What the Markdown header says about the machine and the set-up. */
export interface ScaleFacts {
  date: string;
  machine: string;
  setup: string;
}

export interface ScaleVerdict {
  goal: string;
  /** By fleet size: the figure and whether it meets the goal (null: not measured). */
  cells: Array<{ engines: number; figure: string; met: boolean | null }>;
}

export function scaleGoals(results: ScaleSizeResult[]): ScaleVerdict[] {
  const G = SCALE_GOALS;
  const row = (goal: string, f: (r: ScaleSizeResult) => { figure: string; met: boolean } | null): ScaleVerdict => ({
    goal,
    cells: results.map((r) => ({ engines: r.engines, ...(f(r) ?? { figure: 'not measured', met: null }) })),
  });
  // Judged on the readings the issue names: every engine ready, and after the idle window.
  const maxRss = (r: ScaleSizeResult) => Math.max(...[r.rss_mib.ready, r.rss_mib.after_idle].map((x) => x?.total ?? -1));
  return [
    row(`register all, ready ≤ ${G.register_ready_s} s`, (r) =>
      r.register?.ready_s == null ? null : { figure: `${r.register.ready_s.toFixed(1)} s`, met: r.register.ready_s <= G.register_ready_s },
    ),
    row(`RSS, gateway + nats-server ≤ ${G.rss_mib} MB (the larger reading)`, (r) =>
      maxRss(r) < 0 ? null : { figure: `${maxRss(r).toFixed(0)} MiB`, met: maxRss(r) <= G.rss_mib },
    ),
    row(`idle CPU, gateway + nats-server ≤ ${G.idle_cpu_pct}% of a core`, (r) =>
      r.idle ? { figure: `${r.idle.total_pct.toFixed(1)}%`, met: r.idle.total_pct <= G.idle_cpu_pct } : null,
    ),
    row(`fan-out to 1,000, p50 ≤ ${G.fanout_ms} ms`, (r) =>
      r.fanout && r.fanout.envelope.n ? { figure: `${ms(r.fanout.envelope.p50)} ms`, met: r.fanout.envelope.p50 <= G.fanout_ms } : null,
    ),
    row(`fan-out to 1,000, p99 ≤ ${G.fanout_ms} ms`, (r) =>
      r.fanout && r.fanout.envelope.n ? { figure: `${ms(r.fanout.envelope.p99)} ms`, met: r.fanout.envelope.p99 <= G.fanout_ms } : null,
    ),
    row(`GET /v1/rl/workers p50 ≤ ${G.listing_ms} ms`, (r) =>
      r.listing ? { figure: `${ms(r.listing.rl_workers.wall.p50)} ms`, met: r.listing.rl_workers.wall.p50 <= G.listing_ms } : null,
    ),
    row(`GET /v1/rl/workers p99 ≤ ${G.listing_ms} ms`, (r) =>
      r.listing ? { figure: `${ms(r.listing.rl_workers.wall.p99)} ms`, met: r.listing.rl_workers.wall.p99 <= G.listing_ms } : null,
    ),
    row(`GET /workers p50 ≤ ${G.listing_ms} ms`, (r) =>
      r.listing ? { figure: `${ms(r.listing.workers.wall.p50)} ms`, met: r.listing.workers.wall.p50 <= G.listing_ms } : null,
    ),
    row(`GET /workers p99 ≤ ${G.listing_ms} ms`, (r) =>
      r.listing ? { figure: `${ms(r.listing.workers.wall.p99)} ms`, met: r.listing.workers.wall.p99 <= G.listing_ms } : null,
    ),
    row(`GET /v1/rl/workers?limit=${LISTING_PAGE} (one page) p50 ≤ ${G.listing_ms} ms`, (r) => {
      const p = r.listing?.rl_workers_page;
      return p?.wall.n ? { figure: `${ms(p.wall.p50)} ms`, met: p.wall.p50 <= G.listing_ms } : null;
    }),
    row(`GET /v1/rl/workers?limit=${LISTING_PAGE} (one page) p99 ≤ ${G.listing_ms} ms`, (r) => {
      const p = r.listing?.rl_workers_page;
      return p?.wall.n ? { figure: `${ms(p.wall.p99)} ms`, met: p.wall.p99 <= G.listing_ms } : null;
    }),
  ];
}

export function scaleMarkdown(results: ScaleSizeResult[], facts: ScaleFacts): string {
  const num = (v: number | null | undefined, digits = 1) => (v == null || !Number.isFinite(v) ? '–' : v.toFixed(digits));
  const pair = (s: Summary | undefined) => (s && s.n ? `${ms(s.p50)} / ${ms(s.p99)}` : '–');
  const kb = (b: number | undefined) => (b ? `${Math.round(b / 1024).toLocaleString('en-US')} KiB` : '–');
  const rssCell = (x: Rss | null) => (x ? `${num(x.total, 0)} (${num(x.gateway, 0)} + ${num(x.nats_server, 0)})` : '–');
  const verdict = (m: boolean | null) => (m === null ? 'unchecked' : m ? 'met' : '**missed**');
  const goals = scaleGoals(results);
  const lines = [
    `# Scale: one gateway, thousands of engines, ${facts.date}`,
    '',
    facts.machine,
    '',
    facts.setup,
    '',
    'Registration: `POST /workers` for every engine, a bounded number in flight; accepted = first POST',
    'sent → every POST answered 202; ready = first POST sent → `GET /v1/rl/workers` lists every engine',
    '`ready` (polled one at a time, pausing after each poll as long as it took, at least 250 ms). RSS =',
    'VmRSS of the gateway process + its nats-server, MiB. Idle CPU = their CPU over the idle window (no',
    "traffic but the gateway's own probes and heartbeats) ÷ the window, % of one core. Fan-out =",
    `client-observed wall time of \`POST /v1/rl/engine/${FANOUT_ROUTE}?selector=${FANOUT_GROUP.key}=${FANOUT_GROUP.value}\` (the first 1,000`,
    'engines registered carry the label), one at a time after a warm-up. Listing = wall time of the',
    `whole answer, after one unmeasured call; the paged one is the first page of \`?limit=${LISTING_PAGE}\`. Times in ms unless said.`,
    '',
    '| engines | fleet processes | accepted | ready | RSS at ready (gw + nats) | RSS after idle | idle CPU (gw + nats) | fan-out to 1,000 p50 / p99 | `/v1/rl/workers` p50 / p99 (size) | `/workers` p50 / p99 (size) |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...results.map((r) => {
      const reg = r.register;
      const idleCell = r.idle
        ? `${num(r.idle.total_pct)}% (${num(r.idle.gateway_pct)} + ${num(r.idle.nats_server_pct)}) over ${num(r.idle.window_s, 0)} s`
        : '–';
      return `| ${r.engines.toLocaleString('en-US')} | ${r.fleet?.processes ?? '–'} | ${reg?.accepted_s != null ? `${num(reg.accepted_s, 2)} s` : '–'} | ${reg?.ready_s != null ? `${num(reg.ready_s, 2)} s` : '–'} | ${rssCell(r.rss_mib.ready)} | ${rssCell(r.rss_mib.after_idle)} | ${idleCell} | ${pair(r.fanout?.envelope)} | ${pair(r.listing?.rl_workers.wall)} (${kb(r.listing?.rl_workers.bytes)}) | ${pair(r.listing?.workers.wall)} (${kb(r.listing?.workers.bytes)}) |`;
    }),
    '',
    'Goals (issue 19; the fan-out to 1,000: issue 9), by fleet size:',
    '',
    `| goal | ${results.map((r) => `${r.engines.toLocaleString('en-US')} engines`).join(' | ')} |`,
    `|---|${results.map(() => '---').join('|')}|`,
    ...goals.map((g) => `| ${g.goal} | ${g.cells.map((c) => (c.met === null ? c.figure : `${c.figure}: ${verdict(c.met)}`)).join(' | ')} |`),
    '',
    'More of each size: CPU per registered engine (gateway + nats-server, from /proc, first POST to every',
    "engine ready, readiness polls included), gateway CPU per fan-out to 1,000 (gateway + nats-server), the fan-out's",
    'overhead (envelope − slowest leg the gateway reports), the same call made by this process to the same',
    "engines at once (undici, `Promise.all`, after the gateway's loop: what the engines and the machine",
    'allow), the idle window in 5 s slices (% of a core),',
    "the share of the gateway's idle CPU on its main thread (the rest: GC helper threads, libuv pool),",
    'open file descriptors of the gateway once every engine was ready, how long one readiness poll took',
    'at most, and the RSS after the fan-outs and listings.',
    '',
    '| engines | registration CPU ms per engine (gw + nats) | fan-out CPU ms (gw + nats) | fan-out overhead p50 / p99 | direct fan-out to the same engines p50 / p99 | idle slices % | idle, gateway main thread % | gateway fds at ready (limit) | longest readiness poll | RSS at the end (gw + nats) |',
    '|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|',
    ...results.map((r) => {
      const f = r.fanout;
      const rc = r.register?.cpu_ms_per_engine;
      return `| ${r.engines.toLocaleString('en-US')} | ${rc ? `${num(rc.gateway, 2)} + ${num(rc.nats_server, 2)}` : '–'} | ${f ? `${num(f.cpu_ms_per_fanout.gateway)} + ${num(f.cpu_ms_per_fanout.nats_server)}` : '–'} | ${pair(f?.overhead)} | ${pair(f?.direct_envelope ?? undefined)} | ${r.idle ? r.idle.slices_pct.join(', ') : '–'} | ${num(r.idle?.gateway_main_thread_pct)} | ${r.open_fds.gateway_at_ready ?? '–'} (${r.gateway?.fd_limit ?? '–'}) | ${r.register?.polls ? `${r.register.max_poll_ms} ms` : '–'} | ${rssCell(r.rss_mib.end)} |`;
    }),
    '',
  ];
  const failed = results.filter((r) => r.errors.length);
  if (failed.length) {
    lines.push('Failures (a failed start or registration ends its size; the other steps run on their own):', '');
    for (const r of failed)
      for (const e of r.errors)
        lines.push(`- ${r.engines.toLocaleString('en-US')} engines, step \`${e.step}\`: ${e.message.replace(/\s+/g, ' ').slice(0, 600)}`);
    lines.push('');
  }
  const logged = results.filter((r) => r.gateway_errors.length || Object.keys(r.gateway_warnings).length);
  if (logged.length) {
    lines.push('What the gateway logged: its first errors, and its most frequent warnings with their counts:', '');
    const code = (t: string) => `\`${t.replace(/`/g, "'").slice(0, 200)}\``;
    for (const r of logged) {
      const bits = [...r.gateway_errors.map(code), ...Object.entries(r.gateway_warnings).map(([m, n]) => `${code(m)} × ${n}`)];
      lines.push(`- ${r.engines.toLocaleString('en-US')} engines: ${bits.join('; ')}`);
    }
    lines.push('');
  }
  return lines.join('\n');
}
