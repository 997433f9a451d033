// What a simulator saw, for tests: bounded logs of what it was sent (every simulator records the
// HTTP requests on its non-admin paths in one shape, its `GET /_sim/requests` answer) and the
// in-flight/peak concurrency counters gateway tests read fan-out caps from. It never answers
// anything and never stores the admin routes' traffic.

import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';

/** One HTTP request as every simulator records it. */
export interface RecordedRequest {
  /** 1-based arrival order since start (not reset by clearing). */
  seq: number;
  /** ISO-8601 arrival time. */
  time: string;
  method: string;
  path: string;
  /** Raw query string without '?', '' when absent. */
  query: string;
  headers: IncomingHttpHeaders;
  /** Body as UTF-8 text ('' when there was none). */
  body: string;
  bodyBytes: number;
  httpVersion: string;
  /** The client's port: requests with the same one came over the same connection. */
  remotePort?: number;
}

/** The newest `limit` records, numbered in arrival order. */
export class BoundedLog<T extends { seq: number; time: string }> {
  private items: T[] = [];
  private seq = 0;

  /** limit 0 keeps nothing (benchmarks) but still counts. */
  constructor(private readonly limit: number) {}

  get enabled(): boolean {
    return this.limit > 0;
  }

  get total(): number {
    return this.seq;
  }

  /** Counts a record without keeping it (recording disabled). */
  count(): void {
    this.seq++;
  }

  add(item: Omit<T, 'seq' | 'time'>): void {
    this.seq++;
    if (this.limit <= 0) return;
    this.items.push({ seq: this.seq, time: new Date().toISOString(), ...item } as T);
    // Trim in chunks so a full buffer costs O(1) amortised per record.
    if (this.items.length > this.limit + 1024) this.items = this.items.slice(-this.limit);
  }

  list(): T[] {
    return this.items.length > this.limit ? this.items.slice(-this.limit) : this.items.slice();
  }

  clear(): void {
    this.items = [];
  }
}

/** The HTTP requests a simulator was sent. */
export class RequestLog extends BoundedLog<RecordedRequest> {
  record(req: IncomingMessage, method: string, path: string, query: string, body: Buffer): void {
    // Counted only when nothing is kept: no record object per request in the benchmarks.
    if (!this.enabled) return this.count();
    this.add({
      method,
      path,
      query,
      headers: req.headers,
      body: body.toString('utf8'),
      bodyBytes: body.length,
      httpVersion: req.httpVersion,
      remotePort: req.socket.remotePort,
    });
  }
}

/** In-flight requests, overall and for control routes (anything but the data plane). */
export class Concurrency {
  inFlight = 0;
  peak = 0;
  controlInFlight = 0;
  controlPeak = 0;

  /** Counts one request in; the returned function counts it out (idempotent). */
  enter(control: boolean): () => void {
    this.inFlight++;
    if (this.inFlight > this.peak) this.peak = this.inFlight;
    if (control) {
      this.controlInFlight++;
      if (this.controlInFlight > this.controlPeak) this.controlPeak = this.controlInFlight;
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.inFlight--;
      if (control) this.controlInFlight--;
    };
  }

  /** Peaks restart from what is in flight now. */
  resetPeaks(): void {
    this.peak = this.inFlight;
    this.controlPeak = this.controlInFlight;
  }
}
