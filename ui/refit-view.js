// The refits, newest first with the running ones on top: for each, a header (version, status,
// phase now, result) and a timeline with one row per engine and one column per phase and refit
// step, each cell the engine's leg (ok, or failed with the error code and the engine's status,
// and its latency), beside a bar chart of the legs on the refit's own time axis.

import { el, ms } from './dom.js';

const MAX_ROWS = 200; // engines shown per refit; failed ones always are

export class RefitsView {
  constructor({ list, empty }) {
    this.list = list;
    this.empty = empty;
    this.articles = new Map(); // refit id → article
  }

  clear() {
    this.articles.clear();
    this.list.replaceChildren();
  }

  /** Rebuilds the changed refits (and the running ones, whose bars grow), in order. */
  render(refits, fleet, { all }) {
    const now = Date.now();
    const order = refits.ordered();
    const keep = new Set(order.map((r) => r.id));
    for (const [id, art] of this.articles)
      if (!keep.has(id)) {
        art.remove();
        this.articles.delete(id);
      }
    const nodes = order.map((r) => {
      let art = this.articles.get(r.id);
      if (!art || all || r.running || r.dirty) {
        const fresh = this.article(r, fleet, now);
        if (art) art.replaceWith(fresh);
        art = fresh;
        this.articles.set(r.id, art);
        r.dirty = false;
      }
      return art;
    });
    const same = nodes.length === this.list.children.length && nodes.every((n, i) => this.list.children[i] === n);
    if (!same) this.list.replaceChildren(...nodes);
    this.empty.hidden = nodes.length > 0;
  }

  article(r, fleet, now) {
    const status = r.report ? r.report.status : 'running';
    const cols = r.columns();
    const span = r.span(now);
    const targets = r.targets();
    const urlOf = (id) => r.urls.get(id) ?? r.report?.engines?.find((e) => e.worker_id === id)?.url ?? fleet.urlOf(id) ?? id;
    const cells = new Map(targets.map((id) => [id, cols.map((c) => r.cell(id, c))]));
    const failed = targets.filter((id) => cells.get(id).some((c) => c.outcome === 'failed'));
    let shown = targets;
    if (targets.length > MAX_ROWS) {
      const rest = targets.filter((id) => !failed.includes(id)).slice(0, Math.max(0, MAX_ROWS - failed.length));
      shown = targets.filter((id) => failed.includes(id) || rest.includes(id));
    }

    const head = el(
      'tr',
      {},
      el('th', { scope: 'col' }, 'engine'),
      ...cols.map((c) => el('th', { scope: 'col', dataset: { phase: c.key } }, c.label)),
      el('th', { scope: 'col', class: 'gantt-head' }, `timeline (${ms(span.end - span.start)})`),
    );
    const rows = shown.map((id) => {
      const cs = cells.get(id);
      return el(
        'tr',
        { dataset: { worker: id, url: urlOf(id) } },
        el('th', { scope: 'row', class: 'engine-url' }, urlOf(id)),
        ...cols.map((c, i) => legCell(c, cs[i])),
        el('td', { class: 'gantt' }, el('div', { class: 'track' }, ...bars(cols, cs, span, now))),
      );
    });

    const notes = [];
    if (r.report?.aborted) notes.push(`called off: ${r.report.aborted}`);
    for (const t of r.takeovers) notes.push(`taken over from ${t.from} by ${t.to} in ${t.phase}`);
    const skipped = r.report?.skipped ?? r.accepted?.skipped ?? [];
    if (skipped.length) notes.push(`skipped: ${skipped.map((s) => `${s.url ?? s.worker_id} (${s.reason ?? 'skipped'})`).join(', ')}`);
    if (shown.length < targets.length) notes.push(`${targets.length - shown.length} more engines not shown`);

    return el(
      'article',
      { class: 'refit', dataset: { refit: r.id, status, ...(r.wave ? { wave: String(r.wave.wave + 1) } : {}) } },
      el(
        'header',
        {},
        el('span', { class: 'refit-id' }, r.id),
        el('span', { class: 'refit-status', dataset: { status } }, status),
        el('span', { class: 'refit-what' }, describe(r)),
        el('span', { class: 'refit-now' }, now_(r, cols)),
      ),
      notes.length ? el('p', { class: 'refit-notes' }, notes.join(' · ')) : null,
      targets.length ? el('div', { class: 'scroll' }, el('table', { class: 'timeline' }, el('thead', {}, head), el('tbody', {}, ...rows))) : null,
    );
  }
}

function describe(r) {
  const s = r.report ?? r.summary ?? {};
  const a = r.accepted ?? {};
  const version = s.weight_version ?? a.weight_version;
  const source = s.source ?? a.source;
  const selector = s.selector ?? a.selector;
  const replica = r.started?.replica ?? r.summary?.replica;
  return [version !== undefined && `version ${version}`, source, selector && `selector ${selector}`, replica && `replica ${replica}`]
    .filter(Boolean)
    .join(' · ');
}

function now_(r, cols) {
  if (r.report) {
    const rep = r.report;
    return `${rep.succeeded}/${rep.total} ok in ${ms(rep.duration_ms)}${rep.waves ? ` over ${rep.waves.length} waves` : ''}`;
  }
  // A rolling refit: which wave, and what it does (its steps show on the wave's own refit).
  if (r.wave) return `now: wave ${r.wave.wave + 1}/${r.wave.waves} ${r.wave.status} (${r.wave.wave_refit_id})`;
  const col = cols.find((c) => c.key === r.current);
  if (col) return `now: ${col.label}${col.phase === 'refit' && cols.filter((c) => c.phase === 'refit').length > 1 ? ` (step ${col.index + 1})` : ''}`;
  if (r.summary?.phase) return `now: ${r.summary.phase}`;
  return 'queued';
}

function legCell(col, c) {
  const text =
    c.outcome === 'ok'
      ? ['ok', ms(c.ms)]
      : c.outcome === 'failed'
        ? ['failed', c.error, c.status]
        : c.outcome === 'running'
          ? ['running']
          : c.outcome === 'pending'
            ? ['pending']
            : ['—'];
  const title = [c.message, c.startedAt && `started ${c.startedAt}`, c.finishedAt && `finished ${c.finishedAt}`].filter(Boolean).join('\n');
  return el(
    'td',
    { class: 'leg', dataset: { phase: col.key, outcome: c.outcome, error: c.error, status: c.status }, title: title || undefined },
    ...text.filter((t) => t !== undefined && t !== null && t !== '').map((t, i) => el('span', { class: i === 0 ? 'outcome' : 'detail' }, String(t))),
  );
}

function bars(cols, cs, span, now) {
  const total = span.end - span.start;
  const out = [];
  cs.forEach((c, i) => {
    const start = Date.parse(c.startedAt ?? '');
    if (Number.isNaN(start)) return;
    const end = c.outcome === 'running' ? now : c.finishedAt ? Date.parse(c.finishedAt) : start + (c.ms ?? 0);
    const left = Math.max(0, Math.min(1, (start - span.start) / total));
    const width = Math.max(0.004, Math.min(1 - left, (end - start) / total));
    out.push(
      el('div', {
        class: 'bar',
        dataset: { phase: cols[i].phase, outcome: c.outcome },
        title: `${cols[i].label}: ${c.outcome}${c.ms !== undefined ? ` ${ms(c.ms)}` : ''}`,
        style: { left: `${(left * 100).toFixed(2)}%`, width: `${(width * 100).toFixed(2)}%` },
      }),
    );
  });
  return out;
}
