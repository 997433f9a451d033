// When a long-running command (gateway, watch) must stop: SIGINT or SIGTERM, sent to its pid or to
// its whole process group, or the death of its parent. `npx` (npm exec) dies on SIGTERM without
// passing it on, and we would live on as an orphan, so a parent that goes away counts as SIGTERM.
// A second signal means "now". It owns the process's exit only in those two cases.

export type StopReason = 'SIGINT' | 'SIGTERM' | 'parent_exited';

// How often the parent pid is checked: cheap, and an orphan notices within half a second.
const PARENT_POLL_MS = 500;

/**
 * Resolves at the first stop request. From then on a second SIGINT/SIGTERM exits the process at
 * once (130 / 143, as a shell reports a signal death); `onSecond` may say why first.
 */
export function waitForStop(opts: { onSecond?: (signal: NodeJS.Signals) => void; signals?: readonly ('SIGINT' | 'SIGTERM')[] } = {}): Promise<StopReason> {
  const signals = opts.signals ?? ['SIGINT', 'SIGTERM'];
  return new Promise((resolve) => {
    let requested = false;
    const parent = process.ppid;
    const poll = setInterval(() => {
      if (process.ppid !== parent) request('parent_exited');
    }, PARENT_POLL_MS);
    poll.unref(); // never the reason the process stays up
    const request = (why: StopReason) => {
      if (requested) {
        if (why === 'parent_exited') return;
        opts.onSecond?.(why);
        process.exit(why === 'SIGINT' ? 130 : 143);
      }
      requested = true;
      clearInterval(poll);
      resolve(why);
    };
    for (const signal of signals) process.on(signal, () => request(signal));
  });
}

/**
 * Exits the process with code 1 after `ms`, whatever is still running: the shutdown deadline.
 * The timer is unref'd, so a shutdown that finishes in time exits as usual.
 */
export function exitAfter(ms: number, onExpire: () => void): void {
  setTimeout(() => {
    onExpire();
    process.exit(1);
  }, ms).unref();
}
