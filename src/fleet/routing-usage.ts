// What routing did on this replica, per worker: the routing decisions that sent requests to it (by
// reason) and the token counts of the answers it gave (prompt, cached, completion, as the relay
// read them off each answer). The `routing` object of the /v1/rl rows is made from it. Counts
// only: it never routes, never reads a clock and knows nothing of other replicas.

import type { Reason, RequestOutcome, RoutingPolicy } from './policies/policy.ts';

/** The `routing` object of a /v1/rl row. */
export interface RoutingFigures {
  prompt_tokens: number;
  cached_tokens: number;
  completion_tokens: number;
  /** cached ÷ prompt tokens; null until an answer counted a prompt token. */
  prefix_hit_rate: number | null;
  /** The policy's queued work on the engine, in tokens; null when the policy keeps no such count. */
  queued_tokens: number | null;
  /** Routing decisions that chose the engine, by reason (retries included). */
  decisions: Partial<Record<Reason, number>>;
}

interface Tally {
  prompt: number;
  cached: number;
  completion: number;
  decisions: Map<Reason, number>;
}

export class RoutingUsage {
  private readonly byWorker = new Map<string, Tally>();

  /** The router sent a request to `workerId`, for `reason`. */
  decided(workerId: string, reason: Reason): void {
    const t = this.tally(workerId);
    t.decisions.set(reason, (t.decisions.get(reason) ?? 0) + 1);
  }

  /**
   * A request to `workerId` ended. Only an answered one counts, with the counts its answer gave:
   * a failed or cut-off attempt tells nothing of what the engine reused.
   */
  finished(workerId: string, outcome: RequestOutcome | undefined): void {
    if (!outcome?.answered) return;
    const { promptTokens, cachedTokens, completionTokens } = outcome;
    if (promptTokens === undefined && cachedTokens === undefined && completionTokens === undefined) return;
    const t = this.tally(workerId);
    t.prompt += promptTokens ?? 0;
    t.cached += cachedTokens ?? 0;
    t.completion += completionTokens ?? 0;
  }

  /** The worker left the registry: a worker registered again under its URL starts from zero. */
  forget(workerId: string): void {
    this.byWorker.delete(workerId);
  }

  /**
   * The figures of one engine, summed over `workerIds` (its DP ranks, each a worker of its own);
   * `queuedTokens` is the policy's count of one worker, undefined when it keeps none.
   */
  figures(workerIds: readonly string[], queuedTokens?: (id: string) => number | undefined): RoutingFigures {
    let prompt = 0;
    let cached = 0;
    let completion = 0;
    let queued: number | null = null;
    const decisions: Partial<Record<Reason, number>> = {};
    for (const id of workerIds) {
      const q = queuedTokens?.(id);
      if (q !== undefined) queued = (queued ?? 0) + q;
      const t = this.byWorker.get(id);
      if (!t) continue;
      prompt += t.prompt;
      cached += t.cached;
      completion += t.completion;
      for (const [reason, n] of t.decisions) decisions[reason] = (decisions[reason] ?? 0) + n;
    }
    return {
      prompt_tokens: prompt,
      cached_tokens: cached,
      completion_tokens: completion,
      prefix_hit_rate: prompt > 0 ? cached / prompt : null,
      queued_tokens: queued,
      decisions,
    };
  }

  private tally(workerId: string): Tally {
    let t = this.byWorker.get(workerId);
    if (!t) this.byWorker.set(workerId, (t = { prompt: 0, cached: 0, completion: 0, decisions: new Map() }));
    return t;
  }
}

/** Where rows and gauges read the routing figures: this replica's usage and its policy's queue. */
export interface RoutingSource {
  figures(workerIds: readonly string[]): RoutingFigures;
  queuedTokens(workerId: string): number | undefined;
}

/** The routing source of a replica, built from its usage record and its policy before the view that reads it. */
export function routingSource(usage: RoutingUsage, policy: Pick<RoutingPolicy, 'queuedTokens'>): RoutingSource {
  const queued = policy.queuedTokens ? (id: string) => policy.queuedTokens!(id) : undefined;
  return {
    figures: (ids) => usage.figures(ids, queued),
    queuedTokens: (id) => queued?.(id),
  };
}
