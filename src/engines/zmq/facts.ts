// Discovery facts of a ZMQ worker, synthesized from its handshake (SMG's discovery keys): the wire carries no server info, so the parallelism and context
// length come from the engine's ready response and the model name from the worker's registration.
// Never any `rl.*` key or weight version: this wire has neither (rl.control_url is a caller label).

import type { EngineFacts } from '../engine-client.ts';
import type { EngineReady } from './handshake.ts';

/** Only set what the engine actually reported (a missing field never becomes a 0 label). */
function put(out: Record<string, unknown>, key: string, v: number | string | null | undefined): void {
  if (v === null || v === undefined || v === '') return;
  out[key] = v;
}

/**
 * `serverInfo` uses the canonical label keys (`tp_size`, `dp_size`, `pp_size`, `context_length`,
 * `max_running_requests`, `max_total_tokens`, `model`, `served_model_name`, `version`), plus the
 * remaining handshake facts under a `zmq` object, which discovery does not turn into labels.
 * `modelInfo` mirrors SMG's synthesized TokenSpeed `GetModelInfoResponse`.
 */
export function factsFromHandshake(ready: EngineReady, rank: number, modelId: string | null): EngineFacts {
  const serverInfo: Record<string, unknown> = {};
  put(serverInfo, 'model', modelId);
  put(serverInfo, 'served_model_name', modelId);
  put(serverInfo, 'tokenizer', modelId);
  put(serverInfo, 'tp_size', ready.tensorParallelSize);
  put(serverInfo, 'pp_size', ready.pipelineParallelSize);
  put(serverInfo, 'dp_size', ready.dataParallelSize);
  put(serverInfo, 'context_length', ready.maxModelLen);
  if (ready.maxNumSeqs !== null && ready.maxNumSeqs > 0) serverInfo.max_running_requests = ready.maxNumSeqs;
  put(serverInfo, 'max_total_tokens', ready.kvCacheSizeTokens);
  put(serverInfo, 'version', ready.engineVersion);
  serverInfo.zmq = {
    engine_index: rank,
    data_parallel_rank: ready.dataParallelRank,
    world_size: ready.worldSize,
    dtype: ready.dtype,
    block_size: ready.blockSize,
    num_gpu_blocks: ready.numGpuBlocks,
    max_num_batched_tokens: ready.maxNumBatchedTokens,
    instance_id: ready.instanceId,
  };
  const modelInfo: Record<string, unknown> = { is_generation: true };
  put(modelInfo, 'model_path', modelId);
  put(modelInfo, 'served_model_name', modelId);
  put(modelInfo, 'tokenizer_path', modelId);
  put(modelInfo, 'max_context_length', ready.maxModelLen);
  return { serverInfo, modelInfo };
}
