// `bounded_affinity`, rlgate's default: a request goes to the engine that holds the most of its
// prompt, among the engines that would not finish it much later than the soonest one. For every
// eligible engine it estimates the work the request adds there (the prompt tokens the engine must
// still prefill, weighted by what a prefill token costs against a decoded one, plus the tokens it
// will decode) and the time that engine needs for its queued work and this request (queued work
// × how slow the engine has been against the fleet). Engines whose time passes the soonest by
// more than a slack are out; of the rest the routing key's engine, else the longest prefix, else
// the soonest wins. So:
// - GRPO siblings (one prompt, n samples) and the turns of a session stay where their prefix
//   lives until that engine is a slack's worth behind the others;
// - load is counted in tokens of work, not requests: a long-output sample weighs what it costs;
// - an engine whose requests take longer per unit of work than the fleet's (a slower GPU, a
//   saturated one) has its time scaled by how much slower and gets no absolute slack, so new
//   work goes elsewhere;
// - a routing key (`X-SMG-Routing-Key`) keeps a session on its engine within the bound, never past it;
// - what each engine holds is the more of what its KV events say, where it streams them, and an
//   approximate tree of the prompts routed to it, bounded per engine by its KV size, least
//   recently used out first (a session's next turn starts with its last prompt, so it finds its
//   engine; a sibling routed before the engine reported the first one's pages still finds it);
// - an engine whose cache was flushed (new weights, a restart) is forgotten in the tree.
// Pure: time comes from the clock it was built with.

import type { KvEventIndex } from './kv-event-index.ts';
import type { Candidate, Clock, Decision, PolicyRequest, RequestOutcome, RoutingInputs, RoutingPolicy } from './policy.ts';
import { PrefixTree } from './prefix-tree.ts';
import { PAGE_TOKENS, PAGE_UNITS, pagesOf, tokensIn } from './token-pages.ts';

export interface BoundedAffinitySettings {
  /**
   * What prefilling one prompt token costs, in decoded tokens. SGLang-class engines prefill about
   * 8,000 tokens/s and decode a token in 0.35 ms plus a share of a 6 ms step: about 0.3.
   */
  prefillWeight: number;
  /** Output tokens assumed for a request that names no exact length, until outputs were seen. */
  defaultOutputTokens: number;
  /**
   * The load bound: an engine may take a request only if it would be done with its queue and the
   * request at most this much work later than the soonest engine (in decoded tokens; about a
   * GRPO group's worth, so siblings stay together on an idle fleet)...
   */
  slackTokens: number;
  /** ...or this fraction of the soonest engine's time, when that is more (a busy fleet). */
  slackFraction: number;
  /** Tokens the tree keeps per engine: its KV cache (SGLang's default pool on the simulators: 524,288). */
  kvTokens: number;
}

export const BOUNDED_AFFINITY_DEFAULTS: BoundedAffinitySettings = {
  prefillWeight: 0.3,
  defaultOutputTokens: 256,
  slackTokens: 4_096,
  slackFraction: 0.15,
  kvTokens: 524_288,
};

/** The policy's fixed figures (the tunable ones are BoundedAffinitySettings). */
const FIXED = {
  /**
   * Less than a page held counts as nothing: an engine's cache reuses whole pages only (SGLang's
   * page, 16 tokens), and a few shared characters of two short text prompts are no reason to send
   * the second where the first went.
   */
  minHeldTokens: 16,
  /** Characters per token, to weigh a text prompt against token work (English BPE: about 4). */
  charsPerToken: 4,
  /** How much an engine's slowness moves toward each finished request. */
  slownessEwma: 0.2,
  /** Added to every request's time before it is judged (see Slowness.observe). */
  slownessAllowanceMs: 100,
  /**
   * A request of less work than this teaches nothing of its engine's speed: a handful of tokens
   * measures the wire and the host (an HTTP engine against a gRPC one, a loaded machine), not the
   * engine, and an idle fleet of such requests would stop being served in turn.
   */
  slownessMinWork: 32,
  /** Slowness up to this factor of the fleet's median counts as the median's. */
  slownessBand: 1.5,
  /** An engine is never judged more than this many times slower than the fleet's median. */
  slownessClamp: 20,
  /** Routing keys remembered (their sessions' engines), least recently used out first. */
  maxKeys: 100_000,
  /** How much the output-length estimate moves toward each new observation. */
  outputEwma: 0.05,
} as const;

