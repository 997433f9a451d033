// The fleet's live feed for watchers of this replica (GET /v1/rl/events, the web page): every
// engine's change, as a row of GET /v1/rl/workers, and every refit's progress events, whichever
// replica they come from. It subscribes to `<root>.engine.*.state` and `<root>.refit.*.events`
// only while someone listens, so a fleet nobody watches pays nothing for it.

import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { FleetView, RlWorkerEntry } from './fleet-view.ts';
import type { Registry } from './registry.ts';
import type { EngineStateEvent } from '../wire/engine-state.ts';
import type { Worker } from './worker.ts';

export type FeedItem = { kind: 'engine'; row: RlWorkerEntry } | { kind: 'removed'; id: string } | { kind: 'refit'; event: Record<string, unknown> };

type Listener = (item: FeedItem) => void;

export class FleetFeed {
  private readonly listeners = new Set<Listener>();
  private subs: BusSubscription[] = [];
  private readonly unhooks: Array<() => void> = [];

  constructor(private readonly deps: { bus: Pick<Bus, 'subscribe'>; subjects: Subjects; registry: Registry; view: FleetView }) {}

  /** Listens until the returned function is called. */
  listen(listener: Listener): () => void {
    this.listeners.add(listener);
    if (this.listeners.size === 1) this.open();
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.shut();
    };
  }

  private open(): void {
    const { bus, subjects, registry } = this.deps;
    this.subs = [
      bus.subscribe(subjects.allEngineStates(), (data) => {
        // Anyone may publish here: only an event naming a known engine is passed on.
        const e = data as Partial<EngineStateEvent> | null;
        if (e && typeof e === 'object' && typeof e.id === 'string') this.engineChanged(e as EngineStateEvent);
      }),
      bus.subscribe(subjects.allRefitEvents(), (data) => {
        if (!data || typeof data !== 'object') return;
        const e = data as Record<string, unknown>;
        // A rolling refit's copy of its wave's event: the wave's own stream brings the event itself.
        if (typeof e.wave_refit_id === 'string' && e.type !== 'wave') return;
        this.emit({ kind: 'refit', event: e });
      }),
    ];
    const added = (w: Worker) => this.rowChanged(w.id);
    const removed = (w: Worker) => this.emit({ kind: 'removed', id: w.id });
    const owner = (w: Worker) => this.rowChanged(w.id);
    registry.on('added', added);
    registry.on('removed', removed);
    registry.on('owner', owner);
    this.unhooks.push(
      () => registry.off('added', added),
      () => registry.off('removed', removed),
      () => registry.off('owner', owner),
    );
  }

  private shut(): void {
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
    for (const u of this.unhooks.splice(0)) u();
  }

  /**
   * The event is the freshest word on the engine (the view of another replica's engine follows the
   * shared bucket, a step behind): its fields overlay the row.
   */
  private engineChanged(e: EngineStateEvent): void {
    const row = this.rowOf(e.id);
    if (!row) return;
    // A malformed event (anyone on the bus may publish) overlays nothing: the view's row goes out.
    const str = (v: unknown) => typeof v === 'string';
    const nullableStr = (v: unknown) => v === null || typeof v === 'string';
    if (
      !str(e.state) ||
      !str(e.control) ||
      !str(e.breaker) ||
      !nullableStr(e.weight_version) ||
      !nullableStr(e.version_source) ||
      !nullableStr(e.quarantine) ||
      typeof e.in_flight !== 'number'
    ) {
      return this.emit({ kind: 'engine', row });
    }
    this.emit({
      kind: 'engine',
      row: {
        ...row,
        state: e.state,
        control: e.control,
        weight_version: e.weight_version,
        version_source: e.version_source,
        breaker: e.breaker,
        load: e.in_flight,
        quarantined: e.quarantine !== null,
        quarantine_reason: e.quarantine,
      },
    });
  }

  private rowChanged(id: string): void {
    const row = this.rowOf(id);
    if (row) this.emit({ kind: 'engine', row });
  }

  /** The engine's row, for the worker that represents it (an engine's lowest DP rank); else none. */
  private rowOf(id: string): RlWorkerEntry | undefined {
    const w = this.deps.registry.get(id);
    if (!w) return undefined;
    if (w.dpAware && this.deps.registry.siblings(w.baseUrl).some((s) => s.dpAware && (s.dpRank ?? 0) < (w.dpRank ?? 0))) return undefined;
    return this.deps.view.rowOf(id);
  }

  private emit(item: FeedItem): void {
    for (const l of this.listeners) l(item);
  }
}
