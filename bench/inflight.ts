// The in-flight suite (`npm run bench -- --suites inflight`): N /generate requests sent at once
// (half of them streamed) over 64 simulated SGLang engines (one sim-fleet process, 20 tokens at
// 20 tokens/s each, about a second of generation), through one gateway and, in the same run,
// straight to the engines (round robin) as the baseline. Per N: failures, the gateway's RSS before
// and at its peak (memory per request in flight), its CPU per streamed token, TTFT p50/p99 of the
// streamed half and the batch's wall time, each against direct. Every request in flight holds a
// client socket and an upstream one, so N is bounded by the gateway's open-file limit (20,000 on the
// machine these figures come from): the largest N here is the largest that fits. Measures only.

import { readFileSync } from 'node:fs';
import { Agent, request } from 'undici';
import { fdLimitOf, live, procStat, registerAll, startFleet, startGateway } from './children.ts';
import { summarize, type Summary } from './stats.ts';

const ENGINES = 64;
const TOKENS = 20;
const TOKEN_RATE = 20;

export interface InflightRun {
  n: number;
  target: 'gateway' | 'direct';
  failed: number;
  wall_ms: number;
  ttft_ms: Summary;
  /** Buffered answers' whole time. */
  buffered_ms: Summary;
  rss_before_mib: number | null;
  rss_peak_mib: number | null;
  /** (peak − before) ÷ n, KiB. */
  kib_per_request: number | null;
  /** All the gateway's CPU during the batch (buffered requests too) ÷ the streamed tokens, µs: an upper bound. */
  cpu_us_per_streamed_token: number | null;
  streamed_tokens: number;
}

function rssMib(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('VmRSS:'));
    return line ? Number(line.split(/\s+/)[1]) / 1024 : null;
  } catch {
    return null;
  }
}

