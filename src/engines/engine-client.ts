// The one type every wire's client stands behind (http.ts now; grpc.ts and zmq.ts next), so
// engine actors and the coordinator treat connection modes alike. Discovery and liveness only:
// control calls always go over HTTP (control-client.ts), data-plane relays are per wire.

import type { ConnectionMode } from '../fleet/worker.ts';

/** Raw facts an engine reports about itself; fleet/discovery.ts turns them into labels. */
export interface EngineFacts {
  serverInfo: Record<string, unknown>;
  modelInfo: Record<string, unknown> | null;
}

export interface EngineClient {
  readonly mode: ConnectionMode;
  readonly url: string;
  discover(signal: AbortSignal): Promise<EngineFacts>;
  /** Resolves when the engine answers its liveness check; rejects otherwise. */
  probe(signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
}
