// The rollout benchmark's workloads, as an RL trainer sends them: seeded, so every routing policy
// meets the same prompts, the same output lengths and the same tool outputs in one run. Pure: it
// builds requests and never sends one (rollout.ts drives them through a gateway).
// - `grpo-short`: GRPO groups of n = 8 samples over short prompts (100–400 tokens);
// - `grpo-long-system`: n = 16 samples of prompts that open with one shared 4k-token system prompt;
// - `agentic`: multi-turn sessions (4–16 turns), each turn appending the model's output and a tool
//   output of 100–2,000 tokens, contexts up to 32k tokens, many sessions at once.
// Output lengths follow a lognormal around 300 tokens with a tail to 4k, fixed per request with
// `ignore_eos` + `max_new_tokens`, so each policy is asked for exactly the same work.

/** A small, fast, seedable PRNG (mulberry32): same seed, same workload, on every machine. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const int = (rand: () => number, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));

/** Token ids of a made-up text: distinct per call, in the printable range the simulators' toy tokenizer uses. */
function tokens(rand: () => number, n: number): number[] {
  return Array.from({ length: n }, () => int(rand, 32, 126));
}

/** Lognormal output length with median `median`, clamped to [min, max]: most near the median, a few long. */
export function outputLength(rand: () => number, median = 300, sigma = 0.8, min = 16, max = 4096): number {
  // Box-Muller: one standard normal from two uniforms.
  const z = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  return Math.max(min, Math.min(max, Math.round(median * Math.exp(sigma * z))));
}

/** One /generate request of a rollout. */
export interface RolloutRequest {
  /** The group (GRPO) or session (agentic) it belongs to. */
  group: string;
  /** slime's per-sample session id (`X-SMG-Routing-Key` under consistent_hashing). */
  sample: string;
  inputIds: number[];
  maxNewTokens: number;
}

/** A batch of independent requests (GRPO): every request can start at once. */
export interface GrpoWorkload {
  kind: 'grpo-short' | 'grpo-long-system';
  requests: RolloutRequest[];
}

/** One turn of a session: what the model writes, then what the tool answers (appended before the next turn). */
export interface Turn {
  maxNewTokens: number;
  toolTokens: number[];
}

/** Sessions whose turns run one after another, each on the context so far (agentic). */
export interface AgenticWorkload {
  kind: 'agentic';
  sessions: Array<{ id: string; prompt: number[]; turns: Turn[] }>;
  /** Most tokens a context may reach: a session stops before a turn would pass it. */
  maxContext: number;
}

export type Workload = GrpoWorkload | AgenticWorkload;

export function grpoShort(seed: number, groups = 32, n = 8): GrpoWorkload {
  const rand = prng(seed);
  const requests: RolloutRequest[] = [];
  for (let g = 0; g < groups; g++) {
    const prompt = tokens(rand, int(rand, 100, 400));
    for (let s = 0; s < n; s++) requests.push({ group: `g${g}`, sample: `g${g}-s${s}`, inputIds: prompt, maxNewTokens: outputLength(rand) });
  }
  return { kind: 'grpo-short', requests };
}

export function grpoLongSystem(seed: number, groups = 8, n = 16, systemTokens = 4096): GrpoWorkload {
  const rand = prng(seed);
  const system = tokens(rand, systemTokens);
  const requests: RolloutRequest[] = [];
  for (let g = 0; g < groups; g++) {
    const prompt = [...system, ...tokens(rand, int(rand, 50, 300))];
    for (let s = 0; s < n; s++) requests.push({ group: `g${g}`, sample: `g${g}-s${s}`, inputIds: prompt, maxNewTokens: outputLength(rand) });
  }
  return { kind: 'grpo-long-system', requests };
}

export function agentic(seed: number, sessions = 64, maxContext = 32_768): AgenticWorkload {
  const rand = prng(seed);
  return {
    kind: 'agentic',
    maxContext,
    sessions: Array.from({ length: sessions }, (_, i) => ({
      id: `session-${i}`,
      prompt: tokens(rand, int(rand, 200, 1_000)),
      // Agent turns write less than a reasoning answer: a tool call or a short step.
      turns: Array.from({ length: int(rand, 4, 16) }, () => ({
        maxNewTokens: outputLength(rand, 150, 0.7, 16, 1_024),
        toolTokens: tokens(rand, int(rand, 100, 2_000)),
      })),
    })),
  };
}

