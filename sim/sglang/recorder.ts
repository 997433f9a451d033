// What the simulator saw: a bounded record of every request on a non-`/_sim` path (method, path,
// query, headers, body, HTTP version, time) and in-flight/peak concurrency counters, so gateway
// tests can assert forwarded bytes and fan-out caps. It never answers requests.

import type { RecordedRequest } from '../request-record.ts';

export type { RecordedRequest } from '../request-record.ts';

export class RequestRecorder {
  private records: RecordedRequest[] = [];
  private seq = 0;

  /** limit 0 disables recording (benchmarks); otherwise only the newest `limit` are kept. */
  constructor(private readonly limit: number) {}

  get enabled(): boolean {
    return this.limit > 0;
  }

  get total(): number {
    return this.seq;
  }

  /** Counts a request without keeping it (recording disabled). */
  count(): void {
    this.seq++;
  }

  add(r: Omit<RecordedRequest, 'seq' | 'time'>): void {
    this.seq++;
    if (this.limit <= 0) return;
    this.records.push({ seq: this.seq, time: new Date().toISOString(), ...r });
    // Trim in chunks so the amortised cost of a full buffer stays O(1) per request.
    if (this.records.length > this.limit + 1024) this.records = this.records.slice(-this.limit);
  }

  list(): RecordedRequest[] {
    return this.records.length > this.limit ? this.records.slice(-this.limit) : this.records.slice();
  }

  clear(): void {
    this.records = [];
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
