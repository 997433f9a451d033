// What an engine's self-description becomes as worker labels, per wire: SGLang's flat
// server info and model info (with `model_path`, as SMG keeps it); TokenSpeed gRPC's GetModelInfo
// flattened whole plus the chosen `server_args` keys, every `rl.*` advertisement and whether it
// returns logprobs; ZMQ facts synthesized from the handshake.
// Pure; the engine host calls it after each discovery.

import type { EngineFacts } from '../engines/engine-client.ts';
import { flattenModelInfo, labelsFromServerInfo, modelPathLabel } from './labels.ts';
import type { ConnectionMode } from '../wire/worker-entry.ts';

export function labelsFromFacts(mode: ConnectionMode, facts: EngineFacts): Record<string, string> {
  if (mode === 'http') {
    const out = labelsFromServerInfo(facts.serverInfo, facts.modelInfo);
    const modelPath = modelPathLabel(facts.serverInfo, facts.modelInfo);
    if (modelPath !== undefined) out.model_path = modelPath;
    // SGLang launched without --context-length reports it as null; its longest prompt
    // (`max_req_input_len`, the context length less one) still says it (fleet/context-length.ts).
    const longest = facts.serverInfo.max_req_input_len;
    if (out.context_length === undefined && Number.isSafeInteger(longest) && (longest as number) > 0) out.context_length = String((longest as number) + 1);
    return out;
  }
  if (mode !== 'grpc') return labelsFromServerInfo(facts.serverInfo, facts.modelInfo);
  const out = facts.modelInfo ? flattenModelInfo(facts.modelInfo) : {};
  Object.assign(out, labelsFromServerInfo(facts.serverInfo, null));
  // `scheduler_info.shm_namespace_id` is a label too (the gRPC client hands it over with
  // the server args); it is not one of the server_args keys, so the pick above drops it.
  const shm = facts.serverInfo.shm_namespace_id;
  if (typeof shm === 'string' && shm.length > 0) out.shm_namespace_id = shm;
  // Whether Generate carries logprobs (`--enable-output-logprobs`): `return_logprob` requests
  // skip an engine that says it does not (capabilities.ts), instead of failing on it.
  const logprobs = facts.serverInfo.enable_output_logprobs;
  if (typeof logprobs === 'boolean') out.enable_output_logprobs = String(logprobs);
  // GetModelInfo carries the live version (server_args may hold the launch value).
  const live = facts.modelInfo?.weight_version;
  if (typeof live === 'string' && live.trim() !== '') out.weight_version = live;
  return out;
}
