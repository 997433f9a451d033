// The rollout suite (`npm run bench -- --suites rollout`): every routing policy against the same
// fleet and the same seeded workloads, in one run. Per fleet size, one fleet of SGLang simulators
// with the realistic cost model (continuous batching, a paged KV pool, a radix prefix cache);
// per policy, a fresh gateway (empty trees and maps) over that fleet, the engines' caches flushed
// before each workload, so every policy starts from the same cold fleet. Figures per policy and
// workload: step time (the batch's makespan), output tokens/s, prefix hit rate, prefill tokens
// recomputed, TTFT p50/p99, the engines' load spread (CV of the tokens each computed), and the
// step-time lower bound (workload.ts).

import { join } from 'node:path';
import { request } from 'undici';
import { POLICY_NAMES } from '../../src/fleet/policies/catalogue.ts';
import { Child, childEnv, live, registerAll, startGateway } from '../children.ts';
import { ms } from '../stats.ts';
import { drive, loadCv, type RunFigures } from './drive.ts';
import { agentic, grpoLongSystem, grpoShort, REALISTIC, stepTimeLowerBoundMs, summarize, type Workload } from './workload.ts';

/** Every policy `--policy` takes but passthrough (one engine) and least_inflight (rlgate's former routing). */
export const ROLLOUT_POLICIES: readonly string[] = POLICY_NAMES.filter((p) => p !== 'passthrough' && p !== 'least_inflight');

/** Policies that read `X-SMG-Routing-Key`: slime sends one per sample (a session id per turn chain in agentic runs). */
const KEYED = new Set(['consistent_hashing', 'manual', 'bounded_affinity']);

export interface RolloutOptions {
  sizes: number[];
  policies: string[];
  workloads: Array<Workload['kind']>;
  seed: number;
  logDir: string;
  /** Extra simulator flags (after the cost model's). */
  simArgs: string[];
  /** Stop starting new runs after this (performance.now() ms). */
  deadline: number;
}

export interface RolloutRun extends RunFigures {
  engines: number;
  policy: string;
  workload: Workload['kind'];
  lowerBoundMs: number;
  loadCv: number;
  tokensByEngine: number[];
}

function workloadOf(kind: Workload['kind'], seed: number): Workload {
  if (kind === 'grpo-short') return grpoShort(seed);
  if (kind === 'grpo-long-system') return grpoLongSystem(seed);
  return agentic(seed);
}

async function startEngines(n: number, o: RolloutOptions): Promise<{ urls: string[]; children: Child[] }> {
  const children = Array.from({ length: n }, (_, i) => {
    const args = ['--import', 'tsx', 'sim/sglang/main.ts', '--port', '0', '--cost-model', 'realistic', '--random-seed', String(o.seed + i), ...o.simArgs];
    const c = new Child(`engine-${i}`, args, join(o.logDir, `rollout-engine-${n}-${i}.log`), childEnv());
    live.add(c);
    return c;
  });
  const lines = await Promise.all(children.map((c) => c.next('listening', 60_000)));
  return { urls: lines.map((l) => l.url as string), children };
}

/** The tokens an engine computed so far (prefilled and decoded), from its own state. */
async function computedTokens(url: string): Promise<number> {
  const res = await request(`${url}/_sim/state`);
  const s = (await res.body.json()) as { cache?: { prefilledTokens?: number; decodedTokens?: number } | null };
  if (!s.cache) throw new Error(`${url} runs no cost model (its /_sim/state has no cache)`);
  return (s.cache.prefilledTokens ?? 0) + (s.cache.decodedTokens ?? 0);
}

async function flushAll(urls: string[]): Promise<void> {
  for (const url of urls) {
    const res = await request(`${url}/flush_cache`, { method: 'POST' });
    await res.body.dump();
    if (res.statusCode !== 200) throw new Error(`${url}/flush_cache answered ${res.statusCode}`);
  }
}

