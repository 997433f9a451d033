// The liveness loop an engine actor runs while it rests (`serving`, `paused`, `asleep`): one probe
// per interval (with jitter) through the engine's current client, reported as `probe.ok` / `probe.failed`; a
// quiet probe (no generation) while paused or asleep. Stops (and aborts a probe in flight) when
// the actor leaves the state.

import type { EngineClient } from '../engines/engine-client.ts';

export type ProbeEvent = { type: 'probe.ok'; paused?: boolean } | { type: 'probe.failed'; error: string };

/**
 * `intervalOf` is read before each probe (the gateway stretches it as the fleet grows); a probe
 * that takes longer than `timeoutMs` (the configured interval) is a failure.
 */
export function probeLoop(
  clientOf: () => EngineClient | undefined,
  intervalOf: () => number,
  timeoutMs: number,
  sendBack: (e: ProbeEvent) => void,
  quiet = false,
): () => void {
  if (timeoutMs <= 0) return () => {};
  let stopped = false;
  let ctrl: AbortController | undefined;
  let handle: NodeJS.Timeout | undefined;
  const tick = async () => {
    if (stopped) return;
    const client = clientOf();
    if (client) {
      ctrl = new AbortController();
      // A probe that outlives its interval (SGLang's /health runs a generation) is a failure.
      const timer = setTimeout(() => ctrl?.abort(), Math.max(1000, timeoutMs));
      try {
        const seen = await client.probe(ctrl.signal, quiet);
        if (!stopped && !(seen && seen.skipped)) sendBack(seen && seen.paused !== undefined ? { type: 'probe.ok', paused: seen.paused } : { type: 'probe.ok' });
      } catch (err) {
        if (!stopped) sendBack({ type: 'probe.failed', error: String((err as Error)?.message ?? err) });
      } finally {
        clearTimeout(timer);
      }
    }
    if (!stopped) handle = setTimeout(tick, jittered(intervalOf()));
  };
  // A fleet registered at once must not be probed at once: the first probe comes at a random
  // point of the first interval, and every later one within ±20% of the interval.
  handle = setTimeout(tick, Math.random() * intervalOf());
  return () => {
    stopped = true;
    clearTimeout(handle);
    ctrl?.abort();
  };
}

function jittered(intervalMs: number): number {
  return intervalMs * (0.8 + 0.4 * Math.random());
}
