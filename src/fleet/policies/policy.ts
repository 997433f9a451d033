// What every routing policy is: one pick among the eligible candidates, from the request's routing
// inputs and the candidates' live loads, plus the hooks that keep a policy's own state (trees,
// sticky maps, in-flight counts) in step with what happened. Types only. A policy never sees the
// version pre-filter or eligibility (the router has applied both), never reads a header and never
// reads a clock or a random number except through the sources it was built with, so a pick is a
// deterministic function of the fleet view and the policy's own state.

/** What a policy needs of an engine: `Worker` satisfies it, and tests build it bare. */
export interface Candidate {
  readonly id: string;
  readonly url: string;
}

/**
 * What an engine reports about its own queue, when it does (no wire reports it yet). Absent
 * fields are unknown, not zero.
 */
export interface LoadReport {
  /** Token work waiting in the engine's queue (SGLang's waiting uncached tokens). */
  queuedTokens?: number;
  /** KV-cache use, 0..1. */
  kvUsage?: number;
  /** Generation throughput, tokens a second. */
  throughput?: number;
}

/** What the data-plane caller knows of one request that routing may use. */
export interface RoutingInputs {
  /** The prompt as text (SGLang's `text`, the OpenAI routes' messages or prompt). */
  text?: string;
  /** Output tokens the request will produce, when it says exactly (`ignore_eos` with `max_new_tokens`). */
  expectedOutputTokens?: number;
  /** The most output tokens it may produce (`max_new_tokens`, `max_tokens`), when it names a bound. */
  maxOutputTokens?: number;
  /** The prompt as token ids (`input_ids`, or an OpenAI prompt of ids). */
  tokens?: readonly number[];
  /** `X-SMG-Routing-Key`. */
  routingKey?: string;
  /** `X-SMG-Target-Worker`: a worker's index among the candidates, its id or its URL. */
  targetWorker?: string;
  /** A stable header of the caller (authorization, x-forwarded-for, cookie): consistent_hashing's key without a routing key. */
  implicitKey?: string;
}

export interface PolicyRequest<W extends Candidate> extends RoutingInputs {
  /** The eligible engines, in registry order; never empty. */
  candidates: readonly W[];
  /** The model they serve, when the request resolved one. */
  modelId?: string;
  /** Data-plane requests this replica has in flight to an engine. */
  inFlight(id: string): number;
  /** The engine's own report, when one is known. */
  report?(id: string): LoadReport | undefined;
}

/**
 * Why a worker was picked: the label of `rlgate_routing_decisions_total`. A bounded set, so the
 * series stay bounded too.
 */
export type Reason =
  /** The engine most likely to hold the prompt's prefix (approximate tree above the threshold, or KV-event overlap). */
  | 'cache_hit'
  /** The least loaded candidate. */
  | 'min_load'
  /** cache_aware with the loads apart by both thresholds: the least loaded, cache ignored. */
  | 'imbalance'
  /** The routing key's engine (hash, ring, or a sticky key's known engine). */
  | 'routing_key'
  /** A sticky key seen for the first time, or whose engines are all gone: newly assigned. */
  | 'new_key'
  /** `X-SMG-Target-Worker`. */
  | 'target_worker'
  /** consistent_hashing on a stable caller header. */
  | 'implicit_key'
  /** prefix_hash: the prefix's engine on the ring. */
  | 'prefix_hash'
  /** prefix_hash: the prefix's engine was over the load bound, another took it. */
  | 'overload'
  | 'round_robin'
  | 'random'
  /** The less loaded of two random candidates. */
  | 'power_of_two'
  /** manual's min_group assignment: the engine with the fewest active routing keys. */
  | 'min_group'
  /** passthrough: the first candidate. */
  | 'first_available';

/** How a routed request ended, as far as the gateway saw its answer. */
export interface RequestOutcome {
  /** The engine answered it (2xx, to the end); false for a failure, a refusal, or one cut off. */
  answered: boolean;
  /** `meta_info` / `usage` counts of the answer, when the relay read them. */
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
}

export interface Decision<W extends Candidate> {
  worker: W;
  reason: Reason;
}

export interface RoutingPolicy {
  /** SMG's name of the policy (or rlgate's, for its own). */
  readonly name: string;
  /** Whether picks read the prompt: the caller extracts it only then. */
  readonly needsPrompt: boolean;
  /** One candidate for the request; undefined only when none fits (a target worker that is not a candidate). */
  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> | undefined;
  /** The request was sent to `workerId`, right after the pick that chose it. */
  routed?(workerId: string, inputs: RoutingInputs): void;
  /** That request ended (answered, failed or cut off), with what its answer said when it was read. */
  finished?(workerId: string, inputs: RoutingInputs, outcome?: RequestOutcome): void;
  /** The worker left the registry. */
  workerRemoved?(workerId: string): void;
  /** The engine's prefix cache is empty (a weight update, a restart): what was routed to it is gone. */
  cacheFlushed?(workerId: string): void;
  /**
   * The work the policy counts as queued on the engine (routed, not yet finished), in tokens; only
   * a policy that keeps such a count has it, so "unknown" is never shown as zero.
   */
  queuedTokens?(workerId: string): number;
}

/** Where a policy reads time: milliseconds, only ever compared (Date.now in the gateway, stepped in tests). */
export type Clock = () => number;

/** Where a policy draws its random numbers: uniform in [0, 1) (Math.random in the gateway, seeded in tests). */
export type RandomSource = () => number;
