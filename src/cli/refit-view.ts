// A refit's progress as text: one `key=value` line per event (for logs and grep), and the lines of
// the live view (a header, then one line per engine) for a given width and height. Pure: it turns
// a RefitProgress (refit-progress.ts) or an event into strings and draws nothing.

import { stepLabel, tally, type EngineProgress, type RefitProgress } from './refit-progress.ts';
import { fit } from './terminal.ts';

/** A value for a `key=value` line: quoted (JSON) when it holds a space, a quote or is empty. */
function val(v: unknown): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s === '' || /[\s"=]/.test(s) ? JSON.stringify(s) : s;
}

function pairs(fields: Array<[string, unknown]>): string {
  return fields
    .filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => `${k}=${val(v)}`)
    .join(' ');
}

/** `12:03:04.567` from an ISO time (the event's own clock), or the text as is. */
function clock(time: unknown): string {
  return typeof time === 'string' && time.length >= 23 ? time.slice(11, 23) : String(time ?? '-');
}

const count = (v: unknown) => (Array.isArray(v) ? v.length : undefined);

/** The step of a refit phase (only the refit phase has steps): its name, index and count. */
function stepPairs(e: Record<string, unknown>): Array<[string, unknown]> {
  return e.phase === 'refit'
    ? [
        ['step', e.step],
        ['step_index', e.step_index],
        ['steps', e.steps],
      ]
    : [];
}

/**
 * One line for one refit event, e.g.
 * `12:03:04.567 refit=r1 event=leg phase=refit step="update_weights_from_disk" step_index=0
 * engine=http://h:1 outcome=failed error=upstream_error status=501 latency_ms=4 message="HTTP 501"`.
 */
export function eventLine(event: Record<string, unknown>): string {
  const e = event;
  const head: Array<[string, unknown]> = [
    ['refit', e.refit_id],
    ['event', e.type],
    // A rolling refit's wave: its events on the parent's stream say which.
    ...(e.type !== 'wave' && e.wave !== undefined ? ([['wave', typeof e.wave === 'number' ? e.wave + 1 : e.wave]] as Array<[string, unknown]>) : []),
  ];
  let rest: Array<[string, unknown]>;
  switch (e.type) {
    case 'accepted':
      rest = [
        ['version', e.weight_version],
        ['source', e.source],
        ['selector', e.selector],
        ['targets', count(e.targets)],
        ['skipped', count(e.skipped)],
        ['replica', e.replica],
      ];
      break;
    case 'started':
      rest = [
        ['replica', e.replica],
        ['targets', count(e.targets)],
        ['quorum', e.quorum],
        ['steps', count(e.steps)],
        ['verify', e.verify],
        ['recovered', e.recovered],
      ];
      break;
    case 'phase':
      rest = [['phase', e.phase], ...stepPairs(e), ['targets', count(e.targets)]];
      break;
    case 'leg':
      rest = [
        ['phase', e.phase],
        ...stepPairs(e),
        ['engine', e.url ?? e.worker_id],
        ['outcome', e.outcome],
        ['error', e.error],
        ['status', e.status],
        ['latency_ms', e.latency_ms],
        ['message', e.outcome === 'ok' ? undefined : e.message],
      ];
      break;
    case 'rollout':
      rest = [
        ['waves', count(e.waves)],
        ['max_failed', e.max_failed],
      ];
      break;
    case 'wave':
      rest = [
        ['wave', typeof e.wave === 'number' ? e.wave + 1 : e.wave],
        ['of', e.waves],
        ['status', e.status],
        ['engines', count(e.engines)],
        ['wave_refit', e.wave_refit_id],
        ['drain_ms', e.drain_ms],
        ['drain_timed_out', e.status === 'refitting' ? count(e.drain_timed_out) : undefined],
        ['result', e.result],
      ];
      break;
    case 'takeover':
      rest = [
        ['from', e.from],
        ['to', e.to],
        ['phase', e.phase],
        ['step_index', e.step_index],
      ];
      break;
    case 'report': {
      const r = (e.report ?? {}) as Record<string, unknown>;
      rest = [
        ['status', r.status],
        ['version', r.weight_version],
        ['succeeded', r.succeeded],
        ['total', r.total],
        ['duration_ms', r.duration_ms],
        ['aborted', r.aborted],
      ];
      break;
    }
    default:
      rest = [];
  }
  return `${clock(e.time)} ${pairs([...head, ...rest])}`;
}

