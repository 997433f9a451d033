// The in-flight suite (`npm run bench -- --suites inflight`): N /generate requests in flight at
// once (half streamed) over 64 simulated SGLang engines (one sim-fleet process), through one
// gateway and, in the same run, straight to the engines (round robin) as the baseline. Each N and
// target runs in three steps:
// 1. the burst: all N sent at once, each generating LOAD_TOKENS at TOKEN_RATE (long enough to stay
//    in flight through the next step); the burst's TTFT says what opening N connections in the same
//    instant costs, and the engines' own in-flight counts (GET /_sim/state, summed) must reach N:
//    a request the gateway held back in a queue of its own would never get there;
// 2. the hold: with the N in flight, PROBES short streamed requests at PROBE_RATE; their TTFT is the
//    latency a rollout sees when it arrives at a fleet already holding N (the goal's figure); the
//    gateway's CPU over the hold ÷ the streamed tokens the client received in it, and its resident
//    memory at the hold ÷ N (over an idle gateway's);
// 3. the end: every load request answered 200 with all its tokens, else a failure.
// The gateway runs one process per core (--processes auto): RSS and CPU are summed over its node
// processes, supervisor included (its nats-server left out). Every request in flight holds a client socket and an
// upstream one, so one gateway process fits about half its open-file limit: the suite says so when
// N does not fit, and skips that N rather than measuring a gateway out of descriptors.

import { readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'undici';
import { fdLimitOf, live, procStat, registerAll, rssMiB, startFleet, startGateway } from './children.ts';
import { summarize, type Summary } from './stats.ts';

const ENGINES = 64;
/** Tokens/s of every request: slow, as a long rollout in a full batch is; the point is how many are in flight. */
const TOKEN_RATE = 2;
/** Each load request's length: 30 s at TOKEN_RATE, time for the burst to land and the hold to run. */
const LOAD_TOKENS = 60;
const PROBES = 200;
const PROBE_RATE = 50;
/** The burst must be at the engines within this, or the run says it never got there. */
const ALL_IN_FLIGHT_WITHIN_MS = 20_000;
/** Descriptors a gateway process holds beside its requests' sockets. */
const FD_MARGIN = 512;

export interface InflightRun {
  n: number;
  target: 'gateway' | 'direct';
  /** Load requests not answered 200 with every token, or the reason the run could not be made. */
  failed: number;
  skipped?: string;
  /** The burst's TTFT (streamed half), ms. */
  burst_ttft_ms: Summary;
  /** From the first request sent to the engines holding all N (null: never). */
  all_in_flight_ms: number | null;
  /** The largest sum of the engines' own in-flight counts seen during the burst. */
  engines_in_flight_peak: number;
  /** Probes sent while N are in flight: TTFT, ms. */
  probe_ttft_ms: Summary;
  probe_failed: number;
  wall_ms: number;
  rss_idle_mib: number | null;
  rss_hold_mib: number | null;
  /** (hold − idle) ÷ n, KiB. */
  kib_per_request: number | null;
  /** The gateway's CPU over the hold ÷ the streamed tokens received in it, µs. */
  cpu_us_per_streamed_token: number | null;
  /** The gateway's CPU over the hold, in cores (1 = one core busy). */
  cpu_cores_hold: number | null;
  streamed_tokens_hold: number;
}

/** The gateway's node processes: its own pid and its descendants that are node (not its nats-server). */
function gatewayPids(root: number): number[] {
  const pids = [root];
  let grew = true;
  const all = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
  while (grew) {
    grew = false;
    for (const p of all) {
      if (pids.includes(p)) continue;
      const parent = procStat(p)?.ppid;
      if (parent !== undefined && pids.includes(parent) && isNode(p)) {
        pids.push(p);
        grew = true;
      }
    }
  }
  return pids;
}

function isNode(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim().startsWith('node');
  } catch {
    return false;
  }
}

const sum = (xs: Array<number | undefined>) => xs.reduce<number>((a, b) => a + (b ?? 0), 0);
const cpuOf = (pids: number[]) => sum(pids.map((p) => procStat(p)?.cpuMs));
const rssOf = (pids: number[]) => sum(pids.map((p) => rssMiB(p)));

