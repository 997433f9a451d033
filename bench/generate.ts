// The data-plane benchmark proper (issue 4): SGLang-native `POST /generate` straight to a
// simulator ("direct"), through nginx `proxy_pass`, through a bare fastify + undici hop, and
// through the rlgate gateway (one process, and one per core), in the same run against the same
// engine. Three measures: added latency at one connection, throughput and latency at 64
// connections (wrk), streamed tokens/s of 256 concurrent slime-like streams; each goal of issue 19
// is printed met or missed. It owns the loops and the result shape; run.ts starts processes.

import { Client, Pool } from 'undici';
import { ms, rounded, summarize, type Summary } from './stats.ts';
import { runWrk, writePostScript, type WrkResult } from './wrk.ts';

export type TargetName = 'direct' | 'nginx' | 'node_hop' | 'gateway' | 'gateway_all';

export interface Target {
  name: TargetName;
  url: string;
  /** The process serving this target's hop (CPU accounting); none for direct. */
  cpuName?: string;
}

const PROMPT = Array.from({ length: 32 }, (_, i) => 1000 + i * 7);

/** slime's rollout call: one prompt as ids, no model, logprobs on. */
export const BUFFERED_BODY = JSON.stringify({
  input_ids: PROMPT,
  sampling_params: { max_new_tokens: 8, temperature: 1.0, top_p: 1.0, top_k: -1, skip_special_tokens: false, no_stop_trim: true, ignore_eos: true },
  return_logprob: true,
});

/** The same call streamed: the rollout's tokens as the engine makes them. */
export function streamBody(tokens: number): string {
  return JSON.stringify({
    input_ids: PROMPT,
    sampling_params: { max_new_tokens: tokens, temperature: 1.0, top_p: 1.0, top_k: -1, skip_special_tokens: false, no_stop_trim: true, ignore_eos: true },
    stream: true,
  });
}

const HEADERS = { 'content-type': 'application/json' };

// ---- latency at one connection ------------------------------------------------------------

export interface LatencyResult {
  iterations: number;
  warmup: number;
  truncated: boolean;
  /** Client-observed wall time of one buffered /generate, by target. */
  by_target: Partial<Record<TargetName, Summary>>;
  /** target − direct, paired by round (same moment, same engine state), by target. */
  added: Partial<Record<TargetName, Summary>>;
}

export async function measureLatency(targets: Target[], iterations: number, warmup: number, deadline: number): Promise<LatencyResult> {
  const clients = targets.map((t) => new Client(t.url, { pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 30_000 }));
  const one = async (k: number): Promise<number> => {
    const t0 = performance.now();
    const res = await clients[k]!.request({ path: '/generate', method: 'POST', headers: HEADERS, body: BUFFERED_BODY });
    const text = await res.body.text();
    const took = performance.now() - t0;
    // Checked after the clock stopped: checking is the benchmark's cost, not the hop's.
    if (res.statusCode !== 200 || !text.includes('"meta_info"')) throw new Error(`${targets[k]!.name} answered ${res.statusCode}: ${text.slice(0, 200)}`);
    return took;
  };
  try {
    for (let i = 0; i < warmup; i++) for (let k = 0; k < targets.length; k++) await one(k);
    const samples = targets.map(() => [] as number[]);
    let done = 0;
    for (; done < iterations && performance.now() < deadline; done++) {
      // Rotate who goes first, so no hop always runs right after another's work.
      for (let j = 0; j < targets.length; j++) {
        const k = (done + j) % targets.length;
        samples[k]!.push(await one(k));
      }
    }
    const d = targets.findIndex((t) => t.name === 'direct');
    const result: LatencyResult = { iterations: done, warmup, truncated: done < iterations, by_target: {}, added: {} };
    targets.forEach((t, k) => {
      result.by_target[t.name] = rounded(summarize(samples[k]!));
      if (k !== d) result.added[t.name] = rounded(summarize(samples[k]!.map((v, i) => v - samples[d]![i]!)));
    });
    return result;
  } finally {
    await Promise.allSettled(clients.map((c) => c.close()));
  }
}

