// The NCCL weight-update group routes: init_weights_update_group, update_weights_from_distributed,
// destroy_weights_update_group, with NCCL's group lifetime rules (duplicate name, unknown group and
// mismatched lists are success:false/400). Bytes move through the injected JoinGroup transport;
// without one the routes validate and record metadata only. It never opens sockets itself.

import { decodeValues } from '../broadcast/dtype.ts';
import { joinParamsOf, rendezvousOf } from '../broadcast/types.ts';
import { isInt, isStringList, sendJson, type Call } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { jsonObject, sendInvalid } from './reply.ts';
import { runLoad } from './load.ts';
import { knownDtype, tensorBytes, type GroupEntry } from './weights.ts';

const DEFAULT_GROUP = 'weight_update_group';

function fail(call: Call, message: string): void {
  sendJson(call.res, 400, { success: false, message });
}

function groupName(v: unknown): string | null {
  if (v === undefined || v === null) return DEFAULT_GROUP;
  return typeof v === 'string' ? v : null;
}

export async function initWeightsUpdateGroup(engine: SimEngine, call: Call): Promise<void> {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  const missing = ['master_address', 'master_port', 'rank_offset', 'world_size'].filter((k) => b[k] === undefined);
  if (missing.length > 0) return sendInvalid(call.res, `Field required: ${missing.join(', ')}`, true);
  if (typeof b.master_address !== 'string' || b.master_address === '') return sendInvalid(call.res, 'master_address must be a string', true);
  if (!isInt(b.master_port) || b.master_port < 1 || b.master_port > 65535) return sendInvalid(call.res, 'master_port must be a port number', true);
  if (!isInt(b.rank_offset) || b.rank_offset < 0) return sendInvalid(call.res, 'rank_offset must be a non-negative integer', true);
  if (!isInt(b.world_size) || b.world_size < 1) return sendInvalid(call.res, 'world_size must be a positive integer', true);
  const name = groupName(b.group_name);
  if (name === null) return sendInvalid(call.res, 'group_name must be a string', true);
  const backend = b.backend === undefined || b.backend === null ? 'nccl' : b.backend;
  if (typeof backend !== 'string') return sendInvalid(call.res, 'backend must be a string', true);

  const gpus = engine.opts.tpSize * engine.opts.ppSize;
  const ranks = Array.from({ length: gpus }, (_, i) => (b.rank_offset as number) + i);
  const store = engine.weights;
  if (store.groups.has(name)) return fail(call, `Failed to initialize custom process group: group "${name}" already exists.`);
  if (ranks[ranks.length - 1] >= (b.world_size as number)) {
    return fail(call, `Failed to initialize custom process group: ranks ${ranks[0]}..${ranks[ranks.length - 1]} do not fit world_size ${b.world_size}.`);
  }
  const entry: GroupEntry = {
    name,
    state: 'joining',
    ...rendezvousOf(b),
    backend,
    ranks,
    member: null,
    chunks: 0,
  };
  store.groups.set(name, entry);
  const join = engine.opts.joinGroup;
  if (join && !call.claimSuccess) {
    const params = joinParamsOf(entry, name, gpus, engine.opts.groupTimeoutMs);
    try {
      const member = await join(params);
      if (store.groups.get(name) !== entry) {
        member.close();
        return fail(call, `Failed to initialize custom process group: group "${name}" was destroyed while joining.`);
      }
      entry.member = member;
    } catch (e) {
      if (store.groups.get(name) === entry) store.groups.delete(name);
      return fail(call, `Failed to initialize custom process group: ${(e as Error).message}.`);
    }
  }
  entry.state = 'ready';
  sendJson(call.res, 200, { success: true, message: 'Succeeded to initialize custom process group.' });
}

