// Drawing on a terminal: whether a stream is one, its size, and a live region of lines redrawn in
// place with ANSI escapes (no dependency). It draws whatever lines it is given; what they say is
// the caller's (refit-view.ts, fleet-table.ts). It never reads input and never uses colour.

const ESC = '\x1b[';
const HIDE_CURSOR = `${ESC}?25l`;
const SHOW_CURSOR = `${ESC}?25h`;
const CLEAR_LINE_END = `${ESC}K`;
const CLEAR_BELOW = `${ESC}J`;
const HOME_AND_CLEAR = `${ESC}H${ESC}2J`;
const BOLD = `${ESC}1m`;
const PLAIN = `${ESC}0m`;

/** The size assumed when a terminal does not say (a pseudo-terminal may report 0 × 0). */
export const FALLBACK_SIZE = { columns: 80, rows: 24 } as const;

export interface TerminalSize {
  columns: number;
  rows: number;
}

/** Only what the region needs of a stream (process.stdout, process.stderr). */
export interface TerminalStream {
  isTTY?: boolean;
  columns?: number;
  rows?: number;
  write(chunk: string): boolean;
  on?(event: 'resize', listener: () => void): unknown;
  off?(event: 'resize', listener: () => void): unknown;
}

/** A terminal that can take cursor movement: a TTY, unless TERM says it cannot (`dumb`). */
export function isTerminal(stream: TerminalStream, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && env.TERM !== 'dumb';
}

export function terminalSize(stream: TerminalStream): TerminalSize {
  const columns = stream.columns && stream.columns > 0 ? stream.columns : FALLBACK_SIZE.columns;
  const rows = stream.rows && stream.rows > 0 ? stream.rows : FALLBACK_SIZE.rows;
  return { columns, rows };
}

/**
 * `text` cut to `width` characters, its last one an ellipsis when cut. Lines hold no escapes
 * (the region adds its own), so a character is a column.
 */
export function fit(text: string, width: number): string {
  if (width <= 0) return '';
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;
}

/** Draws the frame for the space given (columns per line, rows in all). */
export type Frame = (size: TerminalSize) => string[];

/** At most this often a region redraws on `refresh()`: a burst of changes becomes one frame. */
const FRAME_MS = 50;

/**
 * Lines at the bottom of the output, redrawn in place: each frame goes out in one write, every line
 * overwritten and cleared to its end rather than the whole region erased first (no flicker), and
 * only when it differs from the last. Lines are cut one column short of the width (a full line
 * would wrap, and the cursor arithmetic with it) and the region keeps one row of the height free.
 * `print` puts a permanent line above the region. The first line can be bold (a header).
 */
export class LiveRegion {
  /** Rows the last frame took (the cursor sits at the end of its last one). */
  private drawn = 0;
  private last: string[] = [];
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly onResize = () => this.resized();
  private readonly restoreCursor = () => this.stream.write(SHOW_CURSOR);
  /**
   * Ctrl-C gives the cursor back too. A command that handles the signal itself (watch) goes on
   * and closes the region; for one that does not, the signal is raised again, unheld, so that the
   * process ends as it would have.
   */
  private readonly onSignal = (signal: NodeJS.Signals) => {
    this.restoreCursor();
    if (process.listenerCount(signal) > 1) return;
    this.detach();
    process.kill(process.pid, signal);
  };

  constructor(
    private readonly stream: TerminalStream,
    private readonly frame: Frame,
    private readonly opts: { boldFirstLine?: boolean } = {},
  ) {
    stream.on?.('resize', this.onResize);
    // A process that ends by any path gives its cursor back.
    process.once('exit', this.restoreCursor);
    process.on('SIGINT', this.onSignal);
    process.on('SIGTERM', this.onSignal);
  }

  /** The space a frame may take: columns usable per line, rows usable in all. */
  size(): TerminalSize {
    const { columns, rows } = terminalSize(this.stream);
    return { columns: Math.max(1, columns - 1), rows: Math.max(1, rows - 1) };
  }

  /** Draws again soon (changes that come together are drawn once). */
  refresh(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, FRAME_MS);
  }

  /** Draws now. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed) return;
    const size = this.size();
    const lines = this.frame(size)
      .slice(0, size.rows)
      .map((l) => fit(l, size.columns));
    if (lines.length === this.last.length && lines.every((l, i) => l === this.last[i])) return;
    this.stream.write(`${HIDE_CURSOR}${this.toTop()}${this.body(lines)}${CLEAR_BELOW}`);
    this.last = lines;
    this.drawn = lines.length;
  }

  /** A permanent line above the region (which is drawn again below it). */
  print(line: string): void {
    if (this.closed) {
      this.stream.write(`${line}\n`);
      return;
    }
    this.stream.write(`${HIDE_CURSOR}${this.toTop()}${line}${CLEAR_LINE_END}\n${this.body(this.last)}${CLEAR_BELOW}`);
    this.drawn = this.last.length;
  }

  /** Draws the last frame, and leaves it on screen with the cursor below it, visible. */
  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.detach();
    this.stream.write(`${this.drawn > 0 ? '\n' : ''}${SHOW_CURSOR}`);
  }

  private detach(): void {
    this.stream.off?.('resize', this.onResize);
    process.off('exit', this.restoreCursor);
    process.off('SIGINT', this.onSignal);
    process.off('SIGTERM', this.onSignal);
  }

  private body(lines: string[]): string {
    return lines.map((l, i) => (i === 0 && this.opts.boldFirstLine ? `${BOLD}${l}${PLAIN}` : l) + CLEAR_LINE_END).join('\n');
  }

  /** From the end of the last frame back to its first column and first row. */
  private toTop(): string {
    return this.drawn > 1 ? `\r${ESC}${this.drawn - 1}A` : '\r';
  }

  /**
   * Lines wrapped by a narrower terminal no longer count one row each: start again from a clean
   * screen rather than guess how far up the last frame begins.
   */
  private resized(): void {
    if (this.closed) return;
    this.stream.write(HOME_AND_CLEAR);
    this.drawn = 0;
    this.last = [];
    this.flush();
  }
}
