// Turns a refit request into the engine calls of each phase: the pause, the refit steps (one
// disk load, or the NCCL choreography of an NCCL refit: init per engine with its own
// rank_offset, one update per chunk with the version on the last chunk only, destroy), the
// version check and the resume. Pure: no I/O, no clocks.

import type { RefitStepPlan } from '../../actors/coordinator.ts';
import { GatewayError } from '../api/errors.ts';
import { capabilitiesFor } from '../fleet/capabilities.ts';
import { sizeLabel } from '../fleet/labels.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { RefitRequest } from '../wire/refit-request.ts';

export interface CallSpec {
  method: 'GET' | 'POST';
  path: string;
  body?: Record<string, unknown>;
}

export interface RefitPlan {
  steps: RefitStepPlan[];
  pause: CallSpec;
  resume: CallSpec;
  verify: CallSpec | null;
  /** The call of refit step `index` for one engine (bodies may differ per engine). */
  step(index: number, worker: Worker): CallSpec;
  /** NCCL group layout, for distributed refits. */
  group?: { worldSize: number; rankOffsets: Record<string, number> };
  /** The values a read-back step (`get_weights_by_name`) must show, by step index. */
  expect?: (index: number) => ReadonlyArray<number | null> | undefined;
}

/** Steps that read a parameter back after the load: named so, one per `verify_weights` entry. */
export const READ_BACK = 'get_weights_by_name';

/**
 * Inserts a read-back step per `verify_weights` entry after the load steps (before a cleanup step
 * such as destroying the group). Read-only: never collective, safe to send again.
 */
function withReadBack(req: RefitRequest, plan: RefitPlan): RefitPlan {
  const checks = req.verify_weights ?? [];
  if (checks.length === 0) return plan;
  const at = plan.steps.at(-1)?.runOn === 'joined' ? plan.steps.length - 1 : plan.steps.length;
  const steps = [...plan.steps.slice(0, at), ...checks.map((c) => ({ name: `${READ_BACK} ${c.name}`, runOn: 'remaining' as const })), ...plan.steps.slice(at)];
  const specs = checks.map((c): CallSpec => ({ method: 'GET', path: READ_BACK, body: { name: c.name, truncate_size: c.values.length } }));
  return {
    ...plan,
    steps,
    step: (index, worker) =>
      index < at ? plan.step(index, worker) : index < at + checks.length ? specs[index - at]! : plan.step(index - checks.length, worker),
    expect: (index) => (index >= at && index < at + checks.length ? checks[index - at]!.values : undefined),
  };
}

export const DEFAULT_GROUP = 'weight_update_group';

export function planRefit(req: RefitRequest, targets: Worker[]): RefitPlan {
  return withReadBack(req, planSteps(req, targets));
}

/** The pause modes that keep running requests in place while weights load: SGLang's, then vLLM's and TokenSpeed's. */
const IN_PLACE_MODES = ['in_place', 'keep'] as const;

/**
 * The one pause mode an `in_flight` refit sends every target: the first of `in_place` and `keep`
 * that all of them list in their capabilities. Refused (409 `strategy_unsupported`, before
 * anything is paused) when an engine lists neither, or the targets share none.
 */
export function inFlightMode(targets: readonly Worker[]): string {
  const modes = targets.map((w) => capabilitiesFor(w.engine, mergedLabels(w)).pause_modes);
  const shared = IN_PLACE_MODES.find((m) => modes.every((list) => list.includes(m)));
  if (shared) return shared;
  const unable = targets.filter((_, i) => !IN_PLACE_MODES.some((m) => modes[i]!.includes(m))).map((w) => w.id);
  throw new GatewayError(
    'strategy_unsupported',
    unable.length
      ? `an in_flight refit keeps running requests in place, which ${unable.map((id) => `\`${id}\``).join(', ')} cannot (its pause modes include neither in_place nor keep); use strategy \`rolling\` or \`all\``
      : 'an in_flight refit sends every engine one pause mode, and the targets share neither in_place nor keep; refit them separately',
    { workers: unable.join(',') },
  );
}

/**
 * SGLang refuses a cache flush while requests are frozen `in_place` (its pause's documented
 * contract; a flush after a pause can also assert the scheduler down): an in_flight refit that
 * asks for one over such engines is refused before anything is paused.
 */
function checkInFlightCache(req: RefitRequest, mode: string): void {
  if (req.strategy?.kind !== 'in_flight' || req.strategy.cache !== 'flush' || mode !== 'in_place') return;
  throw new GatewayError(
    'strategy_unsupported',
    'an in_flight refit cannot flush the prefix cache of SGLang engines: SGLang refuses a flush while requests are frozen in place; use cache `keep` (the default), or strategy `rolling` to flush',
    { workers: '' },
  );
}