export async function updateWeightsFromDistributed(engine: SimEngine, call: Call): Promise<void> {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  const missing = ['names', 'dtypes', 'shapes'].filter((k) => b[k] === undefined);
  if (missing.length > 0) return sendInvalid(call.res, `Field required: ${missing.join(', ')}`, true);
  if (!isStringList(b.names)) return sendInvalid(call.res, 'names must be a list of strings', true);
  if (!isStringList(b.dtypes)) return sendInvalid(call.res, 'dtypes must be a list of strings', true);
  const shapes = b.shapes;
  if (!Array.isArray(shapes) || !shapes.every((s) => Array.isArray(s) && s.every((d) => isInt(d) && d >= 0))) {
    return sendInvalid(call.res, 'shapes must be a list of lists of non-negative integers', true);
  }
  const version = b.weight_version;
  if (version !== undefined && version !== null && typeof version !== 'string') {
    return sendInvalid(call.res, 'weight_version must be a string or null', true);
  }
  const name = groupName(b.group_name);
  if (name === null) return sendInvalid(call.res, 'group_name must be a string', true);
  const names = b.names;
  const dtypes = b.dtypes;
  if (names.length !== dtypes.length || names.length !== shapes.length) {
    return fail(
      call,
      `Failed to update parameter online: names (${names.length}), dtypes (${dtypes.length}) and shapes (${shapes.length}) must have the same length.`,
    );
  }
  const badDtype = dtypes.find((d) => !knownDtype(d));
  if (badDtype !== undefined) return fail(call, `Failed to update parameter online: unsupported dtype "${badDtype}".`);
  const entry = engine.weights.groups.get(name);
  if (!entry || entry.state !== 'ready') {
    return fail(call, `Failed to update parameter online: group "${name}" is not initialized.`);
  }
  const specs = names.map((n, i) => ({ name: n, dtype: dtypes[i], shape: shapes[i] as number[] }));
  const weightVersion = typeof version === 'string' ? version : null;
  const outcome = await runLoad(engine, {
    source: 'distributed',
    flushCache: b.flush_cache,
    abortAll: b.abort_all_requests,
    weightVersion,
    claimSuccess: call.claimSuccess,
    successMessage: 'Succeeded to update parameter online.',
    detail: { group: name, tensors: names.length, loadFormat: b.load_format ?? null },
    load: async () => {
      const at = new Date().toISOString();
      const received = entry.member ? await receive(entry, specs, engine.opts.groupTimeoutMs) : null;
      entry.chunks++;
      for (const s of specs) {
        const got = received?.get(s.name);
        engine.weights.tensors.set(s.name, {
          name: s.name,
          dtype: s.dtype,
          shape: s.shape,
          bytes: got?.bytes ?? tensorBytes(s.dtype, s.shape),
          checksum: got?.checksum ?? null,
          head: got?.head ?? null,
          group: name,
          weightVersion,
          at,
        });
      }
    },
  });
  sendJson(call.res, outcome.ok ? 200 : 400, { success: outcome.ok, message: outcome.message });
}

async function receive(
  entry: GroupEntry,
  specs: Array<{ name: string; dtype: string; shape: number[] }>,
  timeoutMs: number,
): Promise<Map<string, { bytes: number; checksum: string; head?: string }>> {
  try {
    const loaded = await entry.member!.receive(specs, timeoutMs);
    return new Map(loaded.map((t) => [t.name, { bytes: t.bytes, checksum: t.checksum, head: t.head }]));
  } catch (e) {
    throw new Error(
      `Failed to update parameter online: ${(e as Error).message}. The full weights of the ModelRunner are partially updated. Please discard the whole weights.`,
    );
  }
}

export function destroyWeightsUpdateGroup(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const name = groupName(parsed.value.group_name);
  if (name === null) return sendInvalid(call.res, 'group_name must be a string', true);
  if (!call.claimSuccess) {
    const entry = engine.weights.groups.get(name);
    // A second destroy (or one for a group never made) is harmless, as on a real engine.
    if (entry) {
      entry.member?.close();
      engine.weights.groups.delete(name);
    }
  }
  sendJson(call.res, 200, { success: true, message: 'Succeeded to destroy custom process group.' });
}

/**
 * `/get_weights_by_name` (GET or POST, body `{name, truncate_size}`, default 100): the first
 * values of a loaded parameter, flattened, so a caller can check that a load really happened.
 * A parameter never loaded is a 400; one loaded without bytes (metadata only) has no values.
 */
export function getWeightsByName(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  if (typeof b.name !== 'string' || b.name === '') return sendInvalid(call.res, 'Field required: name', true);
  const size = b.truncate_size === undefined ? 100 : b.truncate_size;
  if (!isInt(size) || size < 1) return sendInvalid(call.res, 'truncate_size must be a positive integer', true);
  const t = engine.weights.tensors.get(b.name);
  if (!t) return fail(call, `Parameter ${b.name} not found.`);
  sendJson(call.res, 200, t.head === null ? [] : decodeValues(t.dtype, Buffer.from(t.head, 'base64'), size));
}