export async function runRollout(o: RolloutOptions): Promise<RolloutRun[]> {
  const runs: RolloutRun[] = [];
  for (const n of o.sizes) {
    const fleet = await startEngines(n, o);
    try {
      for (const policy of o.policies) {
        if (performance.now() > o.deadline) break;
        const gw = await startGateway(['--policy', policy, '--log-level', 'warn'], o.logDir, undefined, `rollout-${n}-${policy}`);
        try {
          await registerAll(gw.url, fleet.urls);
          for (const kind of o.workloads) {
            if (performance.now() > o.deadline) break;
            const w = workloadOf(kind, o.seed);
            await flushAll(fleet.urls);
            const before = await Promise.all(fleet.urls.map(computedTokens));
            const figures = await drive(gw.url, w, KEYED.has(policy));
            const after = await Promise.all(fleet.urls.map(computedTokens));
            const tokensByEngine = after.map((t, i) => t - before[i]!);
            runs.push({
              ...figures,
              engines: n,
              policy,
              workload: kind,
              lowerBoundMs: stepTimeLowerBoundMs(summarize(w, REALISTIC), n, REALISTIC),
              loadCv: loadCv(tokensByEngine),
              tokensByEngine,
            });
            process.stdout.write(
              `rollout: ${n} engines, ${policy}, ${kind}: step ${(figures.makespanMs / 1000).toFixed(2)} s, ${figures.outputTokensPerS.toFixed(0)} tok/s, hit ${(figures.hitRate * 100).toFixed(1)}%${figures.failed ? `, ${figures.failed} failed` : ''}\n`,
            );
          }
        } finally {
          await gw.child.stop();
          live.delete(gw.child);
        }
      }
    } finally {
      await Promise.allSettled(fleet.children.map((c) => c.stop()));
      for (const c of fleet.children) live.delete(c);
    }
  }
  return runs;
}

/** The suite's goals, judged on one run's figures: the default against cache_aware, its bound, and round_robin. */
export function rolloutGoals(runs: RolloutRun[]): string[] {
  const lines: string[] = [];
  const find = (n: number, kind: string, policy: string) => runs.find((r) => r.engines === n && r.workload === kind && r.policy === policy);
  for (const n of [...new Set(runs.map((r) => r.engines))]) {
    for (const kind of [...new Set(runs.map((r) => r.workload))]) {
      const ours = find(n, kind, 'bounded_affinity');
      if (!ours) continue;
      const ca = find(n, kind, 'cache_aware');
      const rr = find(n, kind, 'round_robin');
      const want = kind === 'agentic' ? 1.1 : 1.0;
      if (ca) {
        const ratio = ours.outputTokensPerS / ca.outputTokensPerS;
        lines.push(`${n} engines, ${kind}: output tokens/s ${ratio.toFixed(3)}× cache_aware (goal ≥ ${want.toFixed(2)}×): ${ratio >= want ? 'met' : 'missed'}`);
      }
      const overBound = ours.makespanMs / ours.lowerBoundMs;
      lines.push(`${n} engines, ${kind}: step time ${overBound.toFixed(2)}× the lower bound (goal ≤ 1.20×): ${overBound <= 1.2 ? 'met' : 'missed'}`);
      if (rr) {
        const vsRr = ours.outputTokensPerS / rr.outputTokensPerS;
        lines.push(`${n} engines, ${kind}: ${vsRr.toFixed(3)}× round_robin (goal ≥ 1.00×): ${vsRr >= 1 ? 'met' : 'missed'}`);
      }
    }
  }
  return lines;
}

export function rolloutMarkdown(runs: RolloutRun[], machine: string): string {
  const out: string[] = ['## Rollouts: routing policies on a simulated fleet with the realistic cost model', '', machine, ''];
  for (const n of [...new Set(runs.map((r) => r.engines))]) {
    for (const kind of [...new Set(runs.map((r) => r.workload))]) {
      const rows = runs.filter((r) => r.engines === n && r.workload === kind);
      if (rows.length === 0) continue;
      out.push(`### ${n} engines, ${kind} (lower bound ${(rows[0]!.lowerBoundMs / 1000).toFixed(2)} s)`, '');
      out.push('| policy | step time s | × bound | output tok/s | prefix hit | prefill recomputed | TTFT p50 ms | TTFT p99 ms | load CV | failed |');
      out.push('|---|---|---|---|---|---|---|---|---|---|');
      for (const r of [...rows].sort((a, b) => a.makespanMs - b.makespanMs)) {
        out.push(
          `| ${r.policy} | ${(r.makespanMs / 1000).toFixed(2)} | ${(r.makespanMs / r.lowerBoundMs).toFixed(2)} | ${r.outputTokensPerS.toFixed(0)} | ${(r.hitRate * 100).toFixed(1)}% | ${r.prefillRecomputed} | ${ms(r.ttft.p50)} | ${ms(r.ttft.p99)} | ${r.loadCv.toFixed(2)} | ${r.failed} |`,
        );
      }
      out.push('');
    }
  }
  const goals = rolloutGoals(runs);
  if (goals.length) out.push('Goals:', '', ...goals.map((g) => `- ${g}`), '');
  return out.join('\n');
}
