// The page's wiring: asks for the admin key when the gateway wants one (kept in sessionStorage,
// sent as a bearer), follows GET /v1/rl/events (a snapshot, then engine, routing and refit events),
// replays the events of refits that began before the page opened from
// GET /v1/rl/refits/{id}/events, and redraws at most once a frame.

import { follow } from './sse.js';
import { FleetModel, RefitsModel } from './model.js';
import { FleetView } from './fleet-view.js';
import { RefitsView } from './refit-view.js';

const KEY_STORE = 'rlgate.admin-key';
const FINISHED_REPLAYS = 8; // finished refits of the snapshot whose timelines are replayed
const PARALLEL_REPLAYS = 2; // browsers allow ~6 connections per host; the fleet stream holds one

// The API lives beside the page: /ui/app.js → /v1/rl/... (also behind a path prefix).
const api = (path) => new URL(`../${path}`, import.meta.url).href;

const $ = (id) => document.getElementById(id);
const ui = {
  main: $('main'),
  login: $('login'),
  keyForm: $('key-form'),
  keyInput: $('key-input'),
  keyError: $('key-error'),
  forget: $('forget-key'),
  conn: $('conn'),
  notice: $('notice'),
};

let fleet;
let refits;
let fleetView;
let refitsView;
let stream;
let replays; // refit id → follower
let queue; // refit ids waiting for a replay slot
let drawn = false;

function reset() {
  stream?.close();
  for (const r of replays?.values() ?? []) r.close();
  fleet = new FleetModel();
  refits = new RefitsModel();
  replays = new Map();
  queue = [];
  fleetView ??= new FleetView({ table: $('fleet-table'), tiles: $('tiles'), legend: $('legend'), count: $('fleet-count') });
  refitsView ??= new RefitsView({ list: $('refit-list'), empty: $('refits-empty') });
  fleetView.clear();
  refitsView.clear();
}

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { authorization: `Bearer ${key}` } : {};
}

function setConn(status) {
  ui.conn.dataset.conn = status;
  ui.conn.textContent =
    { connecting: 'connecting…', live: 'live', retrying: 'reconnecting…', stopped: 'stopped', locked: 'admin key needed' }[status] ?? status;
}

function notice(text) {
  ui.notice.textContent = text ?? '';
  ui.notice.hidden = !text;
}

/** The gateway wants a key (or refused the one given): show nothing but the key form. */
function lock(message) {
  const hadKey = sessionStorage.getItem(KEY_STORE) !== null;
  sessionStorage.removeItem(KEY_STORE);
  reset();
  ui.main.hidden = true;
  ui.login.hidden = false;
  ui.forget.hidden = true;
  ui.keyError.textContent = message ?? (hadKey ? 'The gateway refused this key.' : '');
  setConn('locked');
  ui.keyInput.focus();
}

function unlock() {
  ui.login.hidden = true;
  ui.main.hidden = false;
  ui.forget.hidden = sessionStorage.getItem(KEY_STORE) === null;
}

async function refused(res) {
  if (res.status === 401) {
    lock();
    return false;
  }
  if (res.status === 404) {
    notice('This gateway runs without its RL control plane (no /v1/rl routes): there is nothing to show.');
    return false;
  }
  notice(`The gateway answered ${res.status}; trying again.`);
  return true;
}

function start() {
  reset();
  stream = follow(api('v1/rl/events'), {
    headers: authHeaders,
    onAnswer: refused,
    onStatus: (s) => {
      if (s === 'live') {
        unlock();
        notice('');
      }
      if (s !== 'stopped' || ui.conn.dataset.conn !== 'locked') setConn(s);
    },
    onEvent: onFleetEvent,
  });
}

function onFleetEvent(ev) {
  const data = parse(ev.data);
  if (!data) return;
  if (ev.type === 'snapshot') {
    fleet.replace(data.workers ?? []);
    let finished = 0;
    for (const entry of data.refits ?? []) {
      const r = refits.listed(entry);
      if (r.running || finished++ < FINISHED_REPLAYS) replay(r);
    }
  } else if (ev.type === 'engine') {
    fleet.put(data);
  } else if (ev.type === 'routing') {
    fleet.figures(data);
  } else if (ev.type === 'refit') {
    const known = refits.byId.has(data.refit_id);
    const r = refits.event(data);
    // A refit whose start this page missed: fetch its events from the beginning.
    if (!known && data.type !== 'accepted') replay(r);
  }
  redraw();
}

/** Follows GET /v1/rl/refits/{id}/events: it replays from the refit's start and ends after `report`. */
function replay(r) {
  if (r.replayed) return;
  r.replayed = true;
  if (r.running) open(r.id);
  else {
    queue.push(r.id);
    pump();
  }
}

function open(id) {
  const r = refits.get(id);
  const done = () => {
    replays.get(id)?.close();
    replays.delete(id);
    pump();
  };
  const follower = follow(api(`v1/rl/refits/${encodeURIComponent(id)}/events`), {
    headers: authHeaders,
    onAnswer: async (res) => {
      if (res.status === 401) lock();
      queueMicrotask(done); // 404: its events are no longer kept; the report still shows
      return false;
    },
    onEvent: (ev) => {
      const data = parse(ev.data);
      if (data && refits.byId.has(id)) {
        refits.event(data);
        redraw();
      }
    },
    // The stream ends after `report`; ended before it, the connection dropped: go on from Last-Event-ID.
    onEnd: () => {
      if (r.report) queueMicrotask(done);
      return Boolean(r.report);
    },
  });
  replays.set(id, follower);
}

function pump() {
  while (queue.length && [...replays.keys()].filter((id) => !refits.byId.get(id)?.running).length < PARALLEL_REPLAYS) {
    const id = queue.shift();
    if (refits.byId.has(id)) open(id); // else forgotten meanwhile (too old to show)
  }
}

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function redraw() {
  if (drawn) return;
  drawn = true;
  requestAnimationFrame(() => {
    drawn = false;
    draw();
  });
}

function draw() {
  fleetView.render(fleet, refits.holders());
  if (refits.changed || [...refits.byId.values()].some((r) => r.running)) {
    refitsView.render(refits, fleet, { all: false });
    refits.changed = false;
  }
}

// Running refits' bars grow with time even when no event arrives.
setInterval(() => {
  if ([...refits.byId.values()].some((r) => r.running)) redraw();
}, 500);

ui.keyForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const key = ui.keyInput.value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY_STORE, key);
  ui.keyInput.value = '';
  ui.keyError.textContent = '';
  ui.login.hidden = true;
  start();
});

ui.forget.addEventListener('click', () => {
  sessionStorage.removeItem(KEY_STORE);
  start();
});

start();
