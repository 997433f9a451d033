// The engine actor's `discover` side effect and the version seeding around it: registration labels
// seed the version (absent, empty or `default` seed none), the first discovery re-seeds from the
// merged labels where caller labels win, and a rediscovery believes the version the engine reports.
// It never creates or removes actors and never publishes: versions reach NATS as actor state.

import type { EngineActor } from '../../actors/engine.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import type { Logger } from '../obs/logger.ts';
import { labelsFromFacts } from './discovery.ts';
import type { Registry } from './registry.ts';
import { checkVersion, compareVersions, UNVERSIONED_LABEL } from './versions.ts';
import { mergedLabels } from './worker.ts';

/** What discovery uses of one hosted engine. */
export interface SeededEngine {
  actor: EngineActor;
  client: EngineClient;
  /** Completed discoveries: the first seeds from labels, later ones trust the engine. */
  discoveries: number;
  /** The weight_version label last seen, to re-seed only when it changes. */
  seededLabel: string | undefined;
}

/** Registration labels seed a version unless absent, empty or the `default` placeholder. */
export function seedFrom(label: string | undefined): string | undefined {
  if (label === undefined || label.trim() === '' || label.trim() === UNVERSIONED_LABEL) return undefined;
  const checked = checkVersion(label);
  return checked.ok ? checked.value : undefined;
}

/** Discovers the engine, writes its labels to the registry and reconciles the actor's version. */
export async function discoverAndSeed(id: string, h: SeededEngine | undefined, signal: AbortSignal, deps: { registry: Registry; log: Logger }): Promise<void> {
  if (!h) throw new Error('engine no longer hosted');
  const facts = await h.client.discover(signal);
  const labels = labelsFromFacts(h.client.mode, facts);
  const worker = deps.registry.setDiscovered(id, labels);
  if (!worker) return;
  // The engine's own pause state wins over the last one recorded. An engine that admits requests
  // is active; one that does not is paused unless it was put to sleep (sleep also stops admission).
  // An operator's write to the gateway's table is kept: it is not a claim about the engine.
  const ctx = h.actor.getSnapshot().context;
  if (ctx.controlSource !== 'api') {
    if (facts.paused === false) h.actor.send({ type: 'control.set', control: 'active' });
    else if (facts.paused === true && ctx.control === 'active') h.actor.send({ type: 'control.set', control: 'paused' });
  }
  h.discoveries++;
  if (h.discoveries === 1) {
    // First discovery: registration seeding, where caller labels win.
    const label = mergedLabels(worker).weight_version;
    if (label !== h.seededLabel) {
      h.seededLabel = label;
      h.actor.send({ type: 'version.set', version: seedFrom(label), source: 'registration' });
    }
    return;
  }
  // Rediscovery after the engine was unreachable: it may have restarted with other weights.
  // An engine that reports its version is believed over what the gateway last recorded.
  const reported = labels.weight_version;
  if (reported === undefined) return;
  const current = h.actor.getSnapshot().context.version;
  const next = seedFrom(reported);
  if (next !== current && (next === undefined || current === undefined || compareVersions(next, current) !== 0)) {
    deps.log.warn({ worker_id: id, recorded: current ?? null, reported }, 'engine reports another weight version after being unreachable');
    h.actor.send({ type: 'version.set', version: next, source: 'registration' });
  }
}
