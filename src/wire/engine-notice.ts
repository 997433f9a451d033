// What a replica that does not own an engine tells its owner on `<root>.engine.<id>.notice`: a
// data-plane result for the breaker, a version or control state written through its API, a
// quarantine a refit it ran set or lifted. Shapes only: src/fleet/ sends and applies them.

export type EngineNotice =
  | { kind: 'dp'; ok: boolean }
  | { kind: 'version'; version: string; source: 'api' | 'passthrough' | 'registration' }
  | { kind: 'control'; control: 'active' | 'paused' | 'asleep' }
  | { kind: 'quarantine'; reason: string | null };
