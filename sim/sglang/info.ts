// Read-only discovery routes: /server_info (flat ServerArgs + scheduler info + internal_states +
// version), /model_info, /v1/loads and /get_load, /v1/models. It only reads engine state; the
// constant part of each answer is built once.

import { loadsAnswer } from '../core/loads.ts';
import { sendJson, type Call } from '../core/reply.ts';
import { VOCAB_SIZE } from '../core/tokens.ts';
import type { SimEngine } from './engine.ts';

/** max_total_num_tokens under the fixed cost model, which has no KV pool. */
const NOMINAL_TOTAL_TOKENS = 1_000_000;

/** KV tokens per DP rank: the realistic model's pool, else the nominal figure. */
function totalTokens(engine: SimEngine): number {
  const c = engine.opts.cost;
  return c.kind === 'realistic' ? c.kvCacheTokens : NOMINAL_TOTAL_TOKENS;
}

/** The ServerArgs fields that never change while the simulator runs. The api key is left out. */
function staticServerArgs(engine: SimEngine, port: number): Record<string, unknown> {
  const o = engine.opts;
  return {
    model_path: o.model,
    tokenizer_path: o.model,
    tokenizer_mode: 'auto',
    skip_tokenizer_init: false,
    load_format: 'auto',
    trust_remote_code: false,
    dtype: 'auto',
    kv_cache_dtype: 'auto',
    context_length: o.contextLength,
    served_model_name: o.servedModelName,
    is_embedding: false,
    host: o.host,
    port,
    mem_fraction_static: 0.8,
    max_running_requests: o.maxRunningRequests,
    max_total_tokens: totalTokens(engine),
    chunked_prefill_size: o.cost.chunkedPrefillSize,
    page_size: o.cost.kind === 'realistic' ? o.cost.pageSize : 1,
    schedule_policy: 'fcfs',
    stream_interval: 1,
    stream_output: false,
    random_seed: o.cost.randomSeed,
    tp_size: o.tpSize,
    dp_size: o.dpSize,
    pp_size: o.ppSize,
    ep_size: 1,
    enable_dp_attention: false,
    api_key: null,
    enable_memory_saver: o.enableMemorySaver,
    disaggregation_mode: 'null',
    disaggregation_bootstrap_port: 8998,
    encoder_only: false,
    enable_metrics: false,
    kv_events_config: null,
    max_total_num_tokens: totalTokens(engine),
    max_req_input_len: o.contextLength - 1,
    vocab_size: VOCAB_SIZE,
  };
}

export class InfoRoutes {
  private base: Record<string, unknown> | null = null;

  constructor(private readonly engine: SimEngine) {}

  /** Called once the port is known. */
  setPort(port: number): void {
    this.base = staticServerArgs(this.engine, port);
  }

  serverInfo = (_engine: SimEngine, call: Call): void => {
    const e = this.engine;
    const ranks = e.scheduler.countsByRank();
    sendJson(call.res, 200, {
      ...this.base,
      model_path: e.weights.modelPath,
      weight_version: e.weightVersion,
      internal_states: ranks.map((r, dp_rank) => ({
        dp_rank,
        last_gen_throughput: 0,
        num_running_reqs: r.running,
        num_waiting_reqs: r.waiting,
        memory_usage: { weight: 1.0, kvcache: 0.5, token_capacity: totalTokens(e) },
      })),
      version: e.opts.version,
    });
  };

  modelInfo = (_engine: SimEngine, call: Call): void => {
    const e = this.engine;
    sendJson(call.res, 200, {
      model_path: e.weights.modelPath,
      tokenizer_path: e.opts.model,
      is_generation: true,
      preferred_sampling_params: null,
      weight_version: e.weightVersion,
      has_image_understanding: false,
      has_audio_understanding: false,
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
    });
  };

  /** `/v1/loads`: one entry per DP rank plus an aggregate (slime counts only `loads`). */
  loads = (_engine: SimEngine, call: Call): void => {
    const e = this.engine;
    const ranks = e.scheduler.countsByRank();
    // Under the fixed model there is no pool: no tokens used, no cache hits.
    const kv = e.scheduler.kvByRank();
    const total = totalTokens(e);
    const loads = ranks.map((r, dp_rank) => ({
      dp_rank,
      num_running_reqs: r.running,
      num_waiting_reqs: r.waiting,
      num_total_reqs: r.running + r.waiting,
      num_used_tokens: kv ? kv[dp_rank].usedTokens : 0,
      max_total_num_tokens: total,
      token_usage: kv ? kv[dp_rank].usedTokens / total : 0,
      gen_throughput: 0,
      cache_hit_rate: kv ? kv[dp_rank].cacheHitRate : 0,
      utilization: r.running / e.opts.maxRunningRequests,
      max_running_requests: e.opts.maxRunningRequests,
    }));
    sendJson(call.res, 200, loadsAnswer(loads, e.opts.version, e.opts.maxRunningRequests));
  };

  /** Deprecated `/get_load`: the older per-rank list. */
  getLoad = (_engine: SimEngine, call: Call): void => {
    const ranks = this.engine.scheduler.countsByRank();
    const kv = this.engine.scheduler.kvByRank();
    sendJson(
      call.res,
      200,
      ranks.map((r, dp_rank) => ({
        dp_rank,
        num_reqs: r.running + r.waiting,
        num_waiting_reqs: r.waiting,
        num_tokens: kv ? kv[dp_rank].usedTokens : 0,
      })),
    );
  };

  models = (_engine: SimEngine, call: Call): void => {
    const o = this.engine.opts;
    sendJson(call.res, 200, {
      object: 'list',
      data: [
        {
          id: o.servedModelName,
          object: 'model',
          created: Math.floor(this.engine.startedAt / 1000),
          owned_by: 'sglang',
          root: o.servedModelName,
          max_model_len: o.contextLength,
        },
      ],
    });
  };
}
