// Where a refit stands, built from its events (`<root>.refit.<id>.events`, docs/refit-events.md):
// its version, phase and step, and per engine the phase or step it was last sent, how its last
// call answered, and the failure that put it out. Pure: it reads events and prints nothing; events
// come off the wire, so every field is checked and an unknown event type changes nothing.

export type LegState = 'waiting' | 'running' | 'ok' | 'failed';

export interface EngineFailure {
  phase: string;
  step: string | null;
  stepIndex: number | null;
  error: string | null;
  status: number | null;
  message: string | null;
}

export interface EngineProgress {
  workerId: string;
  url: string | null;
  /** The phase (and refit step) the engine was last sent, or last answered. */
  phase: string | null;
  step: string | null;
  stepIndex: number | null;
  /** How that call stands: sent and not answered yet (`running`), answered, or not sent yet. */
  leg: LegState;
  /** The last answered call's latency. */
  latencyMs: number | null;
  /** The call that put the engine out of the refit (the first failed one). */
  failure: EngineFailure | null;
  /** The report's verdict, once there is one. */
  outcome: 'ok' | 'failed' | null;
}

export interface RefitProgress {
  refitId: string;
  weightVersion: string | null;
  /** `accepted`, `running`, then the report's status (`succeeded`, `partial`, `failed`). */
  status: string;
  /** The replica running it (the one that accepted it until one starts it). */
  replica: string | null;
  phase: string | null;
  step: string | null;
  stepIndex: number | null;
  /** How many refit steps there are, when an event said. */
  steps: number | null;
  /** The refit steps' names in order, from `started`. */
  stepNames: string[] | null;
  /** Engines by worker id, in the order the events named them. */
  engines: Map<string, EngineProgress>;
  skipped: number;
  takeovers: number;
  /** A rolling refit: the wave (0-based) the last `wave` event named, of how many, and what it does. */
  wave: { index: number; of: number; status: string } | null;
  /** The final report (the `report` event's), or null while the refit runs. */
  report: Record<string, unknown> | null;
}