// ---- throughput at 64 connections ---------------------------------------------------------

export interface ThroughputResult {
  connections: number;
  seconds_per_run: number;
  /** Passes over the hops; each pass runs every hop once, alternate passes in reverse order. */
  passes: number;
  /** Every wrk run, in the order run. */
  runs: Array<{ target: TargetName; pass: number } & WrkResult & { cpu_us_per_request: Record<string, number> }>;
  /** Median requests/s of a hop's runs. */
  requests_per_s: Partial<Record<TargetName, number>>;
  /**
   * Median over passes of (hop's requests/s ÷ nginx's in the same pass): runs seconds apart see
   * the same machine, so this ratio holds steadier than the ratio of medians when the host's
   * speed drifts during the run.
   */
  paired_vs_nginx: Partial<Record<TargetName, number>>;
  /** Processes serving each gateway target (the run's `--processes`). */
  processes?: Partial<Record<TargetName, number>>;
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  const n = v.length;
  return n === 0 ? Number.NaN : n % 2 ? v[(n - 1) / 2]! : (v[n / 2 - 1]! + v[n / 2]!) / 2;
}

export async function measureThroughput(
  targets: Target[],
  connections: number,
  seconds: number,
  passes: number,
  scriptDir: string,
  cpuTimes: () => Record<string, number>,
): Promise<ThroughputResult> {
  const script = writePostScript(scriptDir, 'generate', '/generate', BUFFERED_BODY);
  const runs: ThroughputResult['runs'] = [];
  // A short warm-up per hop (JIT, connection pools), then passes A B C D, D C B A, A B C D, ...
  for (const t of targets) await runWrk(t.url, script, connections, 1);
  for (let pass = 0; pass < passes; pass++) {
    for (const t of pass % 2 === 0 ? targets : [...targets].reverse()) {
      const before = cpuTimes();
      const r = await runWrk(t.url, script, connections, seconds);
      const after = cpuTimes();
      const cpu: Record<string, number> = {};
      for (const [k, v] of Object.entries(after))
        if (before[k] !== undefined && r.requests > 0) cpu[k] = Math.round((((v - before[k]!) * 1000) / r.requests) * 10) / 10;
      runs.push({ target: t.name, pass, ...r, cpu_us_per_request: cpu });
    }
  }
  const requests_per_s: ThroughputResult['requests_per_s'] = {};
  const paired_vs_nginx: ThroughputResult['paired_vs_nginx'] = {};
  for (const t of targets) {
    requests_per_s[t.name] = Math.round(median(runs.filter((r) => r.target === t.name).map((r) => r.requests_per_s)));
    const ratios: number[] = [];
    for (let pass = 0; pass < passes; pass++) {
      const mine = runs.find((r) => r.target === t.name && r.pass === pass);
      const ng = runs.find((r) => r.target === 'nginx' && r.pass === pass);
      if (mine && ng && ng.requests_per_s > 0) ratios.push(mine.requests_per_s / ng.requests_per_s);
    }
    if (ratios.length) paired_vs_nginx[t.name] = Math.round(median(ratios) * 1000) / 1000;
  }
  return { connections, seconds_per_run: seconds, passes, runs, requests_per_s, paired_vs_nginx };
}

// ---- 256 concurrent streams -----------------------------------------------------------------

export interface StreamRun {
  target: TargetName;
  streams: number;
  /** Streams that did not end 200 with a final chunk of the asked length. */
  failed: number;
  tokens: number;
  seconds: number;
  tokens_per_s: number;
  /** Send → first body chunk, per stream. */
  first_chunk_ms: Summary;
  /** Send → end of stream, per stream. */
  stream_ms: Summary;
}

export interface StreamResult {
  streams: number;
  tokens_per_stream: number;
  engine_token_rate: number;
  runs: StreamRun[];
  /** Mean tokens/s of a target's runs. */
  tokens_per_s: Partial<Record<TargetName, number>>;
}

