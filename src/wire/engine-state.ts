// One engine's state as its owner shares it: the event on `<root>.engine.<id>.state` at each
// change, and the same facts with the owner in the `engines` bucket, keyed by worker id, where
// replicas that do not own the engine route and list it from, and `rlgate watch` starts from.
// Never a secret: no api key, no control-app key. Shapes only: src/fleet/state-publisher.ts
// writes both.

export interface EngineStateEvent {
  id: string;
  url: string;
  state: string;
  control: string;
  weight_version: string | null;
  version_source: string | null;
  breaker: string;
  /** Why the engine is quarantined (no traffic under any version policy), or null. */
  quarantine: string | null;
  /** Who paused it, while paused: `refit:<id>` or `operator`; null when unknown or not paused. */
  paused_by?: string | null;
  in_flight: number;
  queued: number;
  error: string | null;
  time: string;
}

/** The `engines` bucket's value. */
export interface EngineRecord extends EngineStateEvent {
  /** The replica whose actor wrote it. */
  owner: string;
}
