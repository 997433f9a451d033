// A refit report as a person reads it: one headline, then one line per engine (ok, failed with
// the phase, step and error, or skipped with the reason). Pure; it reads the report's documented
// fields and prints nothing itself. Anything that is not a report gives its JSON on one line.

interface EngineLine {
  worker_id?: string;
  url?: string;
  outcome?: string;
  failed_phase?: string;
  failed_step?: string;
  error?: string;
  status?: number;
  message?: string;
  phases?: Record<string, number | null>;
  rank_offset?: number;
  weight_version?: string | null;
}

interface ReportLike {
  id?: string;
  status?: string;
  weight_version?: string;
  total?: number;
  succeeded?: number;
  duration_ms?: number;
  world_size?: number;
  aborted?: string;
  engines?: EngineLine[];
  skipped?: Array<{ worker_id?: string; url?: string; reason?: string; message?: string }>;
}

const PHASES = ['pause', 'refit', 'verify', 'resume'] as const;

export function reportLines(report: unknown): string[] {
  const r = report as ReportLike | null;
  if (!r || typeof r !== 'object' || !Array.isArray(r.engines)) return [JSON.stringify(report)];
  const extra = [
    r.world_size === undefined ? undefined : `world_size ${r.world_size}`,
    r.duration_ms === undefined ? undefined : `${r.duration_ms} ms`,
    r.aborted ? `aborted: ${r.aborted}` : undefined,
  ].filter(Boolean);
  const lines = [
    `refit ${r.id ?? '?'} to version ${r.weight_version ?? '?'}: ${r.status ?? '?'}, ${r.succeeded ?? '?'} of ${r.total ?? r.engines.length} engines` +
      (extra.length ? ` (${extra.join(', ')})` : ''),
  ];
  const width = Math.max(0, ...r.engines.map((e) => (e.url ?? e.worker_id ?? '').length), ...(r.skipped ?? []).map((s) => (s.url ?? s.worker_id ?? '').length));
  const who = (e: { url?: string; worker_id?: string }) => (e.url ?? e.worker_id ?? '?').padEnd(width);
  for (const e of r.engines) {
    if (e.outcome === 'ok') {
      const times = PHASES.filter((p) => typeof e.phases?.[p] === 'number')
        .map((p) => `${p} ${e.phases![p]} ms`)
        .join(', ');
      const rank = e.rank_offset === undefined ? '' : `  rank_offset ${e.rank_offset}`;
      lines.push(`  ok       ${who(e)}  version ${e.weight_version ?? '?'}${rank}${times ? `  ${times}` : ''}`);
    } else {
      const where = [e.failed_phase, e.failed_step ? `(${e.failed_step})` : undefined].filter(Boolean).join(' ');
      const code = [e.error, e.status === undefined ? undefined : `HTTP ${e.status}`].filter(Boolean).join(' ');
      lines.push(`  failed   ${who(e)}  ${[where, code].filter(Boolean).join(': ') || 'not refitted'}${e.message ? ` — ${e.message}` : ''}`);
    }
  }
  for (const s of r.skipped ?? []) lines.push(`  skipped  ${who(s)}  ${s.reason ?? '?'}${s.message ? ` — ${s.message}` : ''}`);
  return lines;
}
