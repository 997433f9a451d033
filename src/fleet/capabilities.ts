// What an engine can do on the control plane: a static row per engine, overridable
// field by field with `rl.*` labels (how TokenSpeed advertises itself). Informational for the
// control pass-through: no control call is refused because a capability says it is unsupported;
// a refit reads `update_from` (engines that cannot load the source are skipped) and an `in_flight`
// refit its `pause_modes` (refit/plan.ts: refused unless every target can pause in place). Also
// whether its generations carry logprobs, which the data plane uses to pick an engine.

import { trimWhiteSpace } from './versions.ts';

export interface RlCapabilities {
  source: 'static' | 'label';
  pause_modes: string[];
  update_from: string[];
  abort: boolean;
  flush_cache: boolean;
  sleep_wake: boolean;
  reports_weight_version: boolean;
}

type Row = Omit<RlCapabilities, 'source'>;

const STATIC_ROWS: Readonly<Record<string, Readonly<Row>>> = {
  sglang: {
    pause_modes: ['abort', 'retract', 'in_place'],
    update_from: ['disk', 'tensor', 'distributed'],
    abort: true,
    flush_cache: true,
    sleep_wake: true,
    reports_weight_version: true,
  },
  vllm: {
    pause_modes: ['abort', 'wait', 'keep'],
    update_from: ['disk', 'distributed'],
    abort: false,
    flush_cache: false,
    sleep_wake: true,
    reports_weight_version: false,
  },
  // For builds that do not advertise. `keep` is left out because such builds cannot reach it
  // over HTTP; `disk` and `tensor` because the scheduler has no receive path for them (501).
  tokenspeed: {
    pause_modes: ['wait', 'abort'],
    update_from: ['distributed'],
    abort: true,
    flush_cache: true,
    sleep_wake: true,
    reports_weight_version: true,
  },
};

const NOTHING: Readonly<Row> = {
  pause_modes: [],
  update_from: [],
  abort: false,
  flush_cache: false,
  sleep_wake: false,
  reports_weight_version: false,
};

const LIST_LABELS = [
  ['rl.pause_modes', 'pause_modes'],
  ['rl.update_from', 'update_from'],
] as const;

const BOOL_LABELS = [
  ['rl.abort', 'abort'],
  ['rl.flush_cache', 'flush_cache'],
  ['rl.sleep_wake', 'sleep_wake'],
  ['rl.reports_weight_version', 'reports_weight_version'],
] as const;

// ASCII case-insensitive `true` (Rust `eq_ignore_ascii_case`); `yes`, `1`, `` are false.
const TRUE = /^true$/i;

function label(labels: Record<string, string>, key: string): string | undefined {
  const v = Object.hasOwn(labels, key) ? labels[key] : undefined;
  return typeof v === 'string' ? v : undefined;
}

/** `"abort, keep"` → `["abort","keep"]`; a present but empty label is `[]`. */
function listOf(value: string): string[] {
  return value
    .split(',')
    .map(trimWhiteSpace)
    .filter((s) => s.length > 0);
}

/** The static row for `engine` with every present `rl.*` override applied. */
export function capabilitiesFor(engine: string, labels: Record<string, string>): RlCapabilities {
  const row = Object.hasOwn(STATIC_ROWS, engine) ? STATIC_ROWS[engine] : NOTHING;
  let overridden = false;
  let pause_modes = [...row.pause_modes];
  let update_from = [...row.update_from];
  const flags = {
    abort: row.abort,
    flush_cache: row.flush_cache,
    sleep_wake: row.sleep_wake,
    reports_weight_version: row.reports_weight_version,
  };
  for (const [key, field] of LIST_LABELS) {
    const v = label(labels, key);
    if (v === undefined) continue;
    overridden = true;
    if (field === 'pause_modes') pause_modes = listOf(v);
    else update_from = listOf(v);
  }
  for (const [key, field] of BOOL_LABELS) {
    const v = label(labels, key);
    if (v === undefined) continue;
    overridden = true;
    flags[field] = TRUE.test(trimWhiteSpace(v));
  }
  // Built in one literal so the serialised key order is the wire order.
  return {
    source: overridden ? 'label' : 'static',
    pause_modes,
    update_from,
    abort: flags.abort,
    flush_cache: flags.flush_cache,
    sleep_wake: flags.sleep_wake,
    reports_weight_version: flags.reports_weight_version,
  };
}

/**
 * Whether the engine's generations carry output logprobs when asked (a data-plane fact, not a
 * control capability, so it is not in `RlCapabilities`): SGLang over HTTP always does; a token
 * engine says so with its `enable_output_logprobs` label (TokenSpeed's `--enable-output-logprobs`,
 * discovered from its server args, or set at registration). Undefined: not known, try it.
 */
export function returnsLogprobs(connectionMode: string, labels: Record<string, string>): boolean | undefined {
  if (connectionMode === 'http') return true;
  const v = label(labels, 'enable_output_logprobs');
  if (v === undefined) return undefined;
  return TRUE.test(trimWhiteSpace(v));
}
