// The refit-under-load suite (`npm run bench -- --suites refit-under-load`): each refit strategy
// in the same run, over one fleet of SGLang simulators on the realistic cost model under steady
// rollout load. Closed-loop callers keep sending /generate (a 200-token prompt, 256 tokens out);
// the fleet's output tokens/s is measured steady, then through one refit per strategy (`all`,
// `rolling` one engine at a time, `in_flight`), whose weight load is held for LOAD_MS on every
// engine (a disk load of a small model). Per strategy: output tokens/s during the refit ÷ steady,
// engine-seconds paused (each engine's pause → resume, from its own records), requests aborted
// and straddling (admitted on one version, answered on another), and the refit's wall time.
// Measures only: the goals are judged in the report.

import { join } from 'node:path';
import { request } from 'undici';
import { Child, childEnv, live, registerAll, startGateway } from './children.ts';

/** How long each engine's weight load is held. */
export const LOAD_MS = 2_000;
const PROMPT = 200;
/** After each refit: the requests that ran through it end, and the fleet is steady again. */
const SETTLE_MS = 4_000;
const OUTPUT = 256;

export interface StrategyRun {
  strategy: 'all' | 'rolling' | 'in_flight';
  refit_status: number;
  wall_ms: number;
  steady_tokens_per_s: number;
  during_tokens_per_s: number;
  ratio: number;
  engine_seconds_paused: number;
  /** The longest pause → resume of any engine. */
  max_pause_ms: number;
  /** Requests answered while the refit ran. */
  requests_during: number;
  /** Of the requests answered from the refit's start to a settle after it: aborted, admitted on one version and answered on another, refused (503), failed otherwise. */
  aborted: number;
  straddling: number;
  refused: number;
  failed: number;
}

interface Answer {
  at: number;
  tokens: number;
  status: number;
  aborted: boolean;
  straddled: boolean;
}

async function startEngines(n: number, logDir: string, seed: number): Promise<{ urls: string[]; children: Child[] }> {
  const children = Array.from({ length: n }, (_, i) => {
    const args = ['--import', 'tsx', 'sim/sglang/main.ts', '--port', '0', '--cost-model', 'realistic', '--random-seed', String(seed + i)];
    const c = new Child(`engine-${i}`, args, join(logDir, `refit-load-engine-${i}.log`), childEnv());
    live.add(c);
    return c;
  });
  const lines = await Promise.all(children.map((c) => c.next('listening', 60_000)));
  return { urls: lines.map((l) => l.url as string), children };
}

