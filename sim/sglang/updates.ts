// The non-collective weight routes: update_weights_from_disk, _from_tensor, _from_ipc, and
// update_weight_version (which relabels only and, by SGLang's default, aborts in-flight requests).
// Every load goes through weights.ts#runLoad so the version changes only on success; this file
// never touches the broadcast group.

import { sendJson, type Call } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { jsonObject, sendInvalid } from './reply.ts';
import { runLoad } from './load.ts';

function versionOf(call: Call, v: unknown): string | null | false {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') return v;
  sendInvalid(call.res, 'weight_version must be a string or null', true);
  return false;
}

export async function updateWeightsFromDisk(engine: SimEngine, call: Call): Promise<void> {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  if (b.model_path === undefined) return sendInvalid(call.res, 'Field required: model_path', true);
  if (typeof b.model_path !== 'string') return sendInvalid(call.res, 'model_path must be a string', true);
  const weightVersion = versionOf(call, b.weight_version);
  if (weightVersion === false) return;
  const modelPath = b.model_path;
  const outcome = await runLoad(engine, {
    source: 'disk',
    flushCache: b.flush_cache,
    abortAll: b.abort_all_requests,
    weightVersion,
    claimSuccess: call.claimSuccess,
    successMessage: 'Succeeded to update model weights.',
    detail: { modelPath, loadFormat: b.load_format ?? null },
    load: async () => {
      // A disk load replaces every weight: checksums of earlier broadcasts no longer hold.
      engine.weights.modelPath = modelPath;
      engine.weights.tensors.clear();
    },
  });
  sendJson(call.res, outcome.ok ? 200 : 400, { success: outcome.ok, message: outcome.message, num_paused_requests: 0 });
}

export async function updateWeightsFromTensor(engine: SimEngine, call: Call): Promise<void> {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  if (b.serialized_named_tensors === undefined) return sendInvalid(call.res, 'Field required: serialized_named_tensors', true);
  if (!Array.isArray(b.serialized_named_tensors)) return sendInvalid(call.res, 'serialized_named_tensors must be a list', true);
  const weightVersion = versionOf(call, b.weight_version);
  if (weightVersion === false) return;
  const outcome = await runLoad(engine, {
    source: 'tensor',
    flushCache: b.flush_cache,
    abortAll: b.abort_all_requests,
    weightVersion,
    claimSuccess: call.claimSuccess,
    successMessage: 'Succeeded to update model weights.',
    detail: { payloads: b.serialized_named_tensors.length, loadFormat: b.load_format ?? null },
    load: async () => undefined,
  });
  sendJson(call.res, outcome.ok ? 200 : 400, { success: outcome.ok, message: outcome.message });
}

export async function updateWeightsFromIpc(engine: SimEngine, call: Call): Promise<void> {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  if (b.zmq_handles === undefined) return sendInvalid(call.res, 'Field required: zmq_handles', true);
  if (typeof b.zmq_handles !== 'object' || b.zmq_handles === null || Array.isArray(b.zmq_handles)) {
    return sendInvalid(call.res, 'zmq_handles must be an object', true);
  }
  const weightVersion = versionOf(call, b.weight_version);
  if (weightVersion === false) return;
  const outcome = await runLoad(engine, {
    source: 'ipc',
    flushCache: b.flush_cache,
    abortAll: undefined,
    weightVersion,
    claimSuccess: call.claimSuccess,
    successMessage: 'Succeeded to update model weights.',
    detail: { handles: Object.keys(b.zmq_handles).length },
    load: async () => undefined,
  });
  sendJson(call.res, outcome.ok ? 200 : 400, { success: outcome.ok, message: outcome.message });
}

/** Relabel only: `abort_all_requests` defaults to true, as in SGLang. */
export function updateWeightVersion(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  if (b.new_version === undefined) return sendInvalid(call.res, 'Field required: new_version', true);
  if (typeof b.new_version !== 'string') return sendInvalid(call.res, 'new_version must be a string', true);
  if (b.abort_all_requests !== undefined && typeof b.abort_all_requests !== 'boolean') {
    return sendInvalid(call.res, 'abort_all_requests must be a boolean', true);
  }
  if (!call.claimSuccess) {
    if (b.abort_all_requests !== false) engine.scheduler.abort('', true);
    engine.weightVersion = b.new_version;
  }
  sendJson(call.res, 200, { success: true, message: `Weight version updated to ${b.new_version}`, new_version: b.new_version });
}
