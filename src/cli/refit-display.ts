// Shows one refit's progress as its events come (used by `rlgate refit` and `rlgate trainer`, on
// stderr so that the report on stdout stays parseable): on a terminal, a live view redrawn in place
// (refit-view.ts, terminal.ts) with the elapsed time ticking; elsewhere, one line per event. It
// reads events; it subscribes to nothing itself.

import { applyRefitEvent, newRefitProgress, type RefitProgress } from './refit-progress.ts';
import { eventLine, progressLines } from './refit-view.ts';
import { isTerminal, LiveRegion, type TerminalStream } from './terminal.ts';

const TICK_MS = 200;

export interface RefitDisplay {
  readonly progress: RefitProgress;
  /** One event off `<root>.refit.<id>.events` (another refit's is ignored). */
  event(data: unknown): void;
  /** A line of the command's own (a reconnect, a retry), above the live view or among the lines. */
  note(line: string): void;
  /**
   * Shows `report` (the refit's answer) unless an event brought it already, then stops: the last
   * frame stays on screen, and nothing is drawn after.
   */
  close(report?: unknown): void;
}

export interface RefitDisplayOptions {
  /** Draw the live view (default: when the stream is a terminal). */
  live?: boolean;
  /** Print nothing at all (`--quiet`). */
  quiet?: boolean;
}

export function refitDisplay(refitId: string, stream: TerminalStream, opts: RefitDisplayOptions = {}): RefitDisplay {
  const progress = newRefitProgress(refitId);
  // The answer's report as the event that would have brought it.
  const last = (report: unknown) => {
    const r = report as { engines?: unknown } | null;
    return progress.report || !r || typeof r !== 'object' || !Array.isArray(r.engines)
      ? null
      : { refit_id: refitId, type: 'report', time: new Date().toISOString(), report };
  };
  if (opts.quiet) {
    return { progress, event: (data) => void applyRefitEvent(progress, data), note: () => {}, close: () => {} };
  }
  if (!(opts.live ?? isTerminal(stream))) {
    let closed = false;
    return {
      progress,
      event(data) {
        if (applyRefitEvent(progress, data) && !closed) stream.write(`${eventLine(data as Record<string, unknown>)}\n`);
      },
      note: (line) => void (closed || stream.write(`${line}\n`)),
      close(report) {
        const event = closed ? null : last(report);
        if (event) this.event(event);
        closed = true;
      },
    };
  }
  const started = Date.now();
  let finishedAt: number | undefined;
  const region = new LiveRegion(stream, (size) => progressLines(progress, size, (finishedAt ?? Date.now()) - started), { boldFirstLine: true });
  const ticker = setInterval(() => region.refresh(), TICK_MS);
  region.flush();
  return {
    progress,
    event(data) {
      if (!applyRefitEvent(progress, data)) return;
      if (progress.report) finishedAt ??= Date.now();
      region.refresh();
    },
    note: (line) => region.print(line),
    close(report) {
      const event = last(report);
      if (event) this.event(event);
      clearInterval(ticker);
      finishedAt ??= Date.now();
      region.close();
    },
  };
}