async function json(url: string, method: 'GET' | 'POST' | 'PUT' | 'DELETE' = 'GET', body?: unknown): Promise<{ status: number; body: any }> {
  const res = await request(url, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.body.text();
  return { status: res.statusCode, body: text ? JSON.parse(text) : null };
}

/** Each engine's pause → resume windows since `since` (ms), from its own request records. */
async function pauseWindows(url: string, since: number): Promise<Array<[number, number]>> {
  const { body } = await json(`${url}/_sim/requests`);
  const out: Array<[number, number]> = [];
  let from: number | undefined;
  for (const r of body as Array<{ path: string; time: string }>) {
    const t = Date.parse(r.time);
    if (t < since) continue;
    if (r.path === '/pause_generation') from = t;
    if (r.path === '/continue_generation' && from !== undefined) {
      out.push([from, t]);
      from = undefined;
    }
  }
  return out;
}

export async function runRefitUnderLoad(o: { engines: number; callers: number; steadySeconds: number; logDir: string; seed: number }): Promise<StrategyRun[]> {
  const fleet = await startEngines(o.engines, o.logDir, o.seed);
  const gw = await startGateway(['--log-level', 'warn'], o.logDir, undefined, 'refit-under-load');
  const runs: StrategyRun[] = [];
  try {
    await registerAll(gw.url, fleet.urls);
    let version = 1;
    const refit = async (strategy: Record<string, unknown> | undefined) => {
      version++;
      const started = performance.now();
      const r = await json(`${gw.url}/v1/rl/refits`, 'POST', {
        weight_version: String(version),
        source: { kind: 'disk', model_path: `/m/${version}`, flush_cache: false },
        ...(strategy ? { strategy } : {}),
      });
      return { status: r.status, wallMs: performance.now() - started, report: r.body };
    };
    // Numeric versions from the start: straddling is a change of version.
    const first = await refit(undefined);
    if (first.status !== 200) throw new Error(`the first refit answered ${first.status}: ${JSON.stringify(first.report)}`);

    const answers: Answer[] = [];
    let running = true;
    let seq = 0;
    const callers = Array.from({ length: o.callers }, async (_, c) => {
      while (running) {
        const n = seq++;
        const input_ids = Array.from({ length: PROMPT }, (_, i) => ((n * 7919 + i * 104729 + c) % 30_000) + 1);
        const res = await request(`${gw.url}/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ input_ids, sampling_params: { max_new_tokens: OUTPUT, ignore_eos: true } }),
        }).catch(() => undefined);
        if (!res) {
          answers.push({ at: performance.now(), tokens: 0, status: 0, aborted: false, straddled: false });
          continue;
        }
        const text = await res.body.text();
        let meta: { completion_tokens?: number; finish_reason?: { type?: string }; weight_version?: string } = {};
        try {
          meta = JSON.parse(text).meta_info ?? {};
        } catch {}
        const admitted = res.headers['x-rl-admitted-version'];
        answers.push({
          at: performance.now(),
          tokens: meta.completion_tokens ?? 0,
          status: res.statusCode,
          aborted: meta.finish_reason?.type === 'abort',
          straddled: typeof admitted === 'string' && meta.weight_version !== undefined && admitted !== meta.weight_version,
        });
        // A refused request (503: every engine paused) is sent again shortly, as a trainer's client does.
        if (res.statusCode !== 200) await new Promise((r) => setTimeout(r, 100));
      }
    });
    const rate = (from: number, to: number) => answers.filter((a) => a.at >= from && a.at < to).reduce((s, a) => s + a.tokens, 0) / ((to - from) / 1000);
    // Warm up, then steady.
    await new Promise((r) => setTimeout(r, 3_000));
    const steadyFrom = performance.now();
    await new Promise((r) => setTimeout(r, o.steadySeconds * 1000));
    const steady = rate(steadyFrom, performance.now());
    const strategies: Array<[StrategyRun['strategy'], Record<string, unknown> | undefined]> = [
      ['all', undefined],
      ['rolling', { kind: 'rolling', max_unavailable: 1, drain_timeout_ms: 30_000 }],
      ['in_flight', { kind: 'in_flight', cache: 'keep' }],
    ];
    for (const [name, strategy] of strategies) {
      for (const url of fleet.urls) await json(`${url}/_sim/faults`, 'PUT', { route: 'update_weights_from_disk', delayMs: LOAD_MS, times: 1 });
      const since = Date.now();
      const from = performance.now();
      const r = await refit(strategy);
      const to = performance.now();
      // Back to steady before the next strategy; the requests that ran through the refit end meanwhile.
      await new Promise((res) => setTimeout(res, SETTLE_MS));
      const during = answers.filter((a) => a.at >= from && a.at < to);
      const through = answers.filter((a) => a.at >= from && a.at < to + SETTLE_MS);
      const windows = (await Promise.all(fleet.urls.map((u) => pauseWindows(u, since)))).flat();
      const paused = windows.map(([a, b]) => b - a);
      runs.push({
        strategy: name,
        refit_status: r.status,
        wall_ms: Math.round(r.wallMs),
        steady_tokens_per_s: Math.round(steady),
        during_tokens_per_s: Math.round(rate(from, to)),
        ratio: Number((rate(from, to) / steady).toFixed(3)),
        engine_seconds_paused: Number((paused.reduce((s, x) => s + x, 0) / 1000).toFixed(2)),
        max_pause_ms: Math.max(0, ...paused),
        requests_during: during.length,
        aborted: through.filter((a) => a.aborted).length,
        straddling: through.filter((a) => a.straddled).length,
        refused: through.filter((a) => a.status === 503).length,
        failed: through.filter((a) => a.status !== 200 && a.status !== 503).length,
      });
      process.stdout.write(`refit-under-load: ${name}: ${r.status} in ${(r.wallMs / 1000).toFixed(1)} s, ${runs.at(-1)!.ratio}× steady\n`);
    }
    running = false;
    await Promise.all(callers);
  } finally {
    await gw.child.stop();
    live.delete(gw.child);
    await Promise.allSettled(fleet.children.map((c) => c.stop()));
    for (const c of fleet.children) live.delete(c);
  }
  return runs;
}

/** The goals of issue 18, judged on one run. */
export function refitGoals(runs: StrategyRun[], engines: number): string[] {
  const by = (s: string) => runs.find((r) => r.strategy === s);
  const lines: string[] = [];
  const rolling = by('rolling');
  if (rolling) {
    const met = rolling.ratio >= 0.8 && rolling.failed === 0 && rolling.refused === 0;
    lines.push(
      `rolling (max_unavailable 1): ${rolling.ratio.toFixed(3)}× steady output through the refit (goal ≥ 0.80; the limit is ${((engines - 1) / engines).toFixed(3)}): ${met ? 'met' : 'missed'}`,
    );
  }
  const inFlight = by('in_flight');
  if (inFlight) {
    const met = inFlight.max_pause_ms <= LOAD_MS + 20 && inFlight.aborted === 0 && inFlight.failed === 0;
    lines.push(
      `in_flight: longest pause ${inFlight.max_pause_ms} ms against a ${LOAD_MS} ms load (goal ≤ load + 20 ms), ${inFlight.aborted} aborted (goal 0): ${met ? 'met' : 'missed'}`,
    );
  }
  const all = by('all');
  if (all)
    lines.push(
      `all: ${all.refit_status}, ${all.ratio.toFixed(3)}× steady, ${all.aborted} aborted, ${all.refused} refused while the fleet was paused (the transaction as before)`,
    );
  return lines;
}

export function refitUnderLoadMarkdown(runs: StrategyRun[], engines: number, callers: number, machine: string): string {
  const out = [
    '## Refits under load: each strategy over the same fleet',
    '',
    machine,
    '',
    `${engines} SGLang simulators (realistic cost model), ${callers} closed-loop callers (${PROMPT}-token prompts, ${OUTPUT} tokens out, a refused request sent again after 100 ms), every engine's load held ${LOAD_MS} ms. Aborted, straddling, refused and failed count the answers from the refit's start to ${SETTLE_MS / 1000} s after its end.`,
    '',
    '| strategy | refit | wall s | tok/s steady | tok/s during | × steady | engine-s paused | longest pause ms | answered during | aborted | straddling | refused (503) | failed |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    out.push(
      `| ${r.strategy} | ${r.refit_status} | ${(r.wall_ms / 1000).toFixed(2)} | ${r.steady_tokens_per_s} | ${r.during_tokens_per_s} | ${r.ratio.toFixed(3)} | ${r.engine_seconds_paused} | ${r.max_pause_ms} | ${r.requests_during} | ${r.aborted} | ${r.straddling} | ${r.refused} | ${r.failed} |`,
    );
  }
  out.push('', ...refitGoals(runs, engines).map((l) => `- ${l}`), '');
  return out.join('\n');
}
