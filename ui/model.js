// What the page knows, without any DOM: the fleet's rows by engine id and every refit followed,
// built only from the gateway's events and listings. Views read it; app.js feeds it.

/** The rows of GET /v1/rl/workers, by id, as the `snapshot`, `engine` and `routing` events keep them. */
export class FleetModel {
  constructor() {
    this.workers = new Map();
    this.changed = new Set();
    this.membership = true; // an engine came or left: the views re-order
  }

  replace(rows) {
    const ids = new Set(rows.map((r) => r.id));
    for (const id of this.workers.keys()) if (!ids.has(id)) this.remove(id);
    for (const r of rows) this.put(r);
  }

  put(row) {
    if (row.removed) return this.remove(row.id);
    if (!this.workers.has(row.id)) this.membership = true;
    this.workers.set(row.id, row);
    this.changed.add(row.id);
  }

  remove(id) {
    if (this.workers.delete(id)) this.membership = true;
    this.changed.add(id);
  }

  /** A `routing` event: an engine's load and routing figures, laid over its row. */
  figures({ id, load, routing }) {
    const row = this.workers.get(id);
    if (!row) return; // not listed yet: its `engine` event brings the whole row
    this.workers.set(id, { ...row, load, routing });
    this.changed.add(id);
  }

  /** Rows in the gateway's order: by base_url, then url. */
  sorted() {
    return [...this.workers.values()].sort((a, b) => cmp(a.base_url, b.base_url) || cmp(a.url, b.url));
  }

  urlOf(id) {
    return this.workers.get(id)?.url;
  }
}

const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/** One refit: its listing entry (running view or report) and every event seen, de-duplicated. */
export class Refit {
  constructor(id) {
    this.id = id;
    this.summary = undefined; // an entry of GET /v1/rl/refits
    this.report = undefined;
    this.accepted = undefined;
    this.started = undefined;
    this.phases = new Map(); // column key → latest `phase` event
    this.legs = new Map(); // `${worker_id}|${column key}` → latest `leg` event
    this.takeovers = [];
    this.wave = undefined; // a rolling refit: the latest `wave` event (its own events are on each wave's refit)
    this.urls = new Map(); // worker id → url, from legs
    this.current = undefined; // column key of the phase running now
    this.seen = new Set();
    this.replayed = false; // events were asked for from the start
    this.dirty = true; // changed since the view last drew it
  }

  get running() {
    return !this.report && (this.summary?.status ?? 'running') === 'running';
  }

  /** Applies one refit event; false when it was seen already (fleet stream and replay overlap). */
  apply(ev) {
    const key = JSON.stringify([ev.type, ev.time, ev.phase, ev.step_index, ev.worker_id, ev.from, ev.to, ev.wave, ev.status]);
    if (this.seen.has(key)) return false;
    this.seen.add(key);
    switch (ev.type) {
      case 'accepted':
        this.accepted = ev;
        break;
      case 'started':
        this.started = ev;
        break;
      case 'phase':
        this.phases.set(columnKey(ev), ev);
        this.current = columnKey(ev);
        break;
      case 'leg':
        this.legs.set(`${ev.worker_id}|${columnKey(ev)}`, ev);
        if (ev.url) this.urls.set(ev.worker_id, ev.url);
        break;
      case 'takeover':
        this.takeovers.push(ev);
        break;
      case 'wave':
        if (!this.wave || ev.wave >= this.wave.wave) this.wave = ev;
        break;
      case 'report':
        this.report = ev.report;
        this.current = undefined;
        break;
    }
    return true;
  }

  /** The columns of its timeline: pause, each refit step, verify (when it verifies), resume. */
  columns() {
    const names = this.started?.steps ?? [];
    let count = names.length;
    for (const p of this.phases.values()) if (p.phase === 'refit') count = Math.max(count, p.steps ?? 0, (p.step_index ?? 0) + 1);
    count = Math.max(count, 1);
    const steps = [];
    for (let i = 0; i < count; i++) {
      const named = names[i] ?? [...this.phases.values()].find((p) => p.phase === 'refit' && (p.step_index ?? 0) === i)?.step;
      steps.push({ key: `refit:${i}`, phase: 'refit', index: i, label: named ? `refit: ${named}` : count > 1 ? `refit ${i + 1}` : 'refit', step: named });
    }
    const verify = this.started?.verify || this.phases.has('verify') || this.report?.phases?.verify !== undefined;
    return [
      { key: 'pause', phase: 'pause', label: 'pause' },
      ...steps,
      ...(verify ? [{ key: 'verify', phase: 'verify', label: 'verify' }] : []),
      { key: 'resume', phase: 'resume', label: 'resume' },
    ];
  }

