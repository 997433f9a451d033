// The engine calls of a refit's plan, every call of every phase built (and size-checked) up
// front, so that a request whose calls the bus cannot carry is refused whole instead of failing
// halfway with engines paused. It builds calls; it never sends one (the phase runner does).

import type { LegRunner } from '../control/leg-runner.ts';
import type { Worker } from '../fleet/worker.ts';
import type { CallSpec, RefitPlan } from './plan.ts';
import type { ControlCall } from '../wire/control-call.ts';
import type { Phase } from '../wire/refit-phase.ts';

/**
 * Every call of every phase, by `callKey`. Engines given the same spec share one call object, so
 * it crosses the bus once per replica.
 */
export function prepareCalls(legs: LegRunner, plan: RefitPlan, targets: Worker[], refitId: string): Map<string, ControlCall> {
  const shared = new Map<CallSpec, ControlCall>();
  const calls = new Map<string, ControlCall>();
  const put = (phase: Phase, step: number, w: Worker, spec: CallSpec) => {
    let call = shared.get(spec);
    if (!call) {
      call = legs.callFor(spec.path, {
        method: spec.method,
        rawQuery: '',
        body: spec.body ? Buffer.from(JSON.stringify(spec.body)) : null,
        contentType: spec.body ? 'application/json' : undefined,
        trace: { 'x-request-id': `refit-${refitId}` },
      });
      call.refitId = refitId;
      shared.set(spec, call);
    }
    calls.set(callKey(phase, step, w.id), call);
  };
  for (const w of targets) {
    put('pause', 0, w, plan.pause);
    plan.steps.forEach((_, i) => put('refit', i, w, plan.step(i, w)));
    if (plan.verify) put('verify', 0, w, plan.verify);
    put('resume', 0, w, plan.resume);
  }
  return calls;
}

/** Where one engine's call of a phase (or refit step) is found among the prepared calls. */
export function callKey(phase: Phase, step: number, workerId: string): string {
  return `${phase}|${step}|${workerId}`;
}

/** The same call with a deadline that starts now. */
export function fresh(call: ControlCall): ControlCall {
  return { ...call, deadline: Date.now() + call.timeoutSecs * 1000 };
}