/** One round: `streams` streamed /generate calls at once; tokens counted from each final chunk. */
async function streamRound(target: Target, streams: number, tokens: number): Promise<StreamRun> {
  const pool = new Pool(target.url, { connections: streams, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 120_000, bodyTimeout: 120_000 });
  const body = streamBody(tokens);
  const started = performance.now();
  let ended = started;
  try {
    const one = async (): Promise<{ tokens: number; first: number; whole: number } | null> => {
      const t0 = performance.now();
      const res = await pool.request({ path: '/generate', method: 'POST', headers: HEADERS, body });
      let first = -1;
      // Only the tail is kept: the final event carries `completion_tokens`.
      const tail: Buffer[] = [];
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        if (first < 0) first = performance.now() - t0;
        tail.push(chunk);
        if (tail.length > 8) tail.shift();
      }
      const now = performance.now();
      if (now > ended) ended = now;
      const text = Buffer.concat(tail).toString('utf8');
      const at = text.lastIndexOf('data: {');
      if (res.statusCode !== 200 || at < 0 || !text.trimEnd().endsWith('data: [DONE]')) return null;
      const last = JSON.parse(text.slice(at + 6, text.indexOf('\n', at))) as { meta_info?: { completion_tokens?: number } };
      const n = last.meta_info?.completion_tokens ?? 0;
      return n === tokens ? { tokens: n, first, whole: now - t0 } : null;
    };
    const outcomes = await Promise.all(Array.from({ length: streams }, () => one().catch(() => null)));
    const ok = outcomes.filter((o): o is NonNullable<typeof o> => o !== null);
    const seconds = (ended - started) / 1000;
    const total = ok.reduce((s, o) => s + o.tokens, 0);
    return {
      target: target.name,
      streams,
      failed: streams - ok.length,
      tokens: total,
      seconds: Math.round(seconds * 1000) / 1000,
      tokens_per_s: Math.round(total / seconds),
      first_chunk_ms: rounded(summarize(ok.map((o) => o.first))),
      stream_ms: rounded(summarize(ok.map((o) => o.whole))),
    };
  } finally {
    await pool.close();
  }
}

export async function measureStreams(targets: Target[], streams: number, tokens: number, engineTokenRate: number): Promise<StreamResult> {
  // Warm-up at full concurrency: every hop's connection pool to the engine grows to `streams`
  // here, so the measured rounds see the steady state, not pool growth.
  for (const t of targets) await streamRound(t, streams, Math.min(tokens, 16));
  const runs: StreamRun[] = [];
  for (const t of [...targets, ...[...targets].reverse()]) runs.push(await streamRound(t, streams, tokens));
  const tokens_per_s: StreamResult['tokens_per_s'] = {};
  for (const t of targets) {
    const mine = runs.filter((r) => r.target === t.name);
    tokens_per_s[t.name] = Math.round(mine.reduce((s, r) => s + r.tokens_per_s, 0) / mine.length);
  }
  return { streams, tokens_per_stream: tokens, engine_token_rate: engineTokenRate, runs, tokens_per_s };
}

// ---- report -------------------------------------------------------------------------------------

export interface GenerateResult {
  latency: LatencyResult;
  throughput: ThroughputResult | null;
  streams: StreamResult;
  /** Why a part is missing (no nginx, no wrk). */
  notes: string[];
}

/** Issue 19's goals: added p50 at 1 and at 64 connections, throughput at 64, streamed tokens. */
export const GENERATE_TARGETS = { added_p50_ms: 0.3, throughput_vs_nginx: 0.8, stream_tokens_vs_direct: 0.99 };

const LABEL: Record<TargetName, string> = {
  direct: 'direct (no hop)',
  nginx: 'nginx proxy_pass',
  node_hop: 'fastify + undici hop',
  gateway: 'rlgate gateway, 1 process',
  gateway_all: 'rlgate gateway, every core',
};
const GATEWAYS: readonly TargetName[] = ['gateway', 'gateway_all'];

