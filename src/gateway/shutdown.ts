// A gateway's clean-up steps, run in reverse order of their set-up, each bounded by what is left of
// one shutdown deadline. A step that waits on something dead (a NATS server gone, a request that
// never ends) must not hold back the steps after it: those free the ports and child processes.
// It never exits the process; the CLI does that when the deadline passes (cli/stop-signals.ts).

import type { Logger } from '../obs/logger.ts';

export type CleanupStep = () => Promise<void> | void;

// Even past the deadline a step gets this long: the last ones stop the embedded nats-server.
const STEP_FLOOR_MS = 1_000;

/**
 * Runs (and empties) `steps`, last pushed first. A step that throws is logged; one still running
 * when its time is up is logged and left behind. Resolves when every step ended or was left.
 */
export async function runCleanups(steps: CleanupStep[], opts: { timeoutMs: number; log: Logger }): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  for (const step of steps.splice(0).reverse()) {
    const budgetMs = Math.max(STEP_FLOOR_MS, deadline - Date.now());
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      timer = setTimeout(() => resolve('expired'), budgetMs);
      timer.unref();
    });
    const started = Date.now();
    try {
      const ended = await Promise.race([Promise.resolve().then(step), expired]);
      if (ended === 'expired') {
        opts.log.warn({ step: describe(step), waited_ms: budgetMs }, 'a shutdown step did not finish in time; going on without it');
      } else {
        opts.log.debug({ step: describe(step), ms: Date.now() - started }, 'shutdown step finished');
      }
    } catch (err) {
      opts.log.warn({ err, step: describe(step) }, 'error during shutdown');
    } finally {
      clearTimeout(timer);
    }
  }
}

// The steps are anonymous closures (`() => bus.close()`): their source is the best name they have.
function describe(step: CleanupStep): string {
  return step.name || String(step).replace(/\s+/g, ' ').slice(0, 80);
}
