// SMG's `least_load`: the engine with the least expected wait, its queued and in-flight token work
// over its throughput plus a KV-pressure barrier that grows without bound as its cache fills:
//
//   score = (queued_tokens + inflight_tokens) / throughput + kv_pressure_weight · k / (1 − k)
//
// SMG reads the engines' reports (queued tokens, KV use k, throughput) from a load poll. Where no
// engine reports (every rlgate wire today), it is SMG's "dark fleet" case: the fewest requests in
// flight from this replica, the first on a tie. Where some report, one that does not is scored by
// its requests in flight at the mean prefill over the fleet's mean throughput, as SMG does.
// In-flight token work is what this replica routed and has not finished: the prompt's token count
// when the request carries ids, else the mean prefill (SMG counts it since the last poll instead).

import { leastLoaded } from './least-loaded.ts';
import type { Candidate, Decision, LoadReport, PolicyRequest, RoutingInputs, RoutingPolicy } from './policy.ts';

/** SMG's defaults (`--least-load-*`; rlgate takes no flag for them yet). */
export const LEAST_LOAD_DEFAULTS = { kvPressureWeight: 0.15, meanPrefillTokens: 1024, defaultThroughput: 2000 } as const;

export class LeastLoadPolicy implements RoutingPolicy {
  readonly name = 'least_load';
  readonly needsPrompt = true;
  /** Worker id → token work routed there and not finished. */
  private readonly inflightTokens = new Map<string, number>();

  constructor(private readonly settings: { kvPressureWeight: number; meanPrefillTokens: number; defaultThroughput: number } = LEAST_LOAD_DEFAULTS) {}

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates } = req;
    const reports = req.report ? candidates.map((c) => req.report!(c.id)) : [];
    if (candidates.length === 1 || !reports.some((r) => r !== undefined)) return { worker: leastLoaded(candidates, req.inFlight), reason: 'min_load' };
    const rates = reports.map((r) => r?.throughput ?? 0).filter((t) => t > 0);
    const nominal = rates.length > 0 ? rates.reduce((s, t) => s + t, 0) / rates.length : this.settings.defaultThroughput;
    let best = 0;
    let bestScore = Number.POSITIVE_INFINITY;
    candidates.forEach((c, i) => {
      const s = this.score(c.id, reports[i], req.inFlight(c.id), nominal);
      if (s < bestScore) {
        best = i;
        bestScore = s;
      }
    });
    return { worker: candidates[best]!, reason: 'min_load' };
  }

  routed(workerId: string, inputs: RoutingInputs): void {
    this.inflightTokens.set(workerId, (this.inflightTokens.get(workerId) ?? 0) + this.work(inputs));
  }

  finished(workerId: string, inputs: RoutingInputs): void {
    const left = (this.inflightTokens.get(workerId) ?? 0) - this.work(inputs);
    if (left > 0) this.inflightTokens.set(workerId, left);
    else this.inflightTokens.delete(workerId);
  }

  workerRemoved(workerId: string): void {
    this.inflightTokens.delete(workerId);
  }

  private score(id: string, report: LoadReport | undefined, inFlight: number, nominal: number): number {
    const { kvPressureWeight, meanPrefillTokens, defaultThroughput } = this.settings;
    if (!report) return (inFlight * meanPrefillTokens) / nominal;
    const throughput = report.throughput !== undefined && report.throughput > 0 ? report.throughput : defaultThroughput;
    const k = Math.min(0.999, Math.max(0, report.kvUsage ?? 0));
    return ((report.queuedTokens ?? 0) + (this.inflightTokens.get(id) ?? 0)) / throughput + (kvPressureWeight * k) / (1 - k);
  }

  private work(inputs: RoutingInputs): number {
    return inputs.tokens?.length ?? this.settings.meanPrefillTokens;
  }
}