/** What one routed request added to its engine's queue. */
interface Routed {
  worker: string;
  work: number;
  at: number;
}

/**
 * How slow an engine has been: a fading mean of its requests' wall time per unit of work. Compared
 * with the other engines' (slowness ÷ the fleet's median), it says how much longer work takes
 * there. A loaded engine's requests are slower too, which only adds to what its queue says.
 */
class Slowness {
  private msPerWork: number | undefined;

  observe(ms: number, work: number): void {
    if (!(work >= FIXED.slownessMinWork)) return;
    // A fixed allowance per request keeps the few milliseconds of noise of a tiny request (a cold
    // start, a GC pause) from reading as a slow engine; seconds-long requests are judged as they are.
    const x = (ms + FIXED.slownessAllowanceMs) / work;
    this.msPerWork = this.msPerWork === undefined ? x : this.msPerWork + FIXED.slownessEwma * (x - this.msPerWork);
  }

  get value(): number | undefined {
    return this.msPerWork;
  }
}

export class BoundedAffinityPolicy implements RoutingPolicy {
  readonly name = 'bounded_affinity';
  readonly needsPrompt = true;
  readonly textTree = new PrefixTree(1, 1);
  readonly tokenTree = new PrefixTree(PAGE_UNITS, PAGE_TOKENS);
  private readonly queued = new Map<string, number>();
  private readonly slowness = new Map<string, Slowness>();
  private readonly inFlight = new WeakMap<RoutingInputs, Routed>();
  private readonly keys = new Map<string, string>();
  private outputEstimate: number;
  /** Worker id → the count of routed requests when it last took one (the tie-break). */
  private readonly lastRouted = new Map<string, number>();
  private routedCount = 0;
  /** The last pick's prompt and what each engine held of it: `routed` follows its pick, and walks no tree again. */
  private lastHeld: { tokens?: readonly number[]; text?: string; held: Map<string, number> } | undefined;