async function enginesInFlight(urls: string[], agent: Agent): Promise<number> {
  const states = await Promise.all(
    urls.map(async (u) => {
      const res = await request(`${u}/_sim/state`, { dispatcher: agent });
      return (await res.body.json()) as { inFlight: number };
    }),
  );
  return states.reduce((a, s) => a + s.inFlight, 0);
}

function body(stream: boolean, i: number, tokens: number): string {
  return JSON.stringify({ input_ids: [1 + (i % 997), 2, 3], stream, sampling_params: { max_new_tokens: tokens, ignore_eos: true } });
}

/** One /generate; resolves with its TTFT (streamed) and whether it came back whole. */
async function generate(
  url: string,
  stream: boolean,
  i: number,
  tokens: number,
  agent: Agent,
  onToken: () => void,
): Promise<{ ok: boolean; ttft: number | null }> {
  const t0 = performance.now();
  try {
    const res = await request(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: body(stream, i, tokens),
      dispatcher: agent,
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { ok: false, ttft: null };
    }
    if (!stream) {
      const answer = (await res.body.json()) as { output_ids?: unknown[] };
      return { ok: answer.output_ids?.length === tokens, ttft: null };
    }
    let ttft: number | null = null;
    let tail = '';
    for await (const chunk of res.body) {
      if (ttft === null) ttft = performance.now() - t0;
      const text = (chunk as Buffer).toString('latin1');
      // One event per token; the last one is [DONE].
      for (let k = text.indexOf('data: '); k >= 0; k = text.indexOf('data: ', k + 6)) if (text.charCodeAt(k + 6) !== 91) onToken();
      tail = (tail + text).slice(-32);
    }
    return { ok: tail.trimEnd().endsWith('data: [DONE]'), ttft };
  } catch {
    return { ok: false, ttft: null };
  }
}

async function run(
  n: number,
  target: 'gateway' | 'direct',
  urls: string[],
  engineUrls: string[],
  gatewayPid: number | undefined,
): Promise<Omit<InflightRun, 'n' | 'target'>> {
  const agent = new Agent({ connections: n + PROBES, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0, connectTimeout: 60_000 });
  const admin = new Agent({ connections: ENGINES, pipelining: 1 });
  const pids = gatewayPid === undefined ? [] : gatewayPids(gatewayPid);
  const rssIdle = pids.length ? rssOf(pids) : null;
  let streamedTokens = 0;
  let counting = false;
  const onToken = () => {
    if (counting) streamedTokens++;
  };
  const started = performance.now();
  const load = Array.from({ length: n }, (_, i) => generate(urls[i % urls.length]!, i % 2 === 0, i, LOAD_TOKENS, agent, onToken));

  // 1. Until the engines hold all N (or the first finished, or the deadline).
  let peak = 0;
  let allAt: number | null = null;
  let finished = 0;
  for (const p of load) void p.then(() => finished++);
  while (finished === 0 && performance.now() - started < ALL_IN_FLIGHT_WITHIN_MS) {
    const now = await enginesInFlight(engineUrls, admin).catch(() => 0);
    if (now > peak) peak = now;
    if (now >= n) {
      allAt = performance.now() - started;
      break;
    }
    await new Promise((r) => setTimeout(r, 250));
  }

  // 2. The hold: probes at PROBE_RATE while the load streams.
  const holdPids = gatewayPid === undefined ? [] : gatewayPids(gatewayPid);
  const cpu0 = holdPids.length ? cpuOf(holdPids) : null;
  const t0 = performance.now();
  counting = true;
  let rssHold = 0;
  const probes: Array<Promise<{ ok: boolean; ttft: number | null }>> = [];
  for (let k = 0; k < PROBES; k++) {
    probes.push(generate(urls[(n + k) % urls.length]!, true, n + k, 1, agent, () => {}));
    if (k % PROBE_RATE === 0 && holdPids.length) rssHold = Math.max(rssHold, rssOf(holdPids));
    await new Promise((r) => setTimeout(r, 1000 / PROBE_RATE));
  }
  const probed = await Promise.all(probes);
  counting = false;
  const holdMs = performance.now() - t0;
  const cpu1 = holdPids.length ? cpuOf(holdPids) : null;
  if (holdPids.length) rssHold = Math.max(rssHold, rssOf(holdPids));

  // 3. Every load request to its end.
  const done = await Promise.all(load);
  const wall = performance.now() - started;
  await agent.close();
  await admin.close();
  const cpuMs = cpu0 === null || cpu1 === null ? null : cpu1 - cpu0;
  return {
    failed: done.filter((d) => !d.ok).length,
    burst_ttft_ms: summarize(done.map((d) => d.ttft).filter((t): t is number => t !== null)),
    all_in_flight_ms: allAt === null ? null : Math.round(allAt),
    engines_in_flight_peak: peak,
    probe_ttft_ms: summarize(probed.map((d) => d.ttft).filter((t): t is number => t !== null)),
    probe_failed: probed.filter((d) => !d.ok).length,
    wall_ms: Math.round(wall),
    rss_idle_mib: rssIdle === null ? null : Math.round(rssIdle),
    rss_hold_mib: holdPids.length ? Math.round(rssHold) : null,
    kib_per_request: rssIdle === null || !holdPids.length ? null : Math.round(((rssHold - rssIdle) * 1024) / n),
    cpu_us_per_streamed_token: cpuMs === null || streamedTokens === 0 ? null : Math.round((cpuMs * 1000) / streamedTokens),
    cpu_cores_hold: cpuMs === null ? null : Math.round((cpuMs / holdMs) * 100) / 100,
    streamed_tokens_hold: streamedTokens,
  };
}

