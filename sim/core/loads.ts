// The answer of SGLang's `/v1/loads` (and TokenSpeed's GetLoads, which mirrors it) around the
// per-rank loads a simulator builds: the rank count and the `aggregate` totals SMG's router and
// slime read. Pure shaping; each simulator builds its own ranks.

/** The fields of one rank's load that the aggregate sums. */
export interface RankLoadFields {
  num_running_reqs: number;
  num_waiting_reqs: number;
  token_usage: number;
}

export function loadsAnswer<L extends RankLoadFields>(loads: L[], version: string, maxRunningRequests: number): Record<string, unknown> {
  const running = loads.reduce((a, l) => a + l.num_running_reqs, 0);
  const waiting = loads.reduce((a, l) => a + l.num_waiting_reqs, 0);
  const usage = loads.length ? loads.reduce((a, l) => a + l.token_usage, 0) / loads.length : 0;
  return {
    timestamp: new Date().toISOString(),
    version,
    dp_rank_count: loads.length,
    loads,
    aggregate: {
      total_running_reqs: running,
      total_waiting_reqs: waiting,
      total_reqs: running + waiting,
      avg_token_usage: usage,
      avg_throughput: 0,
      avg_utilization: running / (maxRunningRequests * Math.max(1, loads.length)),
    },
  };
}
