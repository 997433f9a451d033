// Callers waiting for one thing to happen in a simulated engine (the scheduler going idle, the
// admission gate opening, any token being produced): each wait resolves at the next wake, or
// gives up after its timeout. It knows nothing of what it waits for; the scheduler wakes it.

export class Waiters {
  private list: Array<() => void> = [];

  get any(): boolean {
    return this.list.length > 0;
  }

  /** Resolves at the next wake. */
  next(): Promise<void> {
    return new Promise((resolve) => this.list.push(resolve));
  }

  /** Resolves true at the next wake, false if `timeoutMs` passes first. */
  within(timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const waiter = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.list = this.list.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      this.list.push(waiter);
    });
  }

  /** Resolves every wait made so far; later waits wait for the next wake. */
  wake(): void {
    if (this.list.length === 0) return;
    const waiters = this.list;
    this.list = [];
    for (const w of waiters) w();
  }
}
