// SGLang's scheduler over the shared one (sim/core/scheduler.ts: gate, queues, the cost model's
// pacing and prefix cache): its pause modes (abort, retract, in_place: each stops the running set) and its
// abort_request (an exact-rid gate at the tokenizer front, then a prefix match in the scheduler,
// with SGLang's messages). It never parses HTTP and never knows weight versions.

import { Scheduler as BaseScheduler, type PauseModes, type SchedulerOptions } from '../core/scheduler.ts';
import { abortFinish } from '../core/sequence.ts';

export type PauseMode = 'abort' | 'retract' | 'in_place';

// Every SGLang pause closes admission and stops the running set: `abort` ends it, `retract`
// sends it back to the waiting queue, `in_place` freezes it as it is.
const MODES: PauseModes<PauseMode> = {
  abort: { admits: false, freezes: true },
  retract: { admits: false, freezes: true },
  in_place: { admits: false, freezes: true },
};
export const PAUSE_MODES = Object.keys(MODES) as PauseMode[];

// SGLang's messages: the tokenizer's default for a request dropped from the waiting queue, and
// FINISH_ABORT's default for a running one.
const ABORT_WAITING = 'Abort in waiting queue';
const ABORT_RUNNING = 'Aborted';

export class Scheduler extends BaseScheduler<PauseMode> {
  constructor(opts: SchedulerOptions) {
    super(opts, MODES);
  }

  /**
   * `/abort_request`: the rid must be live (held ones included) or nothing happens; then every
   * waiting or running request whose rid starts with it is aborted. Held requests are not
   * touched: SGLang's scheduler has not seen them.
   */
  abort(rid: string, all: boolean): number {
    if (!all && !this.live.has(rid)) return 0;
    let n = 0;
    for (const s of this.pacer.waiting()) {
      if (all || s.rid.startsWith(rid)) {
        this.end(s, abortFinish(ABORT_WAITING));
        n++;
      }
    }
    for (const s of this.pacer.running()) {
      if (all || s.rid.startsWith(rid)) {
        this.end(s, abortFinish(ABORT_RUNNING));
        n++;
      }
    }
    return n;
  }

  pause(mode: PauseMode): void {
    this.enterPause(mode);
    if (mode === 'abort') {
      this.abort('', true);
    } else if (mode === 'retract') {
      // Running requests go back to the front of the waiting queue; their KV is dropped, the
      // tokens already produced are kept and recomputed after continue.
      for (const s of this.retractRunning()) {
        s.retractions++;
        s.cachedTokens = 0;
      }
    }
  }
}
