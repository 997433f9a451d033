// What `rlgate watch` knows of the fleet, and how it says it: one row per engine (the shared
// `engines` bucket's records, then every `<root>.engine.*.state` event), the refits running now
// (their events: which refit and which step touches each engine), a transition as one line, and
// the whole fleet as a table for a given width and height. Pure: it prints nothing.

import type { EngineStateEvent } from '../wire/engine-state.ts';
import { applyRefitEvent, newRefitProgress, refitIdOf, stepLabel, type RefitProgress } from './refit-progress.ts';
import { fit } from './terminal.ts';

/** A state event, or a record of the `engines` bucket (which also names the owning replica). */
export type EngineRow = EngineStateEvent & { owner?: string };

/** The refit that holds an engine now, and where the engine is in it. */
export interface RefitTouch {
  refitId: string;
  step: string;
}

export class FleetWatch {
  readonly engines = new Map<string, EngineRow>();
  /** Refits seen and not over yet, by id. */
  readonly refits = new Map<string, RefitProgress>();

  /**
   * A state event or a bucket record. Of two views of one engine the later one wins (events and
   * records travel apart); the owner comes from records, which alone carry it.
   */
  engine(e: EngineRow): void {
    const row = this.engines.get(e.id);
    if (row && typeof row.time === 'string' && typeof e.time === 'string' && e.time < row.time) {
      if (e.owner) row.owner = e.owner;
      return;
    }
    this.engines.set(e.id, { ...e, owner: e.owner ?? row?.owner });
  }

  remove(id: string): void {
    this.engines.delete(id);
  }

  /** One refit event; a refit is forgotten at its report. Returns whether anything changed. */
  refitEvent(data: unknown): boolean {
    const id = refitIdOf(data);
    if (!id) return false;
    if ((data as { type?: unknown }).type === 'report') return this.refits.delete(id);
    let p = this.refits.get(id);
    if (!p) this.refits.set(id, (p = newRefitProgress(id)));
    return applyRefitEvent(p, data);
  }

  /** The running refit (else a queued one) that includes this engine, and the engine's step in it. */
  touch(workerId: string): RefitTouch | null {
    let found: RefitTouch | null = null;
    for (const p of this.refits.values()) {
      const e = p.engines.get(workerId);
      if (!e) continue;
      let step: string;
      if (e.phase === null) step = p.status === 'accepted' || p.status === 'waiting' ? 'queued' : 'waiting';
      else {
        const at = stepLabel(e.phase, e.step, e.stepIndex, p.steps);
        const f = e.failure;
        step =
          e.leg === 'running' ? at : e.leg === 'ok' ? `${at} ok` : `${at} failed${f?.error ? ` ${f.error}` : ''}${f?.status != null ? ` ${f.status}` : ''}`;
      }
      found = { refitId: p.refitId, step };
      if (p.status === 'running') return found;
    }
    return found;
  }
}

/** A value for the `refit=… step=…` suffix: quoted (JSON) when it holds a space. */
const val = (s: string) => (/[\s"=]/.test(s) ? JSON.stringify(s) : s);

/** One engine as a line (the snapshot's rows and every transition), with the refit touching it. */
export function transitionLine(e: EngineRow, touch: RefitTouch | null): string {
  const time = e.time.slice(11, 23);
  const version = e.weight_version ?? '-';
  const extra = e.error ? `  (${e.error})` : '';
  const quarantine = e.quarantine ? ` quarantine=${e.quarantine}` : '';
  const owner = e.owner ? ` owner=${e.owner}` : '';
  const refit = touch ? ` refit=${touch.refitId} step=${val(touch.step)}` : '';
  return `${time}  ${e.url.padEnd(28)} ${e.state.padEnd(12)} control=${e.control.padEnd(6)} version=${version.padEnd(10)} breaker=${e.breaker} in_flight=${e.in_flight}${quarantine}${owner}${refit}${extra}`;
}

interface Column {
  title: string;
  /** Narrowest it gets (the longest usual value), so that columns do not shift as states change. */
  min?: number;
  /** Widest it may get; the last column takes what is left. */
  max: number;
  cell(e: EngineRow, touch: RefitTouch | null): string;
}

const COLUMNS: Column[] = [
  { title: 'ENGINE', max: 40, cell: (e) => e.url },
  { title: 'STATE', min: 'unreachable'.length, max: 24, cell: (e) => (e.quarantine ? `${e.state} (quarantined)` : e.state) },
  { title: 'CONTROL', max: 8, cell: (e) => e.control },
  { title: 'VERSION', max: 16, cell: (e) => e.weight_version ?? '-' },
  { title: 'BREAKER', min: 'half_open'.length, max: 9, cell: (e) => e.breaker },
  { title: 'IN-FLIGHT', max: 9, cell: (e) => String(e.in_flight) },
  { title: 'OWNER', max: 20, cell: (e) => e.owner ?? '-' },
  { title: 'REFIT', max: 36, cell: (_, t) => t?.refitId ?? '-' },
  { title: 'STEP', max: Infinity, cell: (_, t) => t?.step ?? '-' },
];

/**
 * The table: `header`, a line of column titles, then one row per engine (by URL) within `rows`
 * lines of `columns` characters; when the engines do not all fit, the last line counts the rows
 * not shown.
 */
export function tableLines(w: FleetWatch, size: { columns: number; rows: number }, header: string): string[] {
  const engines = [...w.engines.values()].sort((a, b) => (a.url === b.url ? a.id.localeCompare(b.id) : a.url.localeCompare(b.url)));
  const room = Math.max(0, size.rows - 2);
  const shown = engines.length > room ? engines.slice(0, Math.max(0, room - 1)) : engines;
  const cells = shown.map((e) => {
    const touch = w.touch(e.id);
    return COLUMNS.map((c) => c.cell(e, touch));
  });
  const widths = COLUMNS.map((c, i) => Math.min(c.max, Math.max(c.min ?? 0, c.title.length, ...cells.map((r) => r[i]!.length))));
  const line = (r: string[]) =>
    r
      .map((v, i) => (i === r.length - 1 ? v : fit(v, widths[i]!).padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const lines = [header, line(COLUMNS.map((c) => c.title)), ...cells.map(line)];
  const hidden = engines.length - shown.length;
  if (hidden > 0) lines.push(`… ${hidden} more engine${hidden > 1 ? 's' : ''} not shown`);
  return lines.map((l) => fit(l, size.columns));
}
