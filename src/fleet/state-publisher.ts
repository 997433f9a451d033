// Publishes a hosted engine actor's state: an `rl.engine.<id>.state` event when its lifecycle,
// breaker, control or version changes, its shared `engines` record (held back when it changes no
// routing and may not last), the engine-state gauges, the transition log line, and the count of
// version changes under load. It only reads snapshots: it never sends the actor an event,
// and an event never carries a secret.

import { breakerOf, lifecycleOf, type EngineSnapshot } from '../../actors/engine.ts';
import type { JsonBucket } from '../bus/buckets.ts';
import type { Bus } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { RecordWriter } from './record-writer.ts';
import type { Registry } from './registry.ts';
import { baseUrlOf } from './worker.ts';
import type { EngineRecord, EngineStateEvent } from '../wire/engine-state.ts';

/** The facts of an engine that the outside sees: a change of any of them is published. */
export interface PublishedState {
  state: string;
  breaker: string;
  control: string;
  version: string | undefined;
  versionSource: string | undefined;
  quarantine: string | null;
}

/**
 * How long a record that changes no routing decision waits before it is written: a refit's
 * `refitting` of a paused engine usually ends sooner (the load answers), and then is never written.
 */
export const HELD_RECORD_MS = 100;

/**
 * Whether the shared record of a move from `last` to `state` (with control `control`) may be held
 * back: only a transient state of an engine no replica routes to, before and after (not `serving`
 * before, `control` not active, so every replica's routing reads the same from either record).
 * The state event still goes out at once; the record a takeover reads (control and pauser) is
 * the same in either.
 */
export function mayHoldRecord(last: PublishedState | undefined, state: string, control: string): boolean {
  return state === 'refitting' && control !== 'active' && last !== undefined && last.state !== 'serving' && last.control !== 'active';
}

export class StatePublisher {
  /** Last version seen per engine base URL: DP ranks change together, counted once. */
  private readonly engineVersions = new Map<string, string | undefined>();
  /** Writes the shared records in the order observed, retrying what the bus failed. */
  readonly records: RecordWriter | undefined;

  constructor(
    private readonly deps: {
      registry: Registry;
      bus: Bus;
      subjects: Subjects;
      metrics: Metrics;
      log: Logger;
      /** Data-plane load of a hosted worker. */
      loadOf: (id: string) => number;
      /** Who paused a hosted worker (command-runner.ts). */
      pausedBy: (id: string) => string | undefined;
      /** The shared `engines` bucket, where other replicas read what this one observed. */
      records?: JsonBucket<EngineRecord>;
      replicaId: string;
    },
  ) {
    this.records = deps.records ? new RecordWriter({ records: deps.records, log: deps.log }) : undefined;
  }

  /** Whether `snap` differs from what was last published in anything the outside sees. */
  changed(last: PublishedState | undefined, snap: EngineSnapshot): boolean {
    if (!last) return true;
    const c = snap.context;
    return (
      last.control !== c.control ||
      last.version !== c.version ||
      last.versionSource !== c.versionSource ||
      last.quarantine !== c.quarantine ||
      last.state !== lifecycleOf(snap) ||
      last.breaker !== breakerOf(snap)
    );
  }

  /** Publishes the engine's new state (event, shared record, gauges, log) and returns it. */
  publish(id: string, last: PublishedState | undefined, snap: EngineSnapshot, load: number, queued: number): PublishedState {
    const c = snap.context;
    const state = lifecycleOf(snap);
    const breaker = breakerOf(snap);
    const now: PublishedState = { state, breaker, control: c.control, version: c.version, versionSource: c.versionSource, quarantine: c.quarantine };
    const prevState = last?.state;
    const event: EngineStateEvent = {
      id,
      url: c.url,
      state,
      control: c.control,
      weight_version: c.version ?? null,
      version_source: c.versionSource ?? null,
      breaker,
      quarantine: c.quarantine,
      paused_by: c.control === 'paused' ? (this.deps.pausedBy(id) ?? null) : null,
      in_flight: load,
      queued,
      error: state === 'unreachable' ? (c.lastError ?? null) : null,
      time: new Date().toISOString(),
    };
    this.deps.metrics.engineState(c.url, baseUrlOf(c.url).baseUrl, event);
    this.noteVersion(c.url, c.version);
    // Debug: a refit makes five transitions per engine, and `rl.engine.<id>.state` already tells them.
    if (prevState !== state) this.deps.log.debug({ worker_id: id, url: c.url, from: prevState ?? null, to: state }, 'engine transition');
    try {
      this.deps.bus.publish(this.deps.subjects.engineState(id), event);
    } catch (err) {
      this.deps.log.warn({ err, worker_id: id }, 'could not publish engine state');
    }
    const record = { ...event, owner: this.deps.replicaId };
    if (mayHoldRecord(last, state, c.control)) this.records?.putUnlessReplaced(id, record, HELD_RECORD_MS);
    else this.records?.put(id, record);
    return now;
  }

  /** The engine's last DP rank is gone: a later one with this base URL is a first sighting again. */
  forgetEngine(baseUrl: string): void {
    this.engineVersions.delete(baseUrl);
  }

  /** The first sighting of an engine records its version; a later change with load counts. */
  private noteVersion(url: string, version: string | undefined): void {
    const base = baseUrlOf(url).baseUrl;
    const known = this.engineVersions.has(base);
    if (known && this.engineVersions.get(base) === version) return;
    this.engineVersions.set(base, version);
    if (!known) return;
    const inflight = this.deps.registry.siblings(base).reduce((sum, w) => sum + this.deps.loadOf(w.id), 0);
    if (inflight > 0) this.deps.metrics.versionChangeWithInflight();
  }
}
