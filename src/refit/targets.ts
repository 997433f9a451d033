// Who a refit reaches. Of the engines a refit selects, those that cannot take part are left out
// before anything is paused and reported under `skipped` with the reason: an engine that is down
// or not discovered yet, one without a control endpoint, one that cannot load from the requested
// source (its capabilities). They do not count against the quorum, and a distributed refit's
// world size counts only the engines that take part. Pure: reads the fleet view, no I/O.

import { capabilitiesFor } from '../fleet/capabilities.ts';
import { workerControlUrl } from '../fleet/control-url.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { SkippedEngine, SkipReason } from '../wire/refit-report.ts';
import type { RefitRequest } from '../wire/refit-request.ts';

export function splitTargets(view: FleetView, selected: Worker[], req: RefitRequest): { targets: Worker[]; skipped: SkippedEngine[] } {
  const targets: Worker[] = [];
  const skipped: SkippedEngine[] = [];
  const skip = (w: Worker, reason: SkipReason, message: string) => skipped.push({ worker_id: w.id, url: w.url, reason, message });
  for (const w of selected) {
    const e = view.engine(w);
    if (e.state === 'unreachable') skip(w, 'unreachable', 'the engine did not answer its last probes or its discovery');
    else if (e.state === 'registering') skip(w, 'not_discovered', 'the engine has not been discovered yet (registering)');
    else if (!workerControlUrl(w)) skip(w, 'no_control_endpoint', `the ${w.connectionMode} worker advertises no control endpoint (rl.control_url)`);
    else {
      const from = capabilitiesFor(w.engine, mergedLabels(w)).update_from;
      if (!from.includes(req.source.kind))
        skip(w, 'source_unsupported', `the engine cannot load weights from ${req.source.kind} (it supports: ${from.join(', ') || 'none'})`);
      else targets.push(w);
    }
  }
  return { targets, skipped };
}