const met = (ok: boolean) => (ok ? 'met' : '**missed**');

/**
 * At 64 connections, per gateway: added p50 (its wrk p50 − direct's, medians of the runs),
 * throughput ÷ nginx (paired), and its CPU per request next to nginx's; with several processes,
 * requests/s per process too (each process has a core of its own at most).
 */
function throughputGoals(t: ThroughputResult): string[] {
  const lines: string[] = [];
  const of = (n: TargetName) => t.runs.filter((x) => x.target === n);
  const p50 = (n: TargetName) => median(of(n).map((x) => x.latency_ms.p50));
  const cpu = (n: TargetName) => median(of(n).map((x) => x.cpu_us_per_request[n] ?? Number.NaN));
  for (const g of GATEWAYS) {
    if (t.requests_per_s[g] === undefined) continue;
    const added = p50(g) - p50('direct');
    lines.push(
      `${LABEL[g]}: added p50 at ${t.connections} connections ${added.toFixed(3)} ms vs goal ≤ ${GENERATE_TARGETS.added_p50_ms} ms: ${met(added <= GENERATE_TARGETS.added_p50_ms)}.`,
    );
    const ratio = t.paired_vs_nginx[g];
    lines.push(
      ratio !== undefined
        ? `${LABEL[g]} ÷ nginx ${ratio.toFixed(2)}× (paired median; ratio of medians ${(t.requests_per_s[g]! / t.requests_per_s.nginx!).toFixed(2)}×) vs goal ≥ ${GENERATE_TARGETS.throughput_vs_nginx}×: ${met(ratio >= GENERATE_TARGETS.throughput_vs_nginx)}.`
        : `${LABEL[g]}: no nginx on this machine, the throughput goal could not be checked.`,
    );
    const processes = t.processes?.[g] ?? 1;
    lines.push(
      `${LABEL[g]}: ${cpu(g).toFixed(0)} µs of CPU per request (all its processes) vs nginx's ${t.requests_per_s.nginx !== undefined ? cpu('nginx').toFixed(0) : '–'} µs; ${processes} process${processes > 1 ? 'es' : ''}, ${Math.round(t.requests_per_s[g]! / processes)} requests/s per process.`,
    );
  }
  return lines;
}

