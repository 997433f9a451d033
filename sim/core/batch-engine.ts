// One DP rank of the realistic cost model, as a pure state machine driven step by step: a FCFS
// waiting queue, the running requests, a KV pool of whole pages and the radix prefix cache. A step
// is formed (`begin`: KV allocated, evicting only when short, retracting on a decode shortage) and
// later completed (`end`: tokens produced, finished requests inserted into the cache and their KV
// freed), its duration following from its batch. It holds no timer and no clock of its own (the
// caller steps it and lends it `now` for the cache's access times) and never touches a wire.

import { stepMs, type CostModel } from './cost-model.ts';
import type { KvFacts } from './pacer.ts';
import { RadixCache, type CacheListener, type RadixNode } from './radix-cache.ts';
import { abortFinish, type AbortFinish, type Sequence } from './sequence.ts';

/** A running request's hold on the pool. */
interface Admitted {
  readonly seq: Sequence;
  /** What this admission prefills: the prompt, and the tokens it had produced before a retraction. */
  readonly key: readonly number[];
  /** Its cached prefix (page-aligned), locked in the tree while it runs; its whole prompt once prefilled. */
  prefixLen: number;
  node: RadixNode;
  /** Tokens whose KV is computed (the prefix counts: it is reused). */
  kvLen: number;
  /** KV slots it holds: the prefix plus its own pages. */
  capacity: number;
}

export interface Step {
  /** Prefill chunks: who, and how many tokens of its key this step computes. */
  readonly prefill: ReadonlyArray<{ readonly admitted: Admitted; readonly tokens: number }>;
  /** Requests that decode one token in this step. */
  readonly decode: readonly Admitted[];
  readonly prefillTokens: number;
  readonly durationMs: number;
}

export interface Begun {
  /** null: nothing to do (no running request, and nothing that may start). */
  step: Step | null;
  /** Requests this engine gave up on (already out of it): the caller ends them. */
  aborted: Array<{ seq: Sequence; finish: AbortFinish }>;
}

export interface Ended {
  /** Requests with a new token that go on. */
  progressed: Sequence[];
  /** Requests that finished in this step (their `finish` is set; already out of the engine). */
  finished: Sequence[];
}

export interface BatchEngineOptions {
  model: CostModel;
  maxRunningRequests: number;
  /** Milliseconds, for the cache's access times. */
  now: () => number;
  listener?: CacheListener;
}

export interface CacheStats {
  tokens: number;
  evictableTokens: number;
  /** Requests looked up in the cache (each once, at its first admission). */
  requests: number;
  promptTokens: number;
  hitTokens: number;
  evictions: number;
  evictedTokens: number;
  flushes: number;
  /** Prompt tokens prefilled (cache hits excluded, retracted work counted again). */
  prefilledTokens: number;
  /** Tokens decoded. Prefilled + decoded is the work the engine did, which a benchmark compares across engines. */
  decodedTokens: number;
}

export interface KvStats {
  /** Every allocated token: running requests' own pages and the whole cache. */
  usedTokens: number;
  totalTokens: number;
  /** Held by running requests: their own pages and the cache nodes they lock. */
  heldTokens: number;
  pageSize: number;
  running: number;
  waiting: number;
  retractions: number;
}

export class BatchEngine {
  readonly cache: RadixCache;
  private readonly queue: Sequence[] = [];
  /** In admission order (a Map keeps it): the order chunks continue in. */
  private readonly admitted = new Map<Sequence, Admitted>();
  /** Tokens of running requests' own pages. */
  private ownTokens = 0;
  /** What `cacheStats()` and `kvStats()` report, counted as it happens. */
  private readonly count = { requests: 0, promptTokens: 0, hitTokens: 0, flushes: 0, retractions: 0, prefilledTokens: 0, decodedTokens: 0 };

  constructor(private readonly opts: BatchEngineOptions) {
    this.cache = new RadixCache(opts.model.pageSize, opts.now, opts.listener);
  }

  get totalTokens(): number {
    return this.opts.model.kvCacheTokens;
  }

  get freeTokens(): number {
    return this.totalTokens - this.cache.tokens - this.ownTokens;
  }

  get waitingCount(): number {
    return this.queue.length;
  }

  get runningCount(): number {
    return this.admitted.size;
  }

  waiting(): Sequence[] {
    return [...this.queue];
  }

  running(): Sequence[] {
    return [...this.admitted.keys()];
  }

  /** Queues `seq` (state `waiting`), at the back or, for a retracted one, at the front. */
  enqueue(seq: Sequence, front = false): void {
    seq.state = 'waiting';
    if (front) this.queue.unshift(seq);
    else this.queue.push(seq);
  }

