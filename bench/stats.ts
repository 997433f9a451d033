// Summaries of what the benchmarks measured: percentiles of latency samples (milliseconds) and
// the top frames of a V8 CPU profile. Pure: it never measures, never rounds what it is given and
// never drops samples; rounding is for output only (`rounded`, `ms`).

export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/**
 * Nearest-rank percentile of an ascending array: the smallest sample with at least p% of the
 * samples at or below it. Always a value that was observed (no interpolation), so a p99 over
 * 150 samples is the 149th, not a blend of the two slowest.
 */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  if (!(p > 0)) return sorted[0]!;
  const rank = Math.ceil((Math.min(p, 100) / 100) * sorted.length);
  return sorted[Math.max(0, rank - 1)]!;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  const mean = n === 0 ? Number.NaN : sorted.reduce((s, v) => s + v, 0) / n;
  return {
    n,
    min: n === 0 ? Number.NaN : sorted[0]!,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: n === 0 ? Number.NaN : sorted[n - 1]!,
    mean,
  };
}

/** Rounds every number of a summary to microseconds, for JSON output. */
export function rounded(s: Summary): Summary {
  const r = (v: number) => (Number.isFinite(v) ? Math.round(v * 1000) / 1000 : v);
  return { n: s.n, min: r(s.min), p50: r(s.p50), p90: r(s.p90), p99: r(s.p99), max: r(s.max), mean: r(s.mean) };
}

/** A millisecond value for a table cell: two decimals below 10 ms, one above. */
export function ms(v: number): string {
  if (!Number.isFinite(v)) return '–';
  return Math.abs(v) < 10 ? v.toFixed(2) : v.toFixed(1);
}

/** The parts of a V8 `.cpuprofile` (node --cpu-prof) that a self-time table needs. */
export interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }>;
  samples: number[];
  timeDeltas: number[];
}

/**
 * Where a CPU profile's busy time went, as text: the `limit` frames with the most self time, then
 * self time by module (a package, a file of ours, or node's internals when nothing else called).
 * Native and node-library frames (socket writes, JSON, timers) are charged to the module that
 * called them: a `writeBuffer` under nats-core counts as nats-core's.
 */
export function profileSummary(profile: CpuProfile, limit: number): string {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const frameOf = (id: number): string => {
    const { functionName, url, lineNumber } = byId.get(id)?.callFrame ?? { functionName: '?', url: '', lineNumber: 0 };
    return `${functionName || '(anonymous)'}${url ? ` ${shortUrl(url)}:${lineNumber + 1}` : ''}`;
  };
  // The owner of a sample: the nearest frame that is neither native nor node's own library, so
  // a socket write is charged to nats-core or undici, not to net.Socket.
  const moduleOf = (id: number): string => {
    let fallback: string | undefined;
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const cf = byId.get(at)?.callFrame;
      if (cf && /^\((garbage collector|idle|program)\)$/.test(cf.functionName)) return cf.functionName;
      if (!cf?.url) continue;
      if (!cf.url.startsWith('node:')) return moduleName(cf.url);
      fallback ??= moduleName(cf.url);
    }
    return fallback ?? '(native, no caller)';
  };
  const self = new Map<string, number>();
  const modules = new Map<string, number>();
  let total = 0;
  // timeDeltas[i] is the time (µs) before sample i; it is charged to the frame sampled.
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    total += us;
    const f = frameOf(id);
    self.set(f, (self.get(f) ?? 0) + us);
    const m = moduleOf(id);
    modules.set(m, (modules.get(m) ?? 0) + us);
  });
  const idle = self.get('(idle)') ?? 0;
  const busy = Math.max(1, total - idle);
  const table = (m: Map<string, number>) =>
    [...m]
      .filter(([k]) => k !== '(idle)')
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([k, us]) => `${(us / 1000).toFixed(1).padStart(9)} ms ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${k}`);
  return [
    `total ${(total / 1000).toFixed(0)} ms, idle ${(idle / 1000).toFixed(0)} ms, busy ${(busy / 1000).toFixed(0)} ms`,
    'self time by frame:',
    ...table(self),
    'self time by module (native and node: frames charged to their caller):',
    ...table(modules),
  ].join('\n');
}

function shortUrl(url: string): string {
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) return url.slice(nm + 1);
  const ours = url.match(/\/(src|actors|bench)\/.*$/);
  return ours ? ours[0].slice(1) : url;
}

function moduleName(url: string): string {
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 14).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[0] === 'internal' ? url.slice(5).split('/').slice(0, 2).join('/') : url.slice(5)}`;
  const ours = url.match(/\/(src|actors|bench)\/.*$/);
  return ours ? ours[0].slice(1) : url;
}