  constructor(
    private readonly settings: BoundedAffinitySettings = BOUNDED_AFFINITY_DEFAULTS,
    private readonly deps: { clock: Clock; kvIndex?: KvEventIndex },
  ) {
    this.outputEstimate = settings.defaultOutputTokens;
  }

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates } = req;
    const held = this.heldBy(req);
    this.lastHeld = { tokens: req.tokens, text: req.text, held };
    const promptTokens = promptLength(req);
    const output = this.outputOf(req);
    const median = this.medianSlowness(candidates);
    const n = candidates.length;
    // Each candidate's time for its queue plus this request, and the best of them.
    const times = new Array<number>(n);
    const holds = new Array<number>(n);
    const slow = new Array<boolean>(n);
    let bestTime = Number.POSITIVE_INFINITY;
    for (let i = 0; i < n; i++) {
      const w = candidates[i]!;
      const raw = Math.min(held.get(w.id) ?? 0, promptTokens);
      const h = raw >= FIXED.minHeldTokens ? raw : 0;
      const work = this.settings.prefillWeight * (promptTokens - h) + output;
      const f = this.factor(w.id, median);
      const t = ((this.queued.get(w.id) ?? 0) + work) * f;
      times[i] = t;
      holds[i] = h;
      slow[i] = f > 1;
      if (t < bestTime) bestTime = t;
    }
    // The bound: no engine takes the request if it would finish its queue later than the best
    // engine by more than the slack: absolute (a GRPO group's worth, for a fleet near idle) or
    // relative (for a busy one). An engine slower than the fleet gets the relative slack only:
    // on a quiet fleet the absolute one would let it keep every prefix it holds.
    const relative = bestTime * (1 + this.settings.slackFraction);
    const bound = Math.max(bestTime + this.settings.slackTokens, relative);
    const keyWorker = req.routingKey !== undefined ? this.keys.get(req.routingKey) : undefined;
    // Within the bound: the routing key's engine, else the one holding the most of the prompt,
    // else (nobody holds any) the soonest done; ties to the engine routed to least recently, so
    // an idle fleet is served round robin (whatever retries picked in between).
    let pick = -1;
    for (let i = 0; i < n; i++) {
      if (times[i]! > (slow[i] ? relative : bound)) continue;
      if (candidates[i]!.id === keyWorker) return { worker: candidates[i]!, reason: 'routing_key' };
      if (pick < 0 || holds[i]! > holds[pick]!) {
        pick = i;
        continue;
      }
      if (holds[i] !== holds[pick]) continue;
      if (times[i]! < times[pick]! || (times[i] === times[pick] && this.lastRoutedOf(candidates[i]!.id) < this.lastRoutedOf(candidates[pick]!.id))) pick = i;
    }
    return { worker: candidates[pick]!, reason: holds[pick]! > 0 ? 'cache_hit' : 'min_load' };
  }

  routed(workerId: string, inputs: RoutingInputs): void {
    const now = this.deps.clock();
    const last = this.lastHeld;
    const raw = last && last.tokens === inputs.tokens && last.text === inputs.text ? (last.held.get(workerId) ?? 0) : this.heldOne(inputs, workerId);
    const held = raw >= FIXED.minHeldTokens ? raw : 0;
    const promptTokens = promptLength(inputs);
    const work = this.settings.prefillWeight * (promptTokens - Math.min(held, promptTokens)) + this.outputOf(inputs);
    this.inFlight.set(inputs, { worker: workerId, work, at: now });
    this.lastRouted.set(workerId, ++this.routedCount);
    this.queued.set(workerId, (this.queued.get(workerId) ?? 0) + work);
    this.remember(inputs.tokens ? pagesOf(inputs.tokens) : undefined, inputs.text, workerId);
    if (inputs.routingKey !== undefined) {
      this.keys.delete(inputs.routingKey);
      this.keys.set(inputs.routingKey, workerId);
      if (this.keys.size > FIXED.maxKeys) this.keys.delete(this.keys.keys().next().value!);
    }
  }

  finished(workerId: string, inputs: RoutingInputs, outcome?: RequestOutcome): void {
    const r = this.inFlight.get(inputs);
    if (!r) return;
    this.inFlight.delete(inputs);
    const now = this.deps.clock();
    this.queued.set(r.worker, Math.max(0, (this.queued.get(r.worker) ?? 0) - r.work));
    // A request cut off early (an error, a client gone) says nothing of the engine's speed.
    if (outcome?.answered) this.slownessOf(r.worker).observe(now - r.at, r.work);
    if (outcome?.completionTokens !== undefined && inputs.expectedOutputTokens === undefined) {
      this.outputEstimate += FIXED.outputEwma * (outcome.completionTokens - this.outputEstimate);
    }
  }

  workerRemoved(workerId: string): void {
    this.cacheFlushed(workerId);
    this.queued.delete(workerId);
    this.slowness.delete(workerId);
    this.lastRouted.delete(workerId);
  }

  cacheFlushed(workerId: string): void {
    this.textTree.removeTenant(workerId);
    this.tokenTree.removeTenant(workerId);
  }

  /**
   * The engine's queued work: the requests routed there and not yet finished, in decoded-token
   * units (a prompt token to prefill weighs `prefillWeight`), rounded, as the load bound reads it.
   */
  queuedTokens(workerId: string): number {
    return Math.round(this.queued.get(workerId) ?? 0);
  }

  /**
   * Prompt tokens each engine holds: the more of what its KV events say and what the tree of
   * routed prompts says. The events are the engine's own word (prompts other replicas routed
   * there too), but they come once the engine has prefilled a prompt: a GRPO sibling routed a few
   * milliseconds after the first would not see it, and the group would scatter.
   */
  private heldBy(req: PolicyRequest<Candidate>): Map<string, number> {
    const { kvIndex } = this.deps;
    if (req.tokens) {
      const out = new Map<string, number>();
      for (const [id, units] of this.tokenTree.matchAll(pagesOf(req.tokens))) out.set(id, tokensIn(units));
      if (kvIndex && kvIndex.size(req.modelId) > 0) {
        for (const [id, blocks] of kvIndex.overlap(req.modelId, req.tokens).scores) out.set(id, Math.max(out.get(id) ?? 0, blocks * PAGE_TOKENS));
      }
      return out;
    }
    if (req.text !== undefined) {
      const out = new Map<string, number>();
      for (const [id, chars] of this.textTree.matchAll(req.text)) out.set(id, chars / FIXED.charsPerToken);
      return out;
    }
    return new Map();
  }

  private heldOne(inputs: RoutingInputs, workerId: string): number {
    if (inputs.tokens) return tokensIn(this.tokenTree.matchAll(pagesOf(inputs.tokens)).get(workerId) ?? 0);
    if (inputs.text !== undefined) return (this.textTree.matchAll(inputs.text).get(workerId) ?? 0) / FIXED.charsPerToken;
    return 0;
  }

  private remember(pages: string | undefined, text: string | undefined, workerId: string): void {
    if (pages) {
      this.tokenTree.insert(pages, workerId);
      // Past the engine's KV size, down to nine tenths at once: one walk of the tree per tenth, not per prompt.
      if (this.tokenTree.sizeOf(workerId) > this.settings.kvTokens) this.tokenTree.evictTenantBySize(Math.floor(0.9 * this.settings.kvTokens));
    }
    if (text !== undefined && text.length > 0) {
      this.textTree.insert(text, workerId);
      const chars = this.settings.kvTokens * FIXED.charsPerToken;
      if (this.textTree.sizeOf(workerId) > chars) this.textTree.evictTenantBySize(Math.floor(0.9 * chars));
    }
  }

  /** The output a request will produce: exactly when it says so, else the running estimate within its bound. */
  private outputOf(inputs: RoutingInputs): number {
    if (inputs.expectedOutputTokens !== undefined) return inputs.expectedOutputTokens;
    return inputs.maxOutputTokens !== undefined ? Math.min(inputs.maxOutputTokens, this.outputEstimate) : this.outputEstimate;
  }

  private lastRoutedOf(workerId: string): number {
    return this.lastRouted.get(workerId) ?? -1;
  }

  private slownessOf(workerId: string): Slowness {
    let x = this.slowness.get(workerId);
    if (!x) {
      x = new Slowness();
      this.slowness.set(workerId, x);
    }
    return x;
  }

  /** The candidates' median slowness, undefined while none has finished a request. */
  private medianSlowness(candidates: readonly Candidate[]): number | undefined {
    const known = candidates
      .map((c) => this.slowness.get(c.id)?.value)
      .filter((v): v is number => v !== undefined)
      .sort((a, b) => a - b);
    // The lower middle: with two engines, one of them ten times slower, the reference is the fast one.
    return known.length === 0 ? undefined : known[(known.length - 1) >> 1]!;
  }

  /** How many times longer work takes on this engine than on the median one (1 while unknown, and for the median and faster). */
  private factor(workerId: string, median: number | undefined): number {
    const own = this.slowness.get(workerId)?.value;
    if (own === undefined || median === undefined || !(median > 0)) return 1;
    const f = own / median;
    // Within a factor of FIXED.slownessBand of the median an engine counts as the median: request times
    // are noisy, and the faster-by-noise engine would take every tie.
    // Only slowness counts, never speed: an engine measured fast while the others were measured
    // cold (or long ago) would take every request, and their figures would never be refreshed.
    if (f < FIXED.slownessBand) return 1;
    return Math.min(FIXED.slownessClamp, f);
  }
}

function promptLength(inputs: RoutingInputs): number {
  if (inputs.tokens) return inputs.tokens.length;
  if (inputs.text !== undefined) return inputs.text.length / FIXED.charsPerToken;
  return 0;
}
