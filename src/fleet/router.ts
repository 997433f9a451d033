// Data-plane worker selection: which engine serves the next request. Only engines whose actor
// is `serving`, whose breaker is not open and whose control state is active are eligible
// (paused, asleep, refitting and unreachable engines are never chosen); round-robin among them.

import type { EngineHost } from './engine-host.ts';
import type { FleetView } from './fleet-view.ts';
import type { Registry } from './registry.ts';
import type { Worker } from './worker.ts';

export class Router {
  private cursor = 0;

  constructor(private readonly deps: { registry: Registry; view: FleetView; host: EngineHost }) {}

  /** Eligible engines right now, in registry order. */
  eligible(opts: { modes?: ReadonlySet<string>; exclude?: ReadonlySet<string> } = {}): Worker[] {
    const out: Worker[] = [];
    for (const w of this.deps.registry.all()) {
      if (opts.modes && !opts.modes.has(w.connectionMode)) continue;
      if (opts.exclude?.has(w.id)) continue;
      const e = this.deps.view.engine(w);
      if (e.state === 'serving' && e.control === 'active' && e.breaker !== 'open') out.push(w);
    }
    return out;
  }

  pick(opts: { modes?: ReadonlySet<string>; exclude?: ReadonlySet<string> } = {}): Worker | undefined {
    const candidates = this.eligible(opts);
    if (candidates.length === 0) return undefined;
    this.cursor = (this.cursor + 1) % 1_000_000_007;
    return candidates[this.cursor % candidates.length];
  }
}
