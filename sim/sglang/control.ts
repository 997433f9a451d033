// Generation control routes: pause/continue (three modes), abort_request (exact-rid gate, then
// prefix match), flush_cache (plain text, no content-type, 400 while busy), memory occupation,
// and health/readiness. It changes scheduler state only; it never loads weights.

import { MEMORY_TAGS } from '../core/memory-gate.ts';
import { sendBuffer, sendEmpty, type Call } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { BUF, jsonObject, jsonObjectOrEmpty, queryParam, sendConst, sendError, sendInvalid } from './reply.ts';
import { PAUSE_MODES, type PauseMode } from './scheduler.ts';

export function pauseGeneration(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  const mode = parsed.value.mode ?? 'abort';
  if (!PAUSE_MODES.includes(mode as PauseMode)) {
    return sendInvalid(call.res, `mode: Input should be 'abort', 'retract' or 'in_place'`);
  }
  if (!call.claimSuccess) engine.scheduler.pause(mode as PauseMode);
  sendConst(call.res, 200, BUF.paused);
}

export function continueGeneration(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  if (!call.claimSuccess) engine.scheduler.resume();
  sendConst(call.res, 200, BUF.continued);
}

export function abortRequest(engine: SimEngine, call: Call): void {
  const parsed = jsonObject(call.body);
  if (!parsed.ok) return sendInvalid(call.res, parsed.message);
  const { rid = '', abort_all: all = false } = parsed.value;
  if (typeof rid !== 'string') return sendError(call.res, 'rid must be a string');
  if (typeof all !== 'boolean') return sendError(call.res, 'abort_all must be a boolean');
  if (!call.claimSuccess) engine.scheduler.abort(rid, all);
  sendEmpty(call.res, 200);
}

/** GET or POST; `?timeout=<s>` waits that long for the scheduler to go idle first. */
export async function flushCache(engine: SimEngine, call: Call): Promise<void> {
  const sched = engine.scheduler;
  const raw = queryParam(call.query, 'timeout');
  if (raw !== null) {
    const seconds = Number(raw);
    if (!Number.isFinite(seconds) || seconds < 0) return sendError(call.res, 'timeout must be a number >= 0');
    if (seconds > 0 && !sched.idle) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        sched.whenIdle(),
        new Promise<void>((r) => {
          timer = setTimeout(r, seconds * 1000);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    }
  }
  if (call.claimSuccess || sched.flushCache()) return sendBuffer(call.res, 200, BUF.flushed, null);
  const c = sched.counts();
  const text = `Cache not flushed because there are pending requests. #queue-req: ${c.waiting}, #running-req: ${c.running}\n`;
  sendBuffer(call.res, 400, Buffer.from(text), null);
}

function memoryTags(call: Call): string[] | null {
  const parsed = jsonObjectOrEmpty(call.body);
  if (!parsed.ok) {
    sendInvalid(call.res, parsed.message);
    return null;
  }
  const tags = parsed.value.tags;
  if (tags === undefined || tags === null) return [...MEMORY_TAGS];
  if (!Array.isArray(tags) || !tags.every((t) => (MEMORY_TAGS as readonly string[]).includes(t as string))) {
    sendError(call.res, `tags must be a list of ${MEMORY_TAGS.join(', ')}`);
    return null;
  }
  return tags as string[];
}

export function releaseMemoryOccupation(engine: SimEngine, call: Call): void {
  const tags = memoryTags(call);
  if (!tags) return;
  if (!engine.opts.enableMemorySaver) return sendError(call.res, 'Memory saver is not enabled: start the engine with --enable-memory-saver.');
  // SGLang 0.5.19 kills the engine when busy; the simulator refuses instead (see README).
  if (!engine.scheduler.idle) return sendError(call.res, 'Cannot release memory occupation while requests are running or waiting; pause first.');
  if (!call.claimSuccess) engine.releaseMemory(tags);
  sendConst(call.res, 200, BUF.null);
}

export function resumeMemoryOccupation(engine: SimEngine, call: Call): void {
  const tags = memoryTags(call);
  if (!tags) return;
  if (!engine.opts.enableMemorySaver) return sendError(call.res, 'Memory saver is not enabled: start the engine with --enable-memory-saver.');
  if (!call.claimSuccess) engine.resumeMemory(tags);
  sendConst(call.res, 200, BUF.null);
}

/**
 * `/health_generate`: a 1-token generation through the same gate as every request, so while
 * paused (or draining for a weight update, or with memory released) it is held until the gate
 * opens (200) or SGLANG_HEALTH_CHECK_TIMEOUT passes (503). Empty body, no content-type.
 */
export async function healthGenerate(engine: SimEngine, call: Call): Promise<void> {
  const open = await engine.scheduler.whenGateOpen(engine.opts.healthCheckTimeoutMs);
  sendEmpty(call.res, open ? 200 : 503);
}

export function health(engine: SimEngine, call: Call): void | Promise<void> {
  if (engine.opts.healthMode === 'generate') return healthGenerate(engine, call);
  sendEmpty(call.res, 200);
}

/** `/ready` (newest builds): 503 while paused or otherwise not admitting. */
export function ready(engine: SimEngine, call: Call): void {
  sendEmpty(call.res, engine.scheduler.gateOpen ? 200 : 503);
}

/** vLLM-style `/pause` and `/resume` (fixture H): recorded, answered, no effect on SGLang state. */
export function vllmStyleOk(_engine: SimEngine, call: Call): void {
  sendConst(call.res, 200, BUF.ok);
}

/** `/get_weight_version` and `/weight_version` are gone since 0.5.15.post1. */
export function deprecatedWeightVersion(_engine: SimEngine, call: Call): void {
  sendError(call.res, `${call.path} is deprecated. Please use '/model_info' instead.`, 404);
}