  /** Takes `seq` out wherever it is; a running one's pages are freed and its lock released (nothing inserted). */
  remove(seq: Sequence): boolean {
    const a = this.admitted.get(seq);
    if (a) {
      this.release(a);
      return true;
    }
    const i = this.queue.indexOf(seq);
    if (i < 0) return false;
    this.queue.splice(i, 1);
    return true;
  }

  /** Every running request out, its KV freed and its tokens kept, for the caller to requeue. */
  retractAll(): Sequence[] {
    const out = [...this.admitted.values()];
    for (const a of out) this.release(a);
    return out.map((a) => a.seq);
  }

  /** Empties the cache. Only when nothing runs: running requests hold cache nodes. */
  flush(): void {
    if (this.admitted.size > 0) throw new Error('batch engine: flush while requests run');
    this.cache.reset();
    this.count.flushes++;
  }

  /**
   * Forms the next step: a decode token for every prefilled request (a new page when its last is
   * full; with no page to be had, the request with the fewest output tokens is retracted), then
   * prefill chunks within the chunked-prefill budget: first the request whose prefill is under
   * way, then, when `admits`, waiting ones in order while they fit (a request that does not fit
   * waits, and so do all behind it).
   */
  begin(admits: boolean): Begun {
    const aborted: Begun['aborted'] = [];
    const page = this.opts.model.pageSize;
    for (const a of [...this.admitted.values()]) {
      if (this.admitted.get(a.seq) !== a || a.kvLen < a.key.length) continue;
      while (this.admitted.get(a.seq) === a && a.capacity < a.kvLen + 1) {
        if (this.reserve(page)) {
          a.capacity += page;
          this.ownTokens += page;
          break;
        }
        const victim = this.retractionVictim();
        if (victim === a && this.admitted.size === 1) {
          // Alone and still short: nothing can make room for it (SGLang fails the same way).
          this.release(a);
          aborted.push({ seq: a.seq, finish: abortFinish('No space left for only one request') });
          break;
        }
        this.retract(victim);
      }
    }
    const decode = [...this.admitted.values()].filter((a) => a.kvLen >= a.key.length);

    let budget = this.opts.model.chunkedPrefillSize;
    const prefill: Array<{ admitted: Admitted; tokens: number }> = [];
    for (const a of this.admitted.values()) {
      if (a.kvLen >= a.key.length || budget <= 0) continue;
      const tokens = Math.min(a.key.length - a.kvLen, budget);
      prefill.push({ admitted: a, tokens });
      budget -= tokens;
    }
    while (admits && budget > 0 && this.queue.length > 0 && this.admitted.size < this.opts.maxRunningRequests) {
      const seq = this.queue[0];
      const key = seq.outputIds.length > 0 ? [...seq.params.promptIds, ...seq.outputIds] : seq.params.promptIds;
      const pages = Math.ceil((key.length + 1) / page) * page;
      if (pages > this.totalTokens) {
        this.queue.shift();
        aborted.push({
          seq,
          finish: abortFinish(`Input length (${key.length} tokens) exceeds the maximum allowed length (${this.totalTokens - 1} tokens).`, 400),
        });
        continue;
      }
      // At least one token is computed, whatever the cache holds: the last one yields the logits.
      const match = this.cache.match(key.slice(0, Math.max(0, key.length - 1)));
      const own = pages - match.length;
      this.cache.lock(match.node);
      if (!this.reserve(own)) {
        this.cache.unlock(match.node);
        break;
      }
      this.queue.shift();
      const a: Admitted = { seq, key, prefixLen: match.length, node: match.node, kvLen: match.length, capacity: pages };
      this.admitted.set(seq, a);
      this.ownTokens += own;
      seq.state = 'running';
      if (seq.outputIds.length === 0 && seq.retractions === 0) {
        seq.cachedTokens = match.length;
        this.count.requests++;
        this.count.promptTokens += key.length;
        this.count.hitTokens += match.length;
      }
      const tokens = Math.min(key.length - a.kvLen, budget);
      prefill.push({ admitted: a, tokens });
      budget -= tokens;
    }
    if (prefill.length === 0 && decode.length === 0) return { step: null, aborted };
    const prefillTokens = prefill.reduce((n, c) => n + c.tokens, 0);
    return { step: { prefill, decode, prefillTokens, durationMs: stepMs(this.opts.model, prefillTokens, decode.length) }, aborted };
  }