/** The cost model's constants, as the simulators take them (`--cost-model realistic`). */
export interface CostModel {
  prefillTokensPerS: number;
  decodeStepMs: number;
  decodeMsPerRequest: number;
  kvCacheTokens: number;
  pageSize: number;
  /** Most requests an engine runs at once. */
  maxRunning: number;
}

/** SMG's mock_worker "realistic" engine; rlgate's simulators take the same defaults. */
export const REALISTIC: CostModel = {
  prefillTokensPerS: 8_000,
  decodeStepMs: 6,
  decodeMsPerRequest: 0.35,
  kvCacheTokens: 524_288,
  pageSize: 16,
  maxRunning: 256,
};

/** What a run must compute at least: each distinct prefix once, every output token. */
export interface WorkSummary {
  requests: number;
  promptTokens: number;
  /** Prompt tokens no earlier request shares (each distinct page-aligned prefix counted once). */
  distinctPromptTokens: number;
  outputTokens: number;
  /** The longest chain of work that must run in order (one request, or one session's turns), in ms at an idle engine. */
  longestChainMs: number;
}

/** Σ of the tokens of a trie of token sequences: what prefilling each distinct prefix once costs. */
class PrefixCounter {
  private readonly root = new Map<number, Map<number, unknown>>();
  /** Adds a sequence; returns how many of its tokens no earlier sequence had at the same prefix. */
  add(ids: readonly number[]): number {
    let node = this.root as Map<number, unknown>;
    let fresh = 0;
    for (const id of ids) {
      let next = node.get(id) as Map<number, unknown> | undefined;
      if (!next) {
        next = new Map();
        node.set(id, next);
        fresh++;
      }
      node = next;
    }
    return fresh;
  }
}

/** The work of a workload, the step-time lower bound's inputs. Agentic turns' outputs are unknown before they run: counted by length, with the tool outputs. */
export function summarize(w: Workload, cost: CostModel = REALISTIC): WorkSummary {
  const counter = new PrefixCounter();
  const idleDecodeMs = cost.decodeStepMs + cost.decodeMsPerRequest;
  const s: WorkSummary = { requests: 0, promptTokens: 0, distinctPromptTokens: 0, outputTokens: 0, longestChainMs: 0 };
  if (w.kind !== 'agentic') {
    for (const r of w.requests) {
      s.requests++;
      s.promptTokens += r.inputIds.length;
      s.distinctPromptTokens += counter.add(r.inputIds);
      s.outputTokens += r.maxNewTokens;
      s.longestChainMs = Math.max(s.longestChainMs, (r.inputIds.length / cost.prefillTokensPerS) * 1000 + r.maxNewTokens * idleDecodeMs);
    }
    return s;
  }
  for (const session of w.sessions) {
    let context = session.prompt.length;
    let chain = 0;
    // Each turn's new tokens (the previous output, then the tool's) are new to every cache.
    let fresh = session.prompt.length;
    for (const turn of session.turns) {
      if (context + turn.maxNewTokens > w.maxContext) break;
      s.requests++;
      s.promptTokens += context;
      s.distinctPromptTokens += fresh;
      s.outputTokens += turn.maxNewTokens;
      chain += (fresh / cost.prefillTokensPerS) * 1000 + turn.maxNewTokens * idleDecodeMs;
      context += turn.maxNewTokens + turn.toolTokens.length;
      fresh = turn.toolTokens.length;
    }
    s.longestChainMs = Math.max(s.longestChainMs, chain);
  }
  return s;
}

/**
 * A lower bound on a run's makespan over `engines` engines: the larger of the longest chain that
 * must run in order and the fleet's share of the work at full batch (each distinct prefix
 * prefilled once, every output token decoded in steps of `maxRunning` requests).
 */
export function stepTimeLowerBoundMs(s: WorkSummary, engines: number, cost: CostModel = REALISTIC): number {
  const prefillMs = (s.distinctPromptTokens / cost.prefillTokensPerS) * 1000;
  const decodeMs = s.outputTokens * (cost.decodeMsPerRequest + cost.decodeStepMs / cost.maxRunning);
  return Math.max(s.longestChainMs, (prefillMs + decodeMs) / engines);
}