const EMPTY: Summary = summarize([]);

export async function runInflight(o: {
  sizes: number[];
  logDir: string;
  gatewayFlags?: string[];
}): Promise<{ runs: InflightRun[]; fdLimit: number | null; processes: number }> {
  const fleet = await startFleet(ENGINES, o.logDir, ['--token-rate', String(TOKEN_RATE)], 'inflight');
  // Every core: each gateway process holds its own share of the sockets, under its own open-file
  // limit (one process fits about half the limit's requests in flight).
  const gw = await startGateway(['--log-level', 'warn', '--processes', 'auto', ...(o.gatewayFlags ?? [])], o.logDir, undefined, 'inflight');
  const runs: InflightRun[] = [];
  try {
    await registerAll(gw.url, fleet.urls);
    const fdLimit = fdLimitOf(gw.child.pid);
    // Workers start with the gateway; give them a moment to be counted.
    await new Promise((r) => setTimeout(r, 1000));
    // The processes that hold requests' sockets: the supervisor's workers, or the one process.
    const nodes = gw.child.pid === undefined ? 1 : gatewayPids(gw.child.pid).length;
    const processes = nodes > 1 ? nodes - 1 : 1;
    for (const n of o.sizes) {
      const fits = fdLimit === null || (2 * n) / processes + FD_MARGIN <= fdLimit;
      const direct = await run(n, 'direct', fleet.urls, fleet.urls, undefined);
      runs.push({ n, target: 'direct', ...direct });
      if (!fits) {
        const why = `${n} in flight need about ${Math.ceil((2 * n) / processes) + FD_MARGIN} descriptors per gateway process (${processes} process(es)); the limit is ${fdLimit}`;
        runs.push({ n, target: 'gateway', skipped: why, ...skippedRun(n) });
        process.stdout.write(`inflight: ${n}: gateway skipped: ${why}\n`);
        continue;
      }
      const through = await run(n, 'gateway', [gw.url], fleet.urls, gw.child.pid);
      runs.push({ n, target: 'gateway', ...through });
      process.stdout.write(
        `inflight: ${n}: gateway ${through.failed} failed, engines held ${through.engines_in_flight_peak}, probe TTFT p99 ${through.probe_ttft_ms.p99.toFixed(1)} ms (direct ${direct.probe_ttft_ms.p99.toFixed(1)}), RSS ${through.rss_hold_mib} MiB\n`,
      );
    }
    return { runs, fdLimit, processes };
  } finally {
    await gw.child.stop();
    live.delete(gw.child);
    await fleet.stop();
  }
}

