// SMG's `cache_aware`: route a prompt to the engine most likely to hold its prefix in its KV cache,
// unless the loads are too far apart, when the least loaded engine takes it.
//
// - Imbalanced, when both `max − min > balance_abs_threshold` and `max > balance_rel_threshold ×
//   min` over the candidates' requests in flight: the least loaded (ties: fewer requests routed
//   there so far, then candidate order, as SMG's `(load, processed, index)`), reason `imbalance`.
// - Else, with token ids and a KV-event index that knows something: the engine holding the most
//   of the request's leading blocks (ties: lower load, then fewer blocks held), or the least loaded
//   when none holds any.
// - Else the approximate tree of routed prompts (prefix-tree.ts; token ids in 16-token pages, else
//   text by character): the engine holding the longest prefix when `matched / input >
//   cache_threshold`, else the least loaded (SMG's choice since sglang PR #14650; it used to be the
//   engine with the smallest tree).
//
// Every routed prompt is recorded in its tree for the engine that took it, in every mode, so the
// tree stays warm while the loads are apart or the index is empty. Every `eviction_interval_secs`,
// checked at the next pick, each tenant is cut to `max_tree_size` characters or tokens, least
// recently used first. The tree only ever matches among the candidates: an engine that cannot take
// the request does not count for its prefix.

import type { KvEventIndex } from './kv-event-index.ts';
import type { Candidate, Clock, Decision, PolicyRequest, RoutingInputs, RoutingPolicy } from './policy.ts';
import { PrefixTree } from './prefix-tree.ts';
import { PAGE_TOKENS, PAGE_UNITS, pagesOf, tokensIn } from './token-pages.ts';

export interface CacheAwareSettings {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  evictionIntervalSecs: number;
  maxTreeSize: number;
}

export class CacheAwarePolicy implements RoutingPolicy {
  readonly name = 'cache_aware';
  readonly needsPrompt = true;
  /** Text prompts, by character. */
  readonly textTree = new PrefixTree(1, 1);
  /** Token prompts, by 16-token page; sizes in tokens. */
  readonly tokenTree = new PrefixTree(PAGE_UNITS, PAGE_TOKENS);
  /** Worker id → requests routed there (SMG's `processed`, the second tie-break of the least loaded). */
  private readonly processed = new Map<string, number>();
  private nextEviction: number;

  constructor(
    private readonly settings: CacheAwareSettings,
    private readonly deps: { clock: Clock; kvIndex?: KvEventIndex },
  ) {
    this.nextEviction = deps.clock() + settings.evictionIntervalSecs * 1000;
  }

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    this.maybeEvict();
    const { candidates, inFlight } = req;
    let min = Number.POSITIVE_INFINITY;
    let max = 0;
    let least = candidates[0]!;
    let leastDone = 0;
    for (const c of candidates) {
      const load = inFlight(c.id);
      const done = this.processed.get(c.id) ?? 0;
      if (load < min || (load === min && done < leastDone)) {
        least = c;
        leastDone = done;
      }
      if (load < min) min = load;
      if (load > max) max = load;
    }
    const { balanceAbsThreshold, balanceRelThreshold, cacheThreshold } = this.settings;
    if (max - min > balanceAbsThreshold && max > min * balanceRelThreshold) return { worker: least, reason: 'imbalance' };

    const { tokens } = req;
    const index = this.deps.kvIndex;
    if (tokens !== undefined && index !== undefined && index.size(req.modelId) > 0) {
      return this.byOverlap(req, tokens, index) ?? { worker: least, reason: 'min_load' };
    }

    const byId = new Map(candidates.map((c) => [c.id, c]));
    const eligible = (id: string) => byId.has(id);
    let ratio = 0;
    let tenant: string | undefined;
    if (tokens !== undefined) {
      const m = this.tokenTree.match(pagesOf(tokens), eligible);
      ratio = tokens.length === 0 ? 0 : tokensIn(m.matched) / tokens.length;
      tenant = m.tenant;
    } else {
      const text = req.text ?? '';
      const m = this.textTree.match(text, eligible);
      ratio = text.length === 0 ? 0 : m.matched / text.length;
      tenant = m.tenant;
    }
    if (ratio > cacheThreshold && tenant !== undefined) return { worker: byId.get(tenant)!, reason: 'cache_hit' };
    return { worker: least, reason: 'min_load' };
  }

  routed(workerId: string, inputs: RoutingInputs): void {
    this.processed.set(workerId, (this.processed.get(workerId) ?? 0) + 1);
    if (inputs.tokens !== undefined) {
      const pages = pagesOf(inputs.tokens);
      if (pages.length > 0) this.tokenTree.insert(pages, workerId);
    } else if (inputs.text) this.textTree.insert(inputs.text, workerId);
  }

  workerRemoved(workerId: string): void {
    this.processed.delete(workerId);
    this.cacheFlushed(workerId);
  }

  cacheFlushed(workerId: string): void {
    this.textTree.removeTenant(workerId);
    this.tokenTree.removeTenant(workerId);
  }

  /** The candidate holding the most leading blocks, or undefined when none holds any. */
  private byOverlap<W extends Candidate>(req: PolicyRequest<W>, tokens: readonly number[], index: KvEventIndex): Decision<W> | undefined {
    const { scores, blocks } = index.overlap(req.modelId, tokens);
    let best: W | undefined;
    let bestScore = 0;
    let bestLoad = 0;
    let bestBlocks = 0;
    for (const c of req.candidates) {
      const score = scores.get(c.id) ?? 0;
      if (score <= 0) continue;
      const load = req.inFlight(c.id);
      const held = blocks.get(c.id) ?? 0;
      if (best === undefined || score > bestScore || (score === bestScore && (load < bestLoad || (load === bestLoad && held < bestBlocks)))) {
        best = c;
        bestScore = score;
        bestLoad = load;
        bestBlocks = held;
      }
    }
    return best && { worker: best, reason: 'cache_hit' };
  }

  private maybeEvict(): void {
    const now = this.deps.clock();
    if (now < this.nextEviction) return;
    this.nextEviction = now + this.settings.evictionIntervalSecs * 1000;
    this.textTree.evictTenantBySize(this.settings.maxTreeSize);
    this.tokenTree.evictTenantBySize(this.settings.maxTreeSize);
  }
}
