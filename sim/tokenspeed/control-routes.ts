// The RL control app's generation and facts routes: pause (wait /
// abort / keep, default wait), continue, abort_request, flush_cache, sleep/wake (memory
// occupation), health_generate, /v1/loads, versions, /model_info, /server_info, /is_paused.
// They act on the engine state the gRPC servicer shares; weight routes live in refit.ts.

import { MEMORY_TAGS } from '../core/memory-gate.ts';
import { sendJson, type Call } from '../core/reply.ts';
import { abortFinish } from '../core/sequence.ts';
import type { TsEngine } from './engine.ts';
import { invalid, ok, optionalBody, refuse, requiredBody } from './reply.ts';
import { PAUSE_MODES, type PauseMode } from './scheduler.ts';
import { serverArgs } from './server-args.ts';

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export async function pauseGeneration(engine: TsEngine, call: Call): Promise<void> {
  const body = optionalBody(call);
  if (!body) return;
  const mode = body.mode ?? 'wait';
  if (typeof mode !== 'string' || !PAUSE_MODES.includes(mode as PauseMode)) {
    return invalid(call, `mode must be one of ${PAUSE_MODES.join(', ')}, got ${JSON.stringify(mode)}`);
  }
  // Admission is blocked first; `wait` answers once the requests already in flight have drained.
  if (!call.claimSuccess) await engine.scheduler.pause(mode as PauseMode, abortFinish('Aborted by pause_generation'));
  ok(call, { message: 'Paused generation.', mode });
}

export function continueGeneration(engine: TsEngine, call: Call): void {
  if (!optionalBody(call)) return;
  if (!call.claimSuccess) engine.scheduler.resume();
  ok(call, { message: 'Continued generation.' });
}

export function abortRequest(engine: TsEngine, call: Call): void {
  const body = requiredBody(call);
  if (!body) return;
  const { rid, abort_all: all } = body;
  if (all !== undefined && typeof all !== 'boolean') return invalid(call, 'abort_all must be a boolean');
  if (rid !== undefined && rid !== null && typeof rid !== 'string') return invalid(call, 'rid must be a string');
  if (call.claimSuccess) return ok(call);
  if (all === true) {
    // Pause with mode abort, then resume: the engine is not left paused (even if it was before).
    void engine.scheduler.pause('abort', abortFinish('Aborted by abort_request'));
    engine.scheduler.resume();
  } else if (typeof rid === 'string' && rid !== '') {
    const child = new RegExp(`^${escapeRegExp(rid)}-n\\d+$`);
    engine.scheduler.abortWhere((r) => r === rid || child.test(r), abortFinish('Aborted by abort_request'));
  }
  ok(call);
}

export function flushCache(engine: TsEngine, call: Call): void {
  if (call.claimSuccess || engine.scheduler.flushCache()) return ok(call, { message: 'Cache flushed.' });
  const c = engine.scheduler.counts();
  refuse(call, `Cache not flushed: ${c.running} running and ${c.waiting} waiting requests.`);
}

function memoryTags(call: Call): string[] | null {
  const body = optionalBody(call);
  if (!body) return null;
  const tags = body.tags;
  if (tags === undefined || tags === null) return [...MEMORY_TAGS];
  if (!Array.isArray(tags) || !tags.every((t) => (MEMORY_TAGS as readonly string[]).includes(t as string))) {
    invalid(call, `tags must be a list of ${MEMORY_TAGS.join(', ')}`);
    return null;
  }
  return tags as string[];
}

export function releaseMemoryOccupation(engine: TsEngine, call: Call): void {
  const tags = memoryTags(call);
  if (!tags) return;
  if (!engine.scheduler.idle) return refuse(call, 'Cannot release memory occupation while requests are running or waiting; pause first.');
  if (!call.claimSuccess) engine.releaseMemory(tags);
  ok(call, { message: `Released memory occupation (${tags.join(', ')}).` });
}

export function resumeMemoryOccupation(engine: TsEngine, call: Call): void {
  const tags = memoryTags(call);
  if (!tags) return;
  if (!call.claimSuccess) engine.resumeMemory(tags);
  ok(call, { message: `Resumed memory occupation (${tags.join(', ')}).` });
}

export function healthGenerate(_engine: TsEngine, call: Call): void {
  sendJson(call.res, 200, { status: 'ok' });
}

export function loads(engine: TsEngine, call: Call): void {
  const kv = engine.scheduler.kvByRank();
  sendJson(call.res, 200, {
    loads: engine.scheduler.countsByRank().map((r, dp_rank) => ({
      dp_rank,
      num_reqs: r.running + r.waiting,
      num_waiting_reqs: r.waiting,
      // Pages held when the engine models them; the fixed model reports its tokens.
      num_pages: kv ? Math.ceil(r.tokens / kv[dp_rank].pageSize) : r.tokens,
    })),
  });
}

export function getWeightVersion(engine: TsEngine, call: Call): void {
  sendJson(call.res, 200, { weight_version: engine.weightVersion });
}

export function updateWeightVersion(engine: TsEngine, call: Call): void {
  const body = requiredBody(call);
  if (!body) return;
  const v = body.new_version;
  if (v === undefined || v === null) return invalid(call, 'new_version is required');
  if (typeof v !== 'string' && typeof v !== 'number') return invalid(call, 'new_version must be a string');
  const version = String(v);
  if (engine.opts.kvstoreStorageBackend !== null) {
    return refuse(
      call,
      `update_weight_version is refused with L3 KV storage (${engine.opts.kvstoreStorageBackend}): relabelling would serve stale cached KV under the new version.`,
    );
  }
  if (!call.claimSuccess) {
    if (body.abort_all_requests === true) engine.scheduler.abortWhere(() => true, abortFinish('Aborted by update_weight_version'));
    engine.weightVersion = version;
  }
  ok(call, { message: `Weight version updated to ${version}.`, new_version: version });
}

export function modelInfo(engine: TsEngine, call: Call): void {
  sendJson(call.res, 200, { model_path: engine.weights.modelPath, weight_version: engine.weightVersion });
}

/** The engine's ServerArgs as the control app sees them: live version and pause state. */
export function serverInfo(engine: TsEngine, call: Call): void {
  sendJson(call.res, 200, {
    ...serverArgs(engine),
    weight_version: engine.weightVersion,
    is_paused: engine.paused,
    version: engine.opts.version,
  });
}

export function isPaused(engine: TsEngine, call: Call): void {
  sendJson(call.res, 200, { is_paused: engine.paused });
}
