// The engine routes slime calls directly around weight syncs and for profiling, as SGLang (with
// slime's patches) answers them: `/weights_checker` (snapshot, reset_tensors, compare, checksum
// over the loaded tensors), `/post_process_weights`, `/pull_weights` (recorded, no disk touched),
// `/start_profile` and `/stop_profile` (plain-text answers, no profiler). It never loads weights
// and never touches the scheduler; what it remembers per engine lives here, not in the engine.

import { createHash } from 'node:crypto';
import type { RouteTable } from '../core/http-front.ts';
import { isInt, sendBuffer, sendJson, type Call } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { jsonObject, jsonObjectOrEmpty, sendInvalid } from './reply.ts';

/** The loaded weights as the checker compares them: the model path and each tensor's facts. */
type Fingerprint = Map<string, string>;

interface Checker {
  snapshot: Fingerprint | null;
  /** The last reset_tensors: until a load lands after it (`weights.loads` moves), the weights are its noise. */
  reset: { atLoads: number; epoch: number } | null;
  resets: number;
}

const checkers = new WeakMap<SimEngine, Checker>();
/** The fingerprint's entry for reset weights: each reset is noise of its own. */
const NOISE = '<reset_tensors>';

function checkerOf(engine: SimEngine): Checker {
  let c = checkers.get(engine);
  if (!c) checkers.set(engine, (c = { snapshot: null, reset: null, resets: 0 }));
  return c;
}

function fingerprint(engine: SimEngine, c: Checker): Fingerprint {
  const f: Fingerprint = new Map([['<model_path>', engine.weights.modelPath]]);
  for (const t of engine.weights.tensors.values()) f.set(t.name, `${t.dtype}${JSON.stringify(t.shape)}:${t.checksum ?? 'metadata-only'}`);
  if (c.reset && engine.weights.loads === c.reset.atLoads) f.set(NOISE, `reset #${c.reset.epoch}`);
  return f;
}

function differences(expected: Fingerprint, actual: Fingerprint): string[] {
  const names = new Set([...expected.keys(), ...actual.keys()]);
  return [...names].filter((n) => expected.get(n) !== actual.get(n)).sort();
}

const checked = (res: Call['res'], ok: boolean, message: string) => sendJson(res, ok ? 200 : 400, { success: ok, message });

/** `POST /weights_checker {action}`: 200 `{success: true, message}`, 400 `{success: false, message}`. */
export function weightsChecker(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const { action = 'checksum', allow_quant_error: quant } = parsed.value;
  if (typeof action !== 'string') return sendInvalid(call.res, 'action: Input should be a valid string', true);
  if (quant !== undefined && typeof quant !== 'boolean') return sendInvalid(call.res, 'allow_quant_error: Input should be a valid boolean', true);
  const c = checkerOf(engine);
  switch (action) {
    case 'snapshot':
      c.snapshot = fingerprint(engine, c);
      return checked(call.res, true, `Snapshot of ${engine.weights.tensors.size} tensors taken.`);
    case 'reset_tensors':
      c.reset = { atLoads: engine.weights.loads, epoch: ++c.resets };
      return checked(call.res, true, 'Tensors reset to random values.');
    case 'compare': {
      if (c.snapshot === null) return checked(call.res, false, 'No snapshot to compare with: call weights_checker with action snapshot first.');
      const now = fingerprint(engine, c);
      const diff = differences(c.snapshot, now);
      if (diff.length === 0) return checked(call.res, true, 'Weights match the snapshot.');
      if (now.has(NOISE) && !c.snapshot.has(NOISE)) {
        return checked(call.res, false, 'Weights differ from the snapshot: the tensors were reset and no weights were loaded since.');
      }
      return checked(call.res, false, `Weights differ from the snapshot: ${diff.join(', ')}.`);
    }
    case 'checksum': {
      const f = fingerprint(engine, c);
      const digest = createHash('sha256')
        .update(JSON.stringify([...f].sort(([a], [b]) => (a < b ? -1 : 1))))
        .digest('hex');
      return checked(call.res, true, `checksum ${digest} over ${engine.weights.tensors.size} tensors.`);
    }
    default:
      return checked(call.res, false, `Unsupported action=${JSON.stringify(action)}`);
  }
}

/** `POST /post_process_weights {restore_weights_before_load, post_process_quantization}` (slime's patch). */
export function postProcessWeights(_engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  for (const key of ['restore_weights_before_load', 'post_process_quantization']) {
    const v = parsed.value[key];
    if (v !== undefined && typeof v !== 'boolean') return sendInvalid(call.res, `${key}: Input should be a valid boolean`, true);
  }
  sendJson(call.res, 200, { success: true, message: 'Success.' });
}

/** `POST /pull_weights {local_checkpoint_dir, source_dir, target_version}` (slime's delta sync patch): all three required. */
export function pullWeights(_engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message, true);
  const b = parsed.value;
  for (const key of ['local_checkpoint_dir', 'source_dir', 'target_version']) {
    if (b[key] === undefined) return sendInvalid(call.res, `Field required: ${key}`, true);
  }
  if (typeof b.local_checkpoint_dir !== 'string') return sendInvalid(call.res, 'local_checkpoint_dir: Input should be a valid string', true);
  if (typeof b.source_dir !== 'string') return sendInvalid(call.res, 'source_dir: Input should be a valid string', true);
  if (!isInt(b.target_version)) return sendInvalid(call.res, 'target_version: Input should be a valid integer', true);
  sendJson(call.res, 200, { success: true, message: 'Success.' });
}

const PROFILE_FIELDS: Record<string, (v: unknown) => boolean> = {
  output_dir: (v) => typeof v === 'string',
  start_step: isInt,
  num_steps: isInt,
  activities: (v) => Array.isArray(v) && v.every((a) => typeof a === 'string'),
  with_stack: (v) => typeof v === 'boolean',
  record_shapes: (v) => typeof v === 'boolean',
  profile_by_stage: (v) => typeof v === 'boolean',
  merge_profiles: (v) => typeof v === 'boolean',
};

/** `GET|POST /start_profile`, an optional ProfileReqInput body (every field nullable); plain text, no content-type. */
export function startProfile(_engine: SimEngine, call: Call): void {
  const parsed = jsonObjectOrEmpty(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  for (const [key, ok] of Object.entries(PROFILE_FIELDS)) {
    const v = parsed.value[key];
    if (v !== undefined && v !== null && !ok(v)) return sendInvalid(call.res, `${key}: Input has the wrong type`);
  }
  sendBuffer(call.res, 200, Buffer.from('Start profiling.\n'), null);
}

export function stopProfile(_engine: SimEngine, call: Call): void {
  sendBuffer(call.res, 200, Buffer.from('Stop profiling. This will take some time.\n'), null);
}

/** The routes, for the server's table. */
export function maintenanceRoutes(t: RouteTable<SimEngine>): void {
  t.add('/weights_checker', ['POST'], weightsChecker);
  t.add('/post_process_weights', ['POST'], postProcessWeights);
  t.add('/pull_weights', ['POST'], pullWeights);
  t.add('/start_profile', ['GET', 'HEAD', 'POST'], startProfile);
  t.add('/stop_profile', ['GET', 'HEAD', 'POST'], stopProfile);
}
