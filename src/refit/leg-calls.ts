// One engine's call at a time, for a refit that must see it made: a call refused before it left
// (its owner's fence closed, no owner yet, not the owner: leg-recovery.ts `notMade`) is sent
// again until its deadline, and an engine's own word on the version it holds is read with
// `GET model_info`. After a lapse of this replica's lease, nothing more is sent for a refit until
// its journal says this replica still holds it (the runner's `stillOurs`). Every call goes through
// `LegRunner.runLegs`, like a phase's legs; it never judges an answer (verdicts.ts and
// leg-recovery.ts do).

import type { LegRunner } from '../control/leg-runner.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { Worker } from '../fleet/worker.ts';
import { notMade, reportedVersion } from './leg-recovery.ts';

/** How often a call that was not made is tried again. */
const NOT_MADE_RETRY_MS = 250;
/** How long the report waits on reading a failed engine's version. */
const READ_BACK_MS = 1_000;

export class LegCalls {
  constructor(
    private readonly deps: {
      legs: LegRunner;
      /** Aborted when this replica shuts down: it does not wait for a fence to reopen then. */
      draining: AbortSignal;
      /**
       * Whether this replica still holds the refit a call is for (runner.ts): false once another
       * replica took it over, undefined while that cannot be read (after a lapse of the lease).
       */
      stillOurs?: (refitId: string) => Promise<boolean | undefined> | undefined;
    },
  ) {}

  /**
   * One call, made once the engine can be called: while its owner is being replaced, or its
   * owner's fence is closed (the lease lapsed and is being proven again), a call is not made at
   * all (notMade: fenced, `no_owner`, `not_owner`), and is tried again every 250 ms until the
   * deadline. What was made is the answer, whatever it says. Before each attempt the refit is
   * asked whether it is still this replica's: after a lapse of the lease another replica may hold
   * it, and nothing more is sent for it until its journal says it is still ours (a pause sent again
   * by a runner that lost its refit would land after the new runner's resume). Taken over: the call
   * is not made, for good; not known yet: it counts as not made (fenced), and is tried again.
   */
  async made(worker: Worker, call: () => ControlCall, deadline: number, signal: AbortSignal): Promise<ControlOutcome> {
    for (;;) {
      const c = call();
      const ours = c.refitId && this.deps.stillOurs ? await this.deps.stillOurs(c.refitId) : true;
      if (ours === false) return { kind: 'unreachable', latencyMs: 0, message: `upstream \`${worker.url}\` not called: another replica took this refit over` };
      const out: ControlOutcome =
        ours === undefined
          ? {
              kind: 'unreachable',
              code: 'bus_unavailable',
              fenced: true,
              latencyMs: 0,
              message: `upstream \`${worker.url}\` not called: this replica could not read the refit's journal after losing its lease`,
            }
          : await this.one(worker, c, signal);
      // A replica shutting down does not wait for a fence to reopen: the refit ends with what it has.
      if (!notMade(out) || signal.aborted || this.deps.draining.aborted || Date.now() + NOT_MADE_RETRY_MS >= deadline) return out;
      await new Promise((r) => setTimeout(r, NOT_MADE_RETRY_MS));
    }
  }

  /** `GET model_info`: the engine's own word on the version it holds. */
  versionRead(readMs: number, refitId: string | undefined): ControlCall {
    const call = this.deps.legs.callFor('model_info', {
      method: 'GET',
      rawQuery: '',
      body: null,
      contentType: undefined,
      trace: { 'x-request-id': `refit-${refitId ?? 'unknown'}-read` },
    });
    const timeoutSecs = Math.max(1, Math.ceil(readMs / 1000));
    return { ...call, refitId, timeoutSecs, deadline: Date.now() + timeoutSecs * 1000 };
  }

  /** Each engine's weight version as it reports it now (absent where it cannot be read within 2 s). */
  async readVersions(workers: readonly Worker[], refitId: string): Promise<Map<string, string>> {
    const held = new Map<string, string>();
    const signal = AbortSignal.timeout(READ_BACK_MS);
    await Promise.all(
      workers.map(async (w) => {
        const out = await this.made(w, () => this.versionRead(READ_BACK_MS, refitId), Date.now() + READ_BACK_MS, signal).catch(() => undefined);
        const v = out && reportedVersion(out);
        if (v !== undefined) held.set(w.id, v);
      }),
    );
    return held;
  }

  private async one(worker: Worker, call: ControlCall, signal: AbortSignal): Promise<ControlOutcome> {
    const out = await this.deps.legs.runLegs([{ worker, call }], signal);
    return out.get(worker.id) ?? { kind: 'unreachable', latencyMs: 0, message: `upstream \`${worker.url}\` was not called` };
  }
}