function skippedRun(n: number): Omit<InflightRun, 'n' | 'target' | 'skipped'> {
  return {
    failed: n,
    burst_ttft_ms: EMPTY,
    all_in_flight_ms: null,
    engines_in_flight_peak: 0,
    probe_ttft_ms: EMPTY,
    probe_failed: PROBES,
    wall_ms: 0,
    rss_idle_mib: null,
    rss_hold_mib: null,
    kib_per_request: null,
    cpu_us_per_streamed_token: null,
    cpu_cores_hold: null,
    streamed_tokens_hold: 0,
  };
}

/** The goals of issue 19 item 1, judged at the largest N the gateway ran. */
export function inflightGoals(runs: InflightRun[]): string[] {
  const ran = runs.filter((r) => r.target === 'gateway' && !r.skipped);
  if (!ran.length) return ['no size ran through the gateway'];
  const top = Math.max(...ran.map((r) => r.n));
  const g = ran.find((r) => r.n === top)!;
  const d = runs.find((r) => r.n === top && r.target === 'direct')!;
  const added = g.probe_ttft_ms.p99 - d.probe_ttft_ms.p99;
  const skipped = runs.filter((r) => r.skipped).map((r) => r.n);
  return [
    ...(skipped.length ? [`not run through the gateway: ${skipped.join(', ')} (${runs.find((r) => r.skipped)!.skipped})`] : []),
    `${top} in flight: ${g.failed} failed, ${g.probe_failed} probes failed (goal 0): ${g.failed + g.probe_failed === 0 ? 'met' : 'missed'}`,
    `${top} in flight at the engines at once (no gateway queue): peak ${g.engines_in_flight_peak}${g.all_in_flight_ms !== null ? `, all within ${g.all_in_flight_ms} ms of the first sent` : ''}: ${g.engines_in_flight_peak >= top ? 'met' : 'missed'}`,
    `gateway RSS at ${top} in flight: ${g.rss_hold_mib} MiB, ${g.kib_per_request} KiB per request (goal ≤ 1,024 MiB at 10,000): ${g.rss_hold_mib !== null && g.rss_hold_mib <= 1024 ? 'met' : 'missed'}${top < 10_000 ? ` (at ${top})` : ''}`,
    `added TTFT p99 at ${top} in flight, probes: ${added.toFixed(1)} ms over direct (goal ≤ 5 ms): ${added <= 5 ? 'met' : 'missed'}`,
    `gateway CPU per streamed token at ${top} in flight: ${g.cpu_us_per_streamed_token} µs (${g.cpu_cores_hold} cores over the hold)`,
  ];
}

export function inflightMarkdown(runs: InflightRun[], fdLimit: number | null, processes: number, machine: string): string {
  const f = (x: number) => x.toFixed(1);
  const out = [
    '## Requests in flight: N /generate held at once, through the gateway and straight to the engines',
    '',
    machine,
    '',
    `${ENGINES} SGLang simulators in one process, every request at ${TOKEN_RATE} tokens/s; N load requests (${LOAD_TOKENS} tokens, half streamed) sent at once, then ${PROBES} probes (one token, streamed) at ${PROBE_RATE}/s while the N are in flight. The gateway: ${processes} node process(es), open-file limit ${fdLimit ?? 'unknown'} each.`,
    '',
    '| N | target | failed | burst TTFT p50 / p99 ms | engines held (peak) | all in flight after ms | probe TTFT p50 / p99 ms | probes failed | RSS idle → hold MiB | KiB per request | CPU µs per streamed token | cores over the hold |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    if (r.skipped) {
      out.push(`| ${r.n} | ${r.target} | skipped: ${r.skipped} | | | | | | | | | |`);
      continue;
    }
    out.push(
      `| ${r.n} | ${r.target} | ${r.failed} | ${f(r.burst_ttft_ms.p50)} / ${f(r.burst_ttft_ms.p99)} | ${r.engines_in_flight_peak} | ${r.all_in_flight_ms ?? 'never'} | ${f(r.probe_ttft_ms.p50)} / ${f(r.probe_ttft_ms.p99)} | ${r.probe_failed} | ${r.rss_idle_mib ?? '–'} → ${r.rss_hold_mib ?? '–'} | ${r.kib_per_request ?? '–'} | ${r.cpu_us_per_streamed_token ?? '–'} | ${r.cpu_cores_hold ?? '–'} |`,
    );
  }
  out.push('', ...inflightGoals(runs).map((l) => `- ${l}`), '');
  return out.join('\n');
}
