// Creating a replicated stream or bucket on a cluster that is still forming (a node not yet known
// to the meta leader, a restarted node catching up) fails with "no suitable peers for placement"
// or "insufficient resources" for a few seconds. A replica starting then waits for the cluster
// instead of exiting.

const PLACEMENT = /no suitable peers for placement|insufficient resources/i;
const RETRY_MS = 500;

export async function whilePlacing<T>(create: () => Promise<T>, opts: { timeoutMs: number; onRetry?: (err: unknown) => void }): Promise<T> {
  const until = Date.now() + opts.timeoutMs;
  for (let warned = false; ; ) {
    try {
      return await create();
    } catch (err) {
      if (!PLACEMENT.test(String((err as Error)?.message ?? err)) || Date.now() > until) throw err;
      if (!warned) opts.onRetry?.(err);
      warned = true;
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}
