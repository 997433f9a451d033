// One engine's state as the fleet shares it: what its owner last observed, in the `engines`
// bucket (and, as an event, on `rl.engine.<id>.state`). Replicas that do not own the engine route
// and list it from this record; `rlgate watch` starts from these records. Never a secret.

import type { EngineStateEvent } from './state-publisher.ts';

export interface EngineRecord extends EngineStateEvent {
  /** The replica whose actor wrote it. */
  owner: string;
}

/** What a replica that does not own an engine tells its owner: a data-plane result, a local write. */
export type EngineNotice =
  | { kind: 'dp'; ok: boolean }
  | { kind: 'version'; version: string; source: 'api' | 'passthrough' | 'registration' }
  | { kind: 'control'; control: 'active' | 'paused' | 'asleep' }
  | { kind: 'quarantine'; reason: string | null };