  /**
   * Completes `step`: each chunk's KV is computed (a finished prefill yields the first token),
   * each decoding request gets its token; a request that is done is inserted into the cache
   * (prompt and output, whole pages) and frees its KV. Requests that left since `begin` (aborted,
   * retracted) are skipped.
   */
  end(step: Step): Ended {
    const progressed: Sequence[] = [];
    const finished: Sequence[] = [];
    const produce = (a: Admitted): void => {
      if (!a.seq.done) a.seq.step();
      if (a.seq.done) {
        this.finish(a);
        finished.push(a.seq);
      } else {
        progressed.push(a.seq);
      }
    };
    for (const { admitted: a, tokens } of step.prefill) {
      if (this.admitted.get(a.seq) !== a) continue;
      this.count.prefilledTokens += tokens;
      a.kvLen += tokens;
      if (a.kvLen >= a.key.length) {
        this.cacheUnfinished(a);
        produce(a);
      }
    }
    for (const a of step.decode) {
      if (this.admitted.get(a.seq) !== a) continue;
      this.count.decodedTokens++;
      a.kvLen++;
      produce(a);
    }
    return { progressed, finished };
  }

  cacheStats(): CacheStats {
    const c = this.cache.counters();
    return {
      tokens: c.tokens,
      evictableTokens: c.evictableTokens,
      requests: this.count.requests,
      promptTokens: this.count.promptTokens,
      hitTokens: this.count.hitTokens,
      evictions: c.evictions,
      evictedTokens: c.evictedTokens,
      flushes: this.count.flushes,
      prefilledTokens: this.count.prefilledTokens,
      decodedTokens: this.count.decodedTokens,
    };
  }

  kvStats(): KvStats {
    return {
      usedTokens: this.cache.tokens + this.ownTokens,
      totalTokens: this.totalTokens,
      heldTokens: this.cache.tokens - this.cache.evictableTokens + this.ownTokens,
      pageSize: this.opts.model.pageSize,
      running: this.admitted.size,
      waiting: this.queue.length,
      retractions: this.count.retractions,
    };
  }

  kvFacts(): KvFacts {
    const k = this.kvStats();
    return {
      usedTokens: k.heldTokens,
      totalTokens: k.totalTokens,
      pageSize: k.pageSize,
      cacheHitRate: this.count.promptTokens > 0 ? this.count.hitTokens / this.count.promptTokens : 0,
    };
  }

  /** Makes `tokens` free, evicting unlocked cache leaves for the shortfall only; false if it cannot. */
  private reserve(tokens: number): boolean {
    const short = tokens - this.freeTokens;
    if (short <= 0) return true;
    // Nothing is evicted for a request that would not fit even so.
    if (short > this.cache.evictableTokens) return false;
    this.cache.evict(short);
    return this.freeTokens >= tokens;
  }

  /** SGLang's pick: the request with the fewest output tokens, then the longest prompt. */
  private retractionVictim(): Admitted {
    let victim: Admitted | null = null;
    for (const a of this.admitted.values()) {
      if (
        victim === null ||
        a.seq.outputIds.length < victim.seq.outputIds.length ||
        (a.seq.outputIds.length === victim.seq.outputIds.length && a.seq.params.promptIds.length >= victim.seq.params.promptIds.length)
      ) {
        victim = a;
      }
    }
    return victim!;
  }

  /** Back to the front of the queue with its tokens; its KV is dropped and recomputed later. */
  private retract(a: Admitted): void {
    this.release(a);
    a.seq.retractions++;
    this.count.retractions++;
    this.enqueue(a.seq, true);
  }

  private release(a: Admitted): void {
    this.admitted.delete(a.seq);
    this.ownTokens -= a.capacity - a.prefixLen;
    this.cache.unlock(a.node);
  }

  /**
   * SGLang's cache_unfinished_req, once a prompt is prefilled: its whole pages go into the tree,
   * locked by the request, so a request admitted after it (a GRPO sibling, the next turn) reuses
   * them while it still runs. Pages another request put there first are the tree's; this request's
   * copies are freed, as SGLang frees duplicate KV.
   */
  private cacheUnfinished(a: Admitted): void {
    const page = this.opts.model.pageSize;
    const aligned = a.key.length - (a.key.length % page);
    if (aligned <= a.prefixLen) return;
    const prompt = a.key.slice(0, aligned);
    this.cache.insert(prompt);
    const held = this.cache.match(prompt);
    this.cache.lock(held.node);
    this.cache.unlock(a.node);
    this.ownTokens -= held.length - a.prefixLen;
    a.prefixLen = held.length;
    a.node = held.node;
  }

  /** SGLang's cache_finished_req: what has KV goes into the tree, whole pages; the rest is freed. */
  private finish(a: Admitted): void {
    const all = a.seq.outputIds.length > 0 ? [...a.seq.params.promptIds, ...a.seq.outputIds] : a.seq.params.promptIds;
    this.cache.insert(all.slice(0, a.kvLen));
    this.release(a);
  }
}
