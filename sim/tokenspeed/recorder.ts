// What the simulator saw, for tests: a bounded record of every control-app request (method, path,
// query, headers, body, HTTP version) and of every gRPC call (method, metadata, decoded request).
// It never answers anything and never stores the admin routes' traffic.

import type { RecordedRequest } from '../request-record.ts';
/** One control-app request: the shape every simulator records requests in. */
export type ControlRecord = RecordedRequest;

export interface RpcRecord {
  seq: number;
  time: string;
  /** Method name, e.g. `Generate`, or `grpc.health.v1.Health/Check`. */
  rpc: string;
  metadata: Record<string, unknown>;
  /** The request as decoded with proto/README.md's loader options. */
  request: unknown;
}

class BoundedLog<T extends { seq: number; time: string }> {
  private items: T[] = [];
  private seq = 0;

  /** limit 0 keeps nothing (benchmarks) but still counts. */
  constructor(private readonly limit: number) {}

  get total(): number {
    return this.seq;
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

export class Recorder {
  readonly control: BoundedLog<ControlRecord>;
  readonly rpcs: BoundedLog<RpcRecord>;

  constructor(limit: number) {
    this.control = new BoundedLog<ControlRecord>(limit);
    this.rpcs = new BoundedLog<RpcRecord>(limit);
  }

  clear(): void {
    this.control.clear();
    this.rpcs.clear();
  }
}
