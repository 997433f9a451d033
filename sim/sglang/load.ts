// The one load transaction every SGLang weight route goes through (abort → drain unless paused →
// flush check → load → version), over the engine's weights (weights.ts). Apart from weights.ts
// so that the store knows nothing of the engine that holds it.

import type { SimEngine } from './engine.ts';
import type { LoadSource } from './weights.ts';

export type LoadOutcome = { ok: true; message: string } | { ok: false; message: string };

export interface LoadRequest {
  source: LoadSource;
  /** `flush_cache` as sent; SGLang defaults it to true on every update route. */
  flushCache: unknown;
  abortAll: unknown;
  weightVersion: string | null;
  claimSuccess: boolean;
  successMessage: string;
  detail: Record<string, unknown>;
  /** The actual load; throws with the engine's failure text. */
  load: () => Promise<void>;
}

/**
 * One weight load as SGLang's tokenizer manager runs it: optional abort of everything, then,
 * unless paused, the model-update writer lock (new requests held, in-flight ones drained), a
 * cache flush that needs an idle scheduler, the load, and the version stored only on success.
 */
export function runLoad(engine: SimEngine, r: LoadRequest): Promise<LoadOutcome> {
  const sched = engine.scheduler;
  const store = engine.weights;
  if (r.abortAll === true) sched.abort('', true);
  return store.serialize(async () => {
    // A claimed load answers at once: no drain, no flush check, nothing loaded.
    const unlock = sched.paused === null && !r.claimSuccess ? sched.lockGate() : null;
    try {
      if (unlock) await sched.whenIdle();
      if (!r.claimSuccess) {
        const flush = r.flushCache !== false;
        if (flush && !sched.idle) {
          const c = sched.counts();
          store.failedLoads++;
          return {
            ok: false,
            message: `Failed to flush cache before updating weights: there are running or waiting requests (#running-req: ${c.running}, #queue-req: ${c.waiting}). Weights were not updated.`,
          };
        }
        try {
          await r.load();
        } catch (e) {
          store.failedLoads++;
          return { ok: false, message: (e as Error).message };
        }
        if (flush) sched.flushCache();
      }
      if (r.claimSuccess) store.claimedLoads++;
      else store.loads++;
      store.lastLoad = {
        source: r.source,
        at: new Date().toISOString(),
        weightVersion: r.weightVersion,
        claimedWithoutApplying: r.claimSuccess,
        detail: r.detail,
      };
      let message = r.successMessage;
      // SGLang's HTTP layer stores the version whenever the engine reports success, so a
      // claimed-but-skipped load still advertises the new version (a 200 is no proof
      // of a refit).
      if (r.weightVersion !== null) {
        engine.weightVersion = r.weightVersion;
        message += ` Weight version updated to ${r.weightVersion}.`;
      }
      return { ok: true, message };
    } finally {
      unlock?.();
    }
  });
}
