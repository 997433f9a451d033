// Sends one rollout workload through a gateway as a trainer does and measures what RL users
// judge a gateway by: the batch's makespan (the step's generation time), output tokens/s, the
// prefix hit rate (Σ cached ÷ Σ prompt tokens, from each answer's meta_info), the prefill tokens
// recomputed, and time to first token. GRPO requests go out at once (a trainer submits its whole
// batch); agentic sessions run their turns one after another, all sessions at once. Requests are
// streamed so the first token's time is seen; each carries slime's per-sample routing key.

import { Agent, request } from 'undici';
import { summarize as summary, type Summary } from '../stats.ts';
import type { AgenticWorkload, GrpoWorkload, RolloutRequest, Workload } from './workload.ts';

/** What one answered request told the client. */
export interface Answered {
  group: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  ttftMs: number;
  e2eMs: number;
  outputIds: number[];
}

export interface RunFigures {
  requests: number;
  failed: number;
  makespanMs: number;
  outputTokensPerS: number;
  promptTokens: number;
  cachedTokens: number;
  hitRate: number;
  prefillRecomputed: number;
  ttft: Summary;
  /** The first failures' messages (at most 5), so a table can say why. */
  errors: string[];
}

const dispatcher = new Agent({ connections: 1024, pipelining: 0, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 });

/** One streamed /generate; resolves with the final chunk's figures. */
export async function generate(gatewayUrl: string, r: RolloutRequest, routingKey: boolean): Promise<Answered> {
  const t0 = performance.now();
  const body = JSON.stringify({
    input_ids: r.inputIds,
    sampling_params: { max_new_tokens: r.maxNewTokens, ignore_eos: true, temperature: 1.0 },
    stream: true,
  });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (routingKey) headers['x-smg-routing-key'] = r.sample;
  const res = await request(`${gatewayUrl}/generate`, { method: 'POST', body, headers, dispatcher });
  if (res.statusCode !== 200) throw new Error(`/generate answered ${res.statusCode}: ${(await res.body.text()).slice(0, 200)}`);
  let ttft = Number.NaN;
  let last = '';
  let buffer = '';
  for await (const chunk of res.body) {
    if (Number.isNaN(ttft)) ttft = performance.now() - t0;
    buffer += chunk.toString();
    // Keep only the newest complete event: each carries the whole output so far.
    const end = buffer.lastIndexOf('\n\n');
    if (end < 0) continue;
    const events = buffer.slice(0, end).split('\n\n');
    buffer = buffer.slice(end + 2);
    for (let i = events.length - 1; i >= 0; i--) {
      const e = events[i]!;
      if (e.startsWith('data: ') && e !== 'data: [DONE]') {
        last = e.slice(6);
        break;
      }
    }
  }
  if (!last) throw new Error('/generate streamed no answer');
  const out = JSON.parse(last) as { output_ids?: number[]; meta_info?: Record<string, unknown> };
  const meta = out.meta_info ?? {};
  return {
    group: r.group,
    promptTokens: Number(meta.prompt_tokens ?? r.inputIds.length),
    cachedTokens: Number(meta.cached_tokens ?? 0),
    completionTokens: Number(meta.completion_tokens ?? out.output_ids?.length ?? 0),
    ttftMs: ttft,
    e2eMs: performance.now() - t0,
    outputIds: out.output_ids ?? [],
  };
}

async function driveGrpo(url: string, w: GrpoWorkload, routingKey: boolean, answered: Answered[], errors: string[]): Promise<void> {
  await Promise.all(
    w.requests.map((r) =>
      generate(url, r, routingKey).then(
        (a) => void answered.push(a),
        (e: unknown) => void errors.push(String((e as Error).message ?? e)),
      ),
    ),
  );
}

async function driveAgentic(url: string, w: AgenticWorkload, routingKey: boolean, answered: Answered[], errors: string[]): Promise<void> {
  await Promise.all(
    w.sessions.map(async (s) => {
      let context = s.prompt;
      for (const [t, turn] of s.turns.entries()) {
        if (context.length + turn.maxNewTokens > w.maxContext) return;
        // One session is one routing key across its turns (what agent frameworks send).
        const r: RolloutRequest = { group: s.id, sample: s.id, inputIds: context, maxNewTokens: turn.maxNewTokens };
        let a: Answered;
        try {
          a = await generate(url, r, routingKey);
        } catch (e) {
          errors.push(`${s.id} turn ${t}: ${String((e as Error).message ?? e)}`);
          return;
        }
        answered.push(a);
        context = [...context, ...a.outputIds, ...turn.toolTokens];
      }
    }),
  );
}

/** Runs the workload through the gateway at `url`; `routingKey` sends `X-SMG-Routing-Key` (slime does under consistent_hashing). */
export async function drive(url: string, w: Workload, routingKey: boolean): Promise<RunFigures> {
  const answered: Answered[] = [];
  const errors: string[] = [];
  const t0 = performance.now();
  if (w.kind === 'agentic') await driveAgentic(url, w, routingKey, answered, errors);
  else await driveGrpo(url, w, routingKey, answered, errors);
  const makespanMs = performance.now() - t0;
  const promptTokens = answered.reduce((n, a) => n + a.promptTokens, 0);
  const cachedTokens = answered.reduce((n, a) => n + a.cachedTokens, 0);
  const output = answered.reduce((n, a) => n + a.completionTokens, 0);
  return {
    requests: answered.length + errors.length,
    failed: errors.length,
    makespanMs,
    outputTokensPerS: output / (makespanMs / 1000),
    promptTokens,
    cachedTokens,
    hitRate: promptTokens === 0 ? 0 : cachedTokens / promptTokens,
    prefillRecomputed: promptTokens - cachedTokens,
    ttft: summary(answered.map((a) => a.ttftMs)),
    errors: errors.slice(0, 5),
  };
}

/** Coefficient of variation (σ ÷ mean) of the engines' shares of the work: 0 is an even spread. */
export function loadCv(perEngine: readonly number[]): number {
  const n = perEngine.length;
  const mean = perEngine.reduce((s, v) => s + v, 0) / n;
  if (!(mean > 0)) return 0;
  const variance = perEngine.reduce((s, v) => s + (v - mean) ** 2, 0) / n;
  return Math.sqrt(variance) / mean;
}