/** The pause call's body: the strategy's mode, else the request's, else the engine's default. */
function pauseBody(req: RefitRequest, targets: readonly Worker[]): Record<string, unknown> {
  const st = req.strategy;
  if (st?.kind === 'in_flight') {
    const mode = inFlightMode(targets);
    checkInFlightCache(req, mode);
    return { mode };
  }
  if (st?.kind === 'rolling') return { mode: st.pause_mode ?? 'abort' };
  return req.pause_mode ? { mode: req.pause_mode } : {};
}

/** Whether the load flushes the prefix cache: an in_flight refit's `cache` says (`keep` by default), else the source, else `fallback`. */
function flushes(req: RefitRequest, fallback: boolean): boolean {
  const st = req.strategy;
  if (st?.kind === 'in_flight') return st.cache === 'flush';
  return req.source.flush_cache ?? fallback;
}

function planSteps(req: RefitRequest, targets: Worker[]): RefitPlan {
  const pause: CallSpec = { method: 'POST', path: 'pause_generation', body: pauseBody(req, targets) };
  const resume: CallSpec = { method: 'POST', path: 'continue_generation', body: {} };
  const verify: CallSpec | null = req.verify === false ? null : { method: 'GET', path: 'model_info' };
  const source = req.source;

  if (source.kind === 'disk') {
    const body: Record<string, unknown> = {
      model_path: source.model_path,
      weight_version: req.weight_version,
      flush_cache: flushes(req, true),
    };
    if (source.load_format) body.load_format = source.load_format;
    const load: CallSpec = { method: 'POST', path: 'update_weights_from_disk', body };
    return {
      steps: [{ name: 'update_weights_from_disk', runOn: 'remaining' }],
      pause,
      resume,
      verify,
      step: () => load,
    };
  }

  // Engines are taken in one fixed order (the rows' order); engine i gets
  // rank_offset = 1 + Σ gpus of the engines before it; rank 0 is the trainer.
  const rankOffsets: Record<string, number> = {};
  let next = 1;
  for (const w of targets) {
    rankOffsets[w.id] = next;
    next += gpusOf(w);
  }
  const worldSize = next;
  if (source.world_size !== undefined && source.world_size !== worldSize) {
    throw new GatewayError(
      'invalid_request',
      `source.world_size is ${source.world_size}, but the selected engines need ${worldSize} (1 trainer rank + their GPUs)`,
      { field: '/source/world_size', expected: worldSize },
    );
  }
  const groupName = source.group_name ?? DEFAULT_GROUP;
  const flush = flushes(req, false);
  const chunks = source.chunks;
  const steps: RefitStepPlan[] = [
    { name: 'init_weights_update_group', runOn: 'remaining', collective: true },
    ...chunks.map((_, i) => ({ name: `update_weights_from_distributed ${i + 1}/${chunks.length}`, runOn: 'remaining' as const, collective: true })),
  ];
  if (!source.keep_group) steps.push({ name: 'destroy_weights_update_group', runOn: 'joined' });

  return {
    steps,
    pause,
    resume,
    verify,
    group: { worldSize, rankOffsets },
    step(index, worker) {
      if (index === 0) {
        return {
          method: 'POST',
          path: 'init_weights_update_group',
          body: {
            master_address: source.master_address,
            master_port: source.master_port,
            rank_offset: rankOffsets[worker.id],
            world_size: worldSize,
            group_name: groupName,
            backend: source.backend ?? 'nccl',
          },
        };
      }
      const c = index - 1;
      if (c < chunks.length) {
        const chunk = chunks[c]!;
        const body: Record<string, unknown> = {
          names: chunk.names,
          dtypes: chunk.dtypes,
          shapes: chunk.shapes,
          group_name: groupName,
          flush_cache: c === chunks.length - 1 ? flush : false,
          abort_all_requests: false,
        };
        // Only the last chunk carries the version, so a partial refit never advertises it.
        if (c === chunks.length - 1) body.weight_version = req.weight_version;
        if (chunk.load_format !== undefined) body.load_format = chunk.load_format;
        return { method: 'POST', path: 'update_weights_from_distributed', body };
      }
      return { method: 'POST', path: 'destroy_weights_update_group', body: { group_name: groupName } };
    },
  };
}

/** GPU ranks one engine joins with: its tp_size (absent → 1), as SGLang joins rank_offset + tp_rank. */
export function gpusOf(w: Worker): number {
  return Math.max(1, sizeLabel(mergedLabels(w).tp_size) ?? 1);
}
