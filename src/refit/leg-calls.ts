// One engine's call at a time, for a refit that must see it made: a call refused before it left
// (its owner's fence closed, no owner yet, not the owner: leg-recovery.ts `notMade`) is sent
// again until its deadline, and an engine's own word on the version it holds is read with
// `GET model_info`. Every call goes through `LegRunner.runLegs`, like a phase's legs; it never
// judges an answer (verdicts.ts and leg-recovery.ts do).

import type { LegRunner } from '../control/leg-runner.ts';
import type { ControlCall, ControlOutcome } from '../engines/control-call.ts';
import type { Worker } from '../fleet/worker.ts';
import { notMade, reportedVersion } from './leg-recovery.ts';

/** How often a call that was not made is tried again. */
const NOT_MADE_RETRY_MS = 250;
/** How long the report waits on reading a failed engine's version. */
const READ_BACK_MS = 2_000;

export class LegCalls {
  constructor(
    private readonly deps: {
      legs: LegRunner;
      /** Aborted when this replica shuts down: it does not wait for a fence to reopen then. */
      draining: AbortSignal;
    },
  ) {}

  /**
   * One call, made once the engine can be called: while its owner is being replaced, or its
   * owner's fence is closed (the lease lapsed and is being proven again), a call is not made at
   * all (notMade: fenced, `no_owner`, `not_owner`), and is tried again every 250 ms until the
   * deadline. What was made is the answer, whatever it says.
   */
  async made(worker: Worker, call: () => ControlCall, deadline: number, signal: AbortSignal): Promise<ControlOutcome> {
    for (;;) {
      const out = await this.one(worker, call(), signal);
      // A replica shutting down does not wait for a fence to reopen: the refit ends with what it has.
      if (!notMade(out) || signal.aborted || this.deps.draining.aborted || Date.now() + NOT_MADE_RETRY_MS >= deadline) return out;
      await new Promise((r) => setTimeout(r, NOT_MADE_RETRY_MS));
    }
  }

  /** `GET model_info`: the engine's own word on the version it holds. */
  versionRead(readMs: number, refitId: string | undefined): ControlCall {
    const call = this.deps.legs.callFor('model_info', { method: 'GET', rawQuery: '', body: null, contentType: undefined, trace: { 'x-request-id': `refit-${refitId ?? 'unknown'}-read` } });
    const timeoutSecs = Math.max(1, Math.ceil(readMs / 1000));
    return { ...call, refitId, timeoutSecs, deadline: Date.now() + timeoutSecs * 1000 };
  }

  /** Each engine's weight version as it reports it now (absent where it cannot be read within 2 s). */
  async readVersions(workers: readonly Worker[], refitId: string): Promise<Map<string, string>> {
    const held = new Map<string, string>();
    const signal = AbortSignal.timeout(READ_BACK_MS);
    await Promise.all(workers.map(async (w) => {
      const out = await this.made(w, () => this.versionRead(READ_BACK_MS, refitId), Date.now() + READ_BACK_MS, signal).catch(() => undefined);
      const v = out && reportedVersion(out);
      if (v !== undefined) held.set(w.id, v);
    }));
    return held;
  }

  private async one(worker: Worker, call: ControlCall, signal: AbortSignal): Promise<ControlOutcome> {
    const out = await this.deps.legs.runLegs([{ worker, call }], signal);
    return out.get(worker.id) ?? { kind: 'unreachable', latencyMs: 0, message: `upstream \`${worker.url}\` was not called` };
  }
}