/** Seconds with one decimal: `3.2 s`. */
function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
}

function who(e: EngineProgress): string {
  return e.url ?? e.workerId;
}

/** What the engine's line says after its name: how it stands, where, how long, why it failed. */
function engineText(e: EngineProgress, steps: number | null): string {
  const f = e.failure;
  if (f && e.outcome !== 'ok') {
    const code = [f.error, f.status === null ? null : `HTTP ${f.status}`].filter(Boolean).join(' ');
    const why = [code, f.message && !code.includes(f.message) ? f.message : null].filter(Boolean).join(': ');
    return `failed   ${stepLabel(f.phase, f.step, f.stepIndex, steps)}${why ? ` — ${why}` : ''}`;
  }
  const state = e.outcome ?? (e.leg === 'waiting' ? 'waiting' : e.leg === 'running' ? 'running' : 'ok');
  const latency = e.leg !== 'running' && e.latencyMs !== null ? `  ${e.latencyMs} ms` : '';
  return `${state.padEnd(8)} ${e.phase ? stepLabel(e.phase, e.step, e.stepIndex, steps) : ''}${latency}`.trimEnd();
}

/** Failed first, then running, waiting and ok: what the operator must see when not all fit. */
const RANK: Record<string, number> = { failed: 0, running: 1, waiting: 2, ok: 3 };
function rank(e: EngineProgress): number {
  if (e.outcome === 'failed' || (e.outcome === null && e.failure)) return RANK.failed!;
  if (e.outcome === 'ok') return RANK.ok!;
  return RANK[e.leg] ?? 2;
}

/**
 * The live view: a header (refit id, version, elapsed, counts, phase and step), then one line per
 * engine, within `rows` lines of `columns` characters. When the engines do not all fit, the last
 * line counts the ones not shown, and failed and running engines are the ones kept.
 */
export function progressLines(p: RefitProgress, size: { columns: number; rows: number }, elapsedMs: number): string[] {
  const t = tally(p);
  const step = p.report ? String(p.status) : p.phase ? stepLabel(p.phase, p.step, p.stepIndex, p.steps) : p.status;
  // A rolling refit says which wave runs, and whether it is still draining.
  const wave = p.wave && !p.report ? `wave ${p.wave.index + 1}/${p.wave.of}${p.wave.status === 'draining' ? ' draining' : ''} · ` : '';
  const where = `${wave}${step}`;
  const counts = [`${t.ok} ok`, `${t.failed} failed`, t.running ? `${t.running} running` : null].filter(Boolean).join(', ');
  const extra = [p.skipped ? `${p.skipped} skipped` : null, p.takeovers ? `${p.takeovers} takeover${p.takeovers > 1 ? 's' : ''}` : null].filter(Boolean);
  // The long part (a step's name) goes last: a narrow terminal cuts it, not the counts.
  const header = `refit ${p.refitId} → version ${p.weightVersion ?? '?'} · ${seconds(elapsedMs)} · ${counts} of ${t.total}${extra.length ? ` (${extra.join(', ')})` : ''} · ${where}`;
  let engines = [...p.engines.values()];
  const room = Math.max(0, size.rows - 1);
  let hidden = 0;
  if (engines.length > room) {
    const keep = Math.max(0, room - 1);
    const kept = new Set([...engines].sort((a, b) => rank(a) - rank(b)).slice(0, keep));
    hidden = engines.length - kept.size;
    engines = engines.filter((e) => kept.has(e));
  }
  const width = Math.min(Math.max(0, ...engines.map((e) => who(e).length)), Math.max(12, Math.floor(size.columns / 2)));
  const lines = [header, ...engines.map((e) => `  ${fit(who(e), width).padEnd(width)}  ${engineText(e, p.steps)}`)];
  if (hidden > 0) lines.push(`  … ${hidden} more engine${hidden > 1 ? 's' : ''} not shown`);
  return lines.map((l) => fit(l, size.columns));
}
