// TokenSpeed's scheduler over the shared one (sim/core/scheduler.ts: gate, queues, pacing,
// prefix cache, KV hooks): its pause modes (wait = drain, abort = abort in flight, keep =
// freeze) and the deep health probe. It never touches the wire and never knows weight versions.

import { Scheduler as BaseScheduler, type PauseModes, type SchedulerOptions } from '../core/scheduler.ts';
import type { Finish } from '../core/sequence.ts';

export type PauseMode = 'wait' | 'abort' | 'keep';

const MODES: PauseModes<PauseMode> = {
  wait: { admits: true, freezes: false },
  abort: { admits: false, freezes: false },
  keep: { admits: false, freezes: true },
};
export const PAUSE_MODES = Object.keys(MODES) as PauseMode[];

export class Scheduler extends BaseScheduler<PauseMode> {
  constructor(opts: SchedulerOptions) {
    super(opts, MODES);
  }

  /**
   * `abort`: everything in flight ends now; `wait`: in-flight requests run to the end (the
   * returned promise resolves once drained); `keep`: running requests freeze as they are.
   * In every mode new requests are held at the front until `resume`.
   */
  pause(mode: PauseMode, abortFinish: Finish): Promise<void> {
    this.enterPause(mode);
    if (mode === 'abort') {
      this.abortWhere(() => true, abortFinish);
      return Promise.resolve();
    }
    if (mode === 'keep') return Promise.resolve();
    this.admit();
    return this.whenIdle();
  }

  /**
   * The deep health probe: a 1-token generation through the gate. Healthy at once when the gate
   * is open, or as soon as the scheduler produces any output; false after `timeoutMs`.
   */
  probe(timeoutMs: number): Promise<boolean> {
    if (this.gateOpen) return Promise.resolve(true);
    return this.whenOutput(timeoutMs);
  }
}