export function generateMarkdown(r: GenerateResult, facts: { date: string; machine: string; setup: string }): string {
  const names = Object.keys(r.latency.by_target) as TargetName[];
  const lat = r.latency;
  const addedP50 = (n: TargetName) => (lat.by_target[n] && lat.by_target.direct ? lat.by_target[n]!.p50 - lat.by_target.direct.p50 : NaN);
  const lines = [
    `# /generate data plane, ${facts.date}`,
    '',
    facts.machine,
    '',
    facts.setup,
    '',
    `## Added latency at one connection (${lat.iterations} rounds${lat.truncated ? ', cut short by the time budget' : ''})`,
    '',
    'One buffered slime-shaped `/generate` at a time per hop, the hops taking turns each round.',
    "Added p50 = the hop's p50 − direct p50; paired = per-round difference (hop − direct). ms.",
    '',
    '| hop | p50 | p90 | p99 | added p50 | paired added p50 / p99 |',
    '|---|---:|---:|---:|---:|---:|',
    ...names.map((n) => {
      const s = lat.by_target[n]!;
      const a = lat.added[n];
      return `| ${LABEL[n]} | ${ms(s.p50)} | ${ms(s.p90)} | ${ms(s.p99)} | ${n === 'direct' ? '–' : addedP50(n).toFixed(3)} | ${a ? `${a.p50.toFixed(3)} / ${a.p99.toFixed(3)}` : '–'} |`;
    }),
    '',
    ...GATEWAYS.filter((g) => lat.by_target[g]).map(
      (g) =>
        `${LABEL[g]}: added p50 ${addedP50(g).toFixed(3)} ms vs goal ≤ ${GENERATE_TARGETS.added_p50_ms} ms: ${met(addedP50(g) <= GENERATE_TARGETS.added_p50_ms)}.`,
    ),
    '',
  ];
  if (r.throughput) {
    const t = r.throughput;
    const rps = t.requests_per_s;
    lines.push(
      `## Throughput at ${t.connections} connections (wrk, ${t.seconds_per_run} s per run, ${t.passes} passes over the hops)`,
      '',
      "Passes alternate direction (A B C D, D C B A, ...). Requests/s and CPU are medians of a hop's",
      'runs; "paired vs nginx" is the median over passes of the hop ÷ nginx in the same pass. CPU µs',
      "per request: each process's user + system time over a run ÷ the requests served (the engine",
      'serves every hop).',
      '',
      '| hop | requests/s | runs | p50 / p99 ms | vs direct | vs nginx (paired) | hop CPU µs/req | engine CPU µs/req | errors |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...(Object.keys(rps) as TargetName[]).map((n) => {
        const mine = t.runs.filter((x) => x.target === n);
        const cpu = (key: string | undefined) => (key ? median(mine.map((x) => x.cpu_us_per_request[key] ?? NaN)).toFixed(0) : '–');
        const cpuName = n === 'direct' ? undefined : n;
        const errs = mine.reduce((s, x) => s + x.non_2xx + x.socket_errors, 0);
        const lat = (k: 'p50' | 'p99') => ms(median(mine.map((x) => x.latency_ms[k])));
        return `| ${LABEL[n]} | ${rps[n]} | ${mine.map((x) => Math.round(x.requests_per_s)).join(', ')} | ${lat('p50')} / ${lat('p99')} | ${(rps[n]! / rps.direct!).toFixed(2)}× | ${t.paired_vs_nginx[n] !== undefined ? `${t.paired_vs_nginx[n]!.toFixed(2)}×` : '–'} | ${cpu(cpuName)} | ${cpu('engines')} | ${errs} |`;
      }),
      '',
      ...throughputGoals(t),
      '',
    );
  }
  const s = r.streams;
  const tps = s.tokens_per_s;
  lines.push(
    `## ${s.streams} concurrent streams (${s.tokens_per_stream} tokens each, engine paced at ${s.engine_token_rate} tokens/s per stream)`,
    '',
    `All ${s.streams} streamed \`/generate\` calls sent at once; tokens counted from each stream's final chunk;`,
    "first-chunk and whole-stream columns are medians over a hop's rounds of each round's percentile;",
    `tokens/s = tokens ÷ (first send → last stream end). The engine's ceiling is ${s.streams * s.engine_token_rate} tokens/s.`,
    '',
    '| hop | tokens/s (mean) | runs | vs direct | first chunk p50 / p99 ms | whole stream p50 / p99 ms | failed |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...(Object.keys(tps) as TargetName[]).map((n) => {
      const mine = s.runs.filter((x) => x.target === n);
      return `| ${LABEL[n]} | ${tps[n]} | ${mine.map((x) => x.tokens_per_s).join(', ')} | ${(tps[n]! / tps.direct!).toFixed(3)}× | ${ms(median(mine.map((x) => x.first_chunk_ms.p50)))} / ${ms(median(mine.map((x) => x.first_chunk_ms.p99)))} | ${ms(median(mine.map((x) => x.stream_ms.p50)))} / ${ms(median(mine.map((x) => x.stream_ms.p99)))} | ${mine.reduce((a, x) => a + x.failed, 0)} |`;
    }),
    '',
    ...GATEWAYS.filter((g) => tps[g] !== undefined).map(
      (g) =>
        `${LABEL[g]} ÷ direct ${(tps[g]! / tps.direct!).toFixed(3)}× vs goal ≥ ${GENERATE_TARGETS.stream_tokens_vs_direct}×: ${met(tps[g]! / tps.direct! >= GENERATE_TARGETS.stream_tokens_vs_direct)}.`,
    ),
    '',
  );
  if (r.notes.length) lines.push(...r.notes.map((n) => `Note: ${n}`), '');
  return lines.join('\n');
}
