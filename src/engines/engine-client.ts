// The one type every wire's client stands behind (http.ts now; grpc.ts and zmq.ts next), so
// engine actors and the coordinator treat connection modes alike. Discovery and liveness only:
// control calls always go over HTTP (control-client.ts), data-plane relays are per wire.

import type { Dispatcher } from 'undici';
import type { ConnectionMode } from '../wire/worker-entry.ts';

/** Raw facts an engine reports about itself; fleet/discovery.ts turns them into labels. */
export interface EngineFacts {
  serverInfo: Record<string, unknown>;
  modelInfo: Record<string, unknown> | null;
  /**
   * The engine's own pause state, where its wire can say it (TokenSpeed's `is_paused`, SGLang's
   * `/ready` on builds that have it); undefined when it cannot. Read at every discovery, so an
   * engine's control state after a restart or a takeover is observed, not assumed.
   */
  paused?: boolean;
}

export interface EngineClient {
  readonly mode: ConnectionMode;
  readonly url: string;
  discover(signal: AbortSignal): Promise<EngineFacts>;
  /**
   * Resolves when the engine answers its liveness check; rejects otherwise. `quiet` asks for a
   * check that runs no generation (a paused engine would hold one until it is resumed); it may
   * also say whether the engine is paused, where the wire can tell. `skipped`: no probe was sent
   * this round (the connection was busy with a control call), which is neither a success nor a failure.
   */
  probe(signal: AbortSignal, quiet?: boolean): Promise<void | { paused?: boolean; skipped?: boolean }>;
  /**
   * The connection pool that reaches `url`'s origin, when this client already holds one (an
   * HTTP engine's control calls then share its probes' connection: one socket per engine, not two).
   */
  poolFor?(url: string): Dispatcher | undefined;
  /**
   * Whether the engine is paused, read now on a connection no probe holds (undefined: the wire
   * cannot tell). A paused engine holds a generating probe, and with it the probes' connection.
   */
  pauseState?(signal: AbortSignal): Promise<boolean | undefined>;
  close(): Promise<void>;
}