/** Sends n requests at once to `urls` (one, or round robin), half streamed; resolves with the figures. */
async function batch(n: number, urls: string[], pid: number | undefined): Promise<Omit<InflightRun, 'n' | 'target'>> {
  const agent = new Agent({ connections: n, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
  const body = (stream: boolean, i: number) =>
    JSON.stringify({ input_ids: [1 + (i % 997), 2, 3], stream, sampling_params: { max_new_tokens: TOKENS, ignore_eos: true } });
  const ttft: number[] = [];
  const whole: number[] = [];
  let failed = 0;
  let streamed = 0;
  const rssBefore = rssMib(pid);
  let rssPeak = rssBefore ?? 0;
  const sampler = setInterval(() => {
    const r = rssMib(pid);
    if (r !== null && r > rssPeak) rssPeak = r;
  }, 50);
  const cpuBefore = pid === undefined ? undefined : procStat(pid)?.cpuMs;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const stream = i % 2 === 0;
      const t0 = performance.now();
      try {
        const res = await request(`${urls[i % urls.length]}/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: body(stream, i),
          dispatcher: agent,
        });
        if (res.statusCode !== 200) {
          failed++;
          await res.body.dump();
          return;
        }
        if (!stream) {
          await res.body.dump();
          whole.push(performance.now() - t0);
          return;
        }
        let first = true;
        let text = '';
        for await (const chunk of res.body) {
          if (first) {
            ttft.push(performance.now() - t0);
            first = false;
          }
          text += chunk;
        }
        if (!text.trimEnd().endsWith('data: [DONE]')) failed++;
        else streamed += TOKENS;
      } catch {
        failed++;
      }
    }),
  );
  const wall = performance.now() - started;
  clearInterval(sampler);
  const cpuAfter = pid === undefined ? undefined : procStat(pid)?.cpuMs;
  await agent.close();
  const peak = rssBefore === null ? null : rssPeak;
  return {
    failed,
    wall_ms: Math.round(wall),
    ttft_ms: summarize(ttft),
    buffered_ms: summarize(whole),
    rss_before_mib: rssBefore === null ? null : Math.round(rssBefore),
    rss_peak_mib: peak === null ? null : Math.round(peak),
    kib_per_request: peak === null || rssBefore === null ? null : Math.round(((peak - rssBefore) * 1024) / n),
    cpu_us_per_streamed_token:
      cpuBefore === undefined || cpuAfter === undefined || streamed === 0 ? null : Math.round(((cpuAfter - cpuBefore) * 1000) / streamed),
    streamed_tokens: streamed,
  };
}

export async function runInflight(o: { sizes: number[]; logDir: string }): Promise<{ runs: InflightRun[]; fdLimit: number | null }> {
  const fleet = await startFleet(ENGINES, o.logDir, ['--token-rate', String(TOKEN_RATE)], 'inflight');
  const gw = await startGateway(['--log-level', 'warn'], o.logDir, undefined, 'inflight');
  const runs: InflightRun[] = [];
  try {
    await registerAll(gw.url, fleet.urls);
    const fdLimit = fdLimitOf(gw.child.pid);
    for (const n of o.sizes) {
      const direct = await batch(n, fleet.urls, undefined);
      runs.push({ n, target: 'direct', ...direct });
      const through = await batch(n, [gw.url], gw.child.pid);
      runs.push({ n, target: 'gateway', ...through });
      process.stdout.write(
        `inflight: ${n}: gateway ${through.failed} failed, ${through.wall_ms} ms (direct ${direct.wall_ms} ms), RSS peak ${through.rss_peak_mib} MiB\n`,
      );
    }
    return { runs, fdLimit };
  } finally {
    await gw.child.stop();
    live.delete(gw.child);
    await fleet.stop();
  }
}

/** The goals of issue 19 item 1, judged at the largest N run. */
export function inflightGoals(runs: InflightRun[]): string[] {
  const top = Math.max(...runs.map((r) => r.n));
  const g = runs.find((r) => r.n === top && r.target === 'gateway');
  const d = runs.find((r) => r.n === top && r.target === 'direct');
  if (!g || !d) return [];
  const added = g.ttft_ms.p99 - d.ttft_ms.p99;
  return [
    `${top} in flight: ${g.failed} failed (goal 0): ${g.failed === 0 ? 'met' : 'missed'}`,
    `gateway RSS at ${top} in flight: ${g.rss_peak_mib} MiB (goal ≤ 1,024 MiB at 10,000): ${g.rss_peak_mib !== null && g.rss_peak_mib <= 1024 ? 'met' : 'missed'}${top < 10_000 ? ` (at ${top}: 10,000 do not fit the open-file limit)` : ''}`,
    `added TTFT p99 over direct: ${added.toFixed(1)} ms (goal ≤ 5 ms): ${added <= 5 ? 'met' : 'missed'}`,
  ];
}

export function inflightMarkdown(runs: InflightRun[], fdLimit: number | null, machine: string): string {
  const out = [
    '## Requests in flight: N /generate at once, through the gateway and straight to the engines',
    '',
    machine,
    '',
    `${ENGINES} SGLang simulators in one process, ${TOKENS} tokens at ${TOKEN_RATE} tokens/s per request, half streamed; the gateway's open-file limit ${fdLimit ?? 'unknown'}.`,
    '',
    '| N | target | failed | wall ms | TTFT p50 ms | TTFT p99 ms | buffered p50 ms | buffered p99 ms | RSS before → peak MiB | KiB per request | gateway CPU µs ÷ streamed tokens |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const f = (x: number) => x.toFixed(1);
  for (const r of runs) {
    out.push(
      `| ${r.n} | ${r.target} | ${r.failed} | ${r.wall_ms} | ${f(r.ttft_ms.p50)} | ${f(r.ttft_ms.p99)} | ${f(r.buffered_ms.p50)} | ${f(r.buffered_ms.p99)} | ${r.rss_before_mib ?? '–'} → ${r.rss_peak_mib ?? '–'} | ${r.kib_per_request ?? '–'} | ${r.cpu_us_per_streamed_token ?? '–'} |`,
    );
  }
  out.push('', ...inflightGoals(runs).map((l) => `- ${l}`), '');
  return out.join('\n');
}
