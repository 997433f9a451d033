// What the simulator saw, for tests: the control app's requests (sim/core/recorder.ts: the shape
// every simulator records requests in) and every gRPC call (method, metadata, decoded request).
// It never answers anything and never stores the admin routes' traffic.

import { BoundedLog, RequestLog } from '../core/recorder.ts';

export interface RpcRecord {
  seq: number;
  time: string;
  /** Method name, e.g. `Generate`, or `grpc.health.v1.Health/Check`. */
  rpc: string;
  metadata: Record<string, unknown>;
  /** The request as decoded with proto/README.md's loader options. */
  request: unknown;
}

export class Recorder {
  readonly control: RequestLog;
  readonly rpcs: BoundedLog<RpcRecord>;

  constructor(limit: number) {
    this.control = new RequestLog(limit);
    this.rpcs = new BoundedLog<RpcRecord>(limit);
  }

  clear(): void {
    this.control.clear();
    this.rpcs.clear();
  }
}
