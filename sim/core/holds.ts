// The calls a simulator's faults are holding back: those sleeping in a `delayMs` fault right now,
// and those a `hang` fault keeps unanswered until `/_sim/release-hung` or stop. Each face adds
// and ends its own (an HTTP response destroyed, a gRPC call failed); this file only counts and
// releases them.

export class Holds {
  /** Calls sleeping in a delay right now. */
  delayed = 0;
  /** One entry per hung call; calling it ends that call (and removes the entry). */
  readonly hung = new Set<() => void>();

  /** Ends every hung call; returns how many there were. */
  releaseHung(): number {
    const n = this.hung.size;
    for (const end of [...this.hung]) end();
    this.hung.clear();
    return n;
  }
}