  /** The worker ids it reaches, in the order the gateway gave them. */
  targets() {
    const ids = this.started?.targets ?? this.accepted?.targets ?? this.report?.engines?.map((e) => e.worker_id) ?? [];
    const all = [...ids];
    for (const k of this.legs.keys()) {
      const id = k.slice(0, k.lastIndexOf('|'));
      if (!all.includes(id)) all.push(id);
    }
    if (this.summary?.pending) for (const id of this.summary.pending) if (!all.includes(id)) all.push(id);
    return all;
  }

  /** What one engine's cell in one column shows: outcome, timing, error. */
  cell(workerId, col) {
    const leg = this.legs.get(`${workerId}|${col.key}`);
    if (leg)
      return {
        outcome: leg.outcome,
        ms: leg.latency_ms,
        error: leg.error,
        status: leg.status,
        message: leg.message,
        startedAt: leg.started_at,
        finishedAt: leg.finished_at,
      };
    const er = this.report?.engines?.find((e) => e.worker_id === workerId);
    if (er) {
      const failedHere = er.failed_phase === col.phase && (col.phase !== 'refit' || !er.failed_step || !col.step || er.failed_step === col.step);
      if (failedHere) return { outcome: 'failed', error: er.error, status: er.status, message: er.message };
      const ms = er.phases?.[col.phase];
      if (ms !== null && ms !== undefined) return { outcome: 'ok', ms: this.columns().filter((c) => c.phase === col.phase).length === 1 ? ms : undefined };
      return { outcome: 'none' };
    }
    if (this.report) return { outcome: 'none' };
    const phase = this.phases.get(col.key);
    if (phase && (!phase.targets || phase.targets.includes(workerId))) return { outcome: 'running', startedAt: phase.time };
    return { outcome: 'pending' };
  }

  /** When it began and ended (now while it runs), for the time axis. */
  span(now) {
    const start = Date.parse(this.accepted?.time ?? this.started?.time ?? this.summary?.submitted_at ?? this.report?.started_at ?? '') || now;
    const end = this.report ? Date.parse(this.report.finished_at) || now : now;
    return { start, end: Math.max(end, start + 1) };
  }
}

export function columnKey(ev) {
  return ev.phase === 'refit' ? `refit:${ev.step_index ?? 0}` : ev.phase;
}

/** Every refit followed, by id: from the listing in `snapshot` and from `refit` events. */
export class RefitsModel {
  constructor(keep = 50) {
    this.byId = new Map();
    this.changed = true;
    this.keep = keep;
  }

  get(id) {
    let r = this.byId.get(id);
    if (!r) {
      r = new Refit(id);
      this.byId.set(id, r);
    }
    return r;
  }

  /** An entry of GET /v1/rl/refits: a running view, or a report. */
  listed(entry) {
    const r = this.get(entry.id);
    r.summary = entry;
    if (entry.status !== 'running') r.report = entry;
    r.dirty = true;
    this.changed = true;
    return r;
  }

  event(ev) {
    const r = this.get(ev.refit_id);
    if (r.apply(ev)) r.dirty = this.changed = true;
    return r;
  }

  /** Running first, then the newest; the oldest finished ones beyond `keep` are forgotten. */
  ordered() {
    const started = (r) => r.span(0).start;
    const list = [...this.byId.values()].sort((a, b) => Number(b.running) - Number(a.running) || started(b) - started(a));
    for (const r of list.slice(this.keep)) if (!r.running) this.byId.delete(r.id);
    return list.slice(0, this.keep);
  }

  /** Worker id → the running refit that holds it. */
  holders() {
    const m = new Map();
    for (const r of this.byId.values()) if (r.running) for (const id of r.targets()) m.set(id, r);
    return m;
  }
}