export function newRefitProgress(refitId: string): RefitProgress {
  return {
    refitId,
    weightVersion: null,
    status: 'waiting',
    replica: null,
    phase: null,
    step: null,
    stepIndex: null,
    steps: null,
    stepNames: null,
    engines: new Map(),
    skipped: 0,
    takeovers: 0,
    wave: null,
    report: null,
  };
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
const record = (v: unknown): Record<string, unknown> | null =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

/** The refit id of an event off the wire, or null when it is not a refit event. */
export function refitIdOf(event: unknown): string | null {
  const e = record(event);
  return e && typeof e.type === 'string' ? str(e.refit_id) : null;
}

function engine(p: RefitProgress, workerId: string): EngineProgress {
  let e = p.engines.get(workerId);
  if (!e) {
    e = { workerId, url: null, phase: null, step: null, stepIndex: null, leg: 'waiting', latencyMs: null, failure: null, outcome: null };
    p.engines.set(workerId, e);
  }
  return e;
}

/**
 * Applies one event of this refit; returns whether anything changed (false for another refit's
 * event, an unknown type, or a malformed one).
 */
export function applyRefitEvent(p: RefitProgress, event: unknown): boolean {
  const e = record(event);
  if (!e || str(e.refit_id) !== p.refitId) return false;
  switch (e.type) {
    case 'accepted':
      p.weightVersion = str(e.weight_version) ?? p.weightVersion;
      p.replica ??= str(e.replica);
      if (p.status === 'waiting') p.status = 'accepted';
      for (const id of strings(e.targets)) engine(p, id);
      p.skipped = Array.isArray(e.skipped) ? e.skipped.length : p.skipped;
      return true;
    case 'started': {
      p.replica = str(e.replica) ?? p.replica;
      if (!p.report) p.status = 'running';
      for (const id of strings(e.targets)) engine(p, id);
      const names = strings(e.steps);
      if (Array.isArray(e.steps)) {
        p.stepNames = names;
        p.steps = names.length;
      }
      return true;
    }
    case 'phase': {
      const phase = str(e.phase);
      if (!phase) return false;
      if (!p.report) p.status = 'running';
      p.phase = phase;
      p.step = str(e.step);
      p.stepIndex = num(e.step_index);
      p.steps = num(e.steps) ?? p.steps;
      for (const id of strings(e.targets)) {
        const en = engine(p, id);
        Object.assign(en, { phase, step: p.step, stepIndex: p.stepIndex, leg: 'running' as const });
      }
      return true;
    }
    case 'leg': {
      const id = str(e.worker_id);
      const phase = str(e.phase);
      if (!id || !phase) return false;
      const en = engine(p, id);
      const ok = e.outcome === 'ok';
      Object.assign(en, {
        url: str(e.url) ?? en.url,
        phase,
        step: str(e.step),
        stepIndex: num(e.step_index),
        leg: ok ? 'ok' : 'failed',
        latencyMs: num(e.latency_ms),
      });
      if (!ok && !en.failure) {
        en.failure = { phase, step: en.step, stepIndex: en.stepIndex, error: str(e.error), status: num(e.status), message: str(e.message) };
      }
      return true;
    }
    case 'wave': {
      const index = num(e.wave);
      const of = num(e.waves);
      const status = str(e.status);
      if (index === null || of === null || !status) return false;
      p.wave = { index, of, status };
      return true;
    }
    case 'takeover':
      p.takeovers++;
      p.replica = str(e.to) ?? p.replica;
      return true;
    case 'report': {
      const report = record(e.report);
      if (!report) return false;
      applyReport(p, report);
      return true;
    }
    default:
      return false;
  }
}

/** The report's verdicts (and, for an engine whose failed call no event told of, its failure). */
export function applyReport(p: RefitProgress, report: Record<string, unknown>): void {
  p.report = report;
  p.status = str(report.status) ?? 'done';
  p.weightVersion = str(report.weight_version) ?? p.weightVersion;
  if (Array.isArray(report.skipped)) p.skipped = report.skipped.length;
  for (const raw of Array.isArray(report.engines) ? report.engines : []) {
    const r = record(raw);
    const id = r && str(r.worker_id);
    if (!r || !id) continue;
    const en = engine(p, id);
    en.url = str(r.url) ?? en.url;
    en.outcome = r.outcome === 'ok' ? 'ok' : 'failed';
    if (en.leg === 'running') en.leg = en.outcome === 'ok' ? 'ok' : 'failed';
    if (en.outcome === 'failed' && !en.failure) {
      en.failure = {
        phase: str(r.failed_phase) ?? en.phase ?? '?',
        step: str(r.failed_step),
        stepIndex: null,
        error: str(r.error),
        status: num(r.status),
        message: str(r.message),
      };
    }
  }
}

/** `pause`, `refit 2/5 update_weights_from_distributed 1/3`, `verify`: a phase and its step, for people. */
export function stepLabel(phase: string | null, step: string | null, stepIndex: number | null, steps: number | null): string {
  if (!phase) return '-';
  const at = stepIndex !== null && steps !== null && phase === 'refit' ? ` ${stepIndex + 1}/${steps}` : '';
  return `${phase}${at}${step ? ` ${step}` : ''}`;
}

/**
 * Counts of engines by how they stand: the report's verdict when there is one, else failed (out of
 * the refit), running (a call out), ok (its last call answered ok).
 */
export function tally(p: RefitProgress): { ok: number; failed: number; running: number; total: number } {
  let ok = 0;
  let failed = 0;
  let running = 0;
  for (const e of p.engines.values()) {
    if (e.outcome === 'failed' || (e.outcome === null && e.failure)) failed++;
    else if (e.outcome === 'ok' || (e.outcome === null && e.leg === 'ok')) ok++;
    else if (e.leg === 'running') running++;
  }
  return { ok, failed, running, total: p.engines.size };
}
