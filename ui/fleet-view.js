// The fleet, two ways: a table with one row per engine and a grid of tiles coloured by state.
// Rows and tiles are kept by engine id and only the changed ones are touched, so a large fleet
// stays cheap to follow.

import { el, setData, setText } from './dom.js';

/** The colour a tile takes: its lifecycle state, grouped; quarantine overrides all but unreachable. */
export function toneOf(row) {
  if (row.quarantined && row.state !== 'unreachable') return 'quarantined';
  switch (row.state) {
    case 'serving':
      return 'serving';
    case 'paused':
    case 'pausing':
    case 'asleep':
      return 'paused';
    case 'refitting':
      return 'refitting';
    case 'unreachable':
      return 'unreachable';
    default:
      return 'registering'; // registering, resolving, or a state this page does not know yet
  }
}

export const TONES = ['serving', 'paused', 'refitting', 'unreachable', 'registering', 'quarantined'];

const COLUMNS = ['url', 'state', 'control', 'version', 'breaker', 'load', 'queued', 'hit', 'owner', 'quarantine', 'refit'];

/** A prefix hit rate (0..1) as the page shows it; null (nothing counted yet) is a dash. */
export function hitRateText(rate) {
  return rate === null || rate === undefined ? '—' : `${(rate * 100).toFixed(1)}%`;
}

/** Queued tokens as the page shows them; null (the policy keeps no such count) is a dash. */
export function queuedText(tokens) {
  return tokens === null || tokens === undefined ? '—' : String(Math.round(tokens));
}

export class FleetView {
  constructor({ table, tiles, legend, count }) {
    this.tbody = table.tBodies[0];
    this.tiles = tiles;
    this.legend = legend;
    this.count = count;
    this.rows = new Map(); // id → { tr, cells, tile }
  }

  clear() {
    this.rows.clear();
    this.tbody.replaceChildren();
    this.tiles.replaceChildren();
  }

  /** Brings the DOM up to the model; `holders` maps worker id → the running refit holding it. */
  render(fleet, holders) {
    const changed = fleet.changed;
    for (const id of changed) {
      const row = fleet.workers.get(id);
      const view = this.rows.get(id);
      if (!row) {
        if (view) {
          view.tr.remove();
          view.tile.remove();
          this.rows.delete(id);
        }
        continue;
      }
      if (!view) this.rows.set(id, this.create(row));
    }
    fleet.changed = new Set();
    if (fleet.membership) {
      fleet.membership = false;
      const sorted = fleet.sorted();
      this.tbody.replaceChildren(...sorted.map((r) => this.rows.get(r.id).tr));
      this.tiles.replaceChildren(...sorted.map((r) => this.rows.get(r.id).tile));
    }
    const counts = Object.fromEntries(TONES.map((t) => [t, 0]));
    for (const [id, view] of this.rows) {
      const row = fleet.workers.get(id);
      const holder = holders.get(id);
      const held = holder ? `${holder.id} ${holder.current ?? ''}` : '';
      // Only rows that changed, or whose running refit moved on, are touched.
      if (changed.has(id) || view.held !== held) {
        view.held = held;
        this.fill(view, row, holder);
      }
      counts[toneOf(row)] += 1;
    }
    this.renderLegend(counts);
    setText(this.count, `${fleet.workers.size} engine${fleet.workers.size === 1 ? '' : 's'}`);
  }

  create(row) {
    const cells = Object.fromEntries(COLUMNS.map((c) => [c, el('td', { class: `col-${c}` })]));
    const tr = el('tr', { dataset: { id: row.id } }, ...COLUMNS.map((c) => cells[c]));
    const label = el('span', { class: 'tile-label' });
    const tile = el('a', { class: 'tile', href: `#engine-${cssId(row.id)}`, dataset: { id: row.id } }, label);
    tr.id = `engine-${cssId(row.id)}`;
    return { tr, cells, tile, label, held: undefined };
  }

  fill(view, row, holder) {
    const { tr, cells, tile, label } = view;
    const tone = toneOf(row);
    for (const node of [tr, tile]) {
      setData(node, 'url', row.url);
      setData(node, 'state', row.state);
      setData(node, 'tone', tone);
    }
    setText(cells.url, row.url);
    setText(cells.state, row.state);
    setData(cells.state, 'tone', tone);
    setText(cells.control, row.control);
    setText(cells.version, row.weight_version ?? '—');
    cells.version.title = row.version_source ? `from ${row.version_source}` : '';
    setText(cells.breaker, row.breaker);
    setData(cells.breaker, 'breaker', row.breaker);
    setText(cells.load, String(row.load ?? 0));
    const routing = row.routing;
    setText(cells.queued, queuedText(routing?.queued_tokens));
    setText(cells.hit, hitRateText(routing?.prefix_hit_rate));
    const hitTitle = routing ? `${routing.cached_tokens} of ${routing.prompt_tokens} prompt tokens cached; ${routing.completion_tokens} completion tokens` : '';
    if (cells.hit.title !== hitTitle) cells.hit.title = hitTitle;
    setText(cells.owner, row.owner ?? '—');
    setText(cells.quarantine, row.quarantined ? row.quarantine_reason || 'quarantined' : '');
    // The phase by its timeline label ("refit: update_weights_from_disk"), not its column key.
    const phase = holder?.current ? (holder.columns().find((c) => c.key === holder.current)?.label ?? holder.current) : '';
    const refitText = holder ? `${holder.id}${phase ? ` (${phase})` : ''}` : '';
    setText(cells.refit, refitText);
    setData(tr, 'refit', holder?.id);
    setText(label, shortUrl(row.url));
    const queued = routing?.queued_tokens;
    const load = `${row.load ?? 0} in flight${queued === null || queued === undefined ? '' : `, ${queuedText(queued)} tokens queued`}`;
    const title = `${row.url}\n${row.state}${row.quarantined ? ` — quarantined: ${row.quarantine_reason ?? ''}` : ''}\nversion ${row.weight_version ?? '—'}\n${load}\nprefix hit ${hitRateText(routing?.prefix_hit_rate)}${holder ? `\nrefit ${holder.id}` : ''}`;
    if (tile.title !== title) tile.title = title;
  }

  renderLegend(counts) {
    if (!this.legend.childElementCount) {
      this.legend.append(
        ...TONES.map((t) =>
          el(
            'span',
            { class: 'legend-item', dataset: { tone: t } },
            el('span', { class: 'swatch', dataset: { tone: t } }),
            el('span', { class: 'legend-text' }),
          ),
        ),
      );
    }
    for (const item of this.legend.children) setText(item.querySelector('.legend-text'), `${item.dataset.tone} ${counts[item.dataset.tone]}`);
  }
}

function shortUrl(url) {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
}

function cssId(id) {
  return String(id).replace(/[^A-Za-z0-9_-]/g, '_');
}
