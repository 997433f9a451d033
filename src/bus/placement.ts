// Creating a replicated stream or bucket on a cluster that is still forming (a node not yet known
// to the meta leader, a restarted node catching up, two replicas creating the same R3 streams at
// once) fails with "no suitable peers for placement" or "insufficient resources", or its JetStream
// API request times out, for a few seconds. A replica starting then waits for the cluster instead
// of exiting. Creating a stream or bucket with the same config again is harmless, so it is retried.

const SETTLING = /no suitable peers for placement|insufficient resources|timeout|timed out/i;
const RETRY_MS = 500;

/** Whether a failed create is the cluster settling (worth trying again) rather than a refusal. */
export function clusterSettling(err: unknown): boolean {
  const e = err as { message?: unknown; name?: unknown } | undefined;
  return SETTLING.test(String(e?.message ?? err)) || e?.name === 'TimeoutError';
}

export async function whilePlacing<T>(create: () => Promise<T>, opts: { timeoutMs: number; what?: string; onRetry?: (err: unknown) => void }): Promise<T> {
  const until = Date.now() + opts.timeoutMs;
  for (let warned = false; ; ) {
    try {
      return await create();
    } catch (err) {
      if (!clusterSettling(err)) throw err;
      if (Date.now() > until) {
        throw new Error(
          `NATS JetStream did not let this replica create ${opts.what ?? 'its streams'} within ${Math.round(opts.timeoutMs / 1000)} s: ${(err as Error)?.message ?? String(err)}`,
          { cause: err },
        );
      }
      if (!warned) opts.onRetry?.(err);
      warned = true;
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
}
