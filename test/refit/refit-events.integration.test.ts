// A refit seen as it runs (docs/refit-events.md): every engine's every phase and step is an event
// on `rl.refit.<id>.events`; GET /v1/rl/refits/{id}/events streams them as server-sent events,
// replayed from the start (or after Last-Event-ID) and ending with the report; GET /v1/rl/refits
// lists the running refit with its phase; `Prefer: respond-async` answers 202 once it is queued;
// GET /v1/rl/events sends the fleet's snapshot, then engine changes, refit events and, for the
// engines whose load or routing figures moved, `routing` events.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

interface SseEvent {
  id: string | undefined;
  event: string;
  data: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- assertions read it
}

/** Reads a text/event-stream answer until `until` says stop or the stream ends. */
async function readSse(url: string, opts: { headers?: Record<string, string>; until?: (e: SseEvent, all: SseEvent[]) => boolean; timeoutMs?: number } = {}) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), opts.timeoutMs ?? 30_000);
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...opts.headers }, signal: ctrl.signal });
  const events: SseEvent[] = [];
  const out = { status: res.status, contentType: res.headers.get('content-type'), events, ended: false, body: '' };
  if (res.status !== 200) {
    out.body = await res.text();
    clearTimeout(timer);
    return out;
  }
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        out.ended = true;
        break;
      }
      buf += decoder.decode(value, { stream: true });
      let cut: number;
      let stop = false;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const fields: Record<string, string> = {};
        for (const line of block.split('\n')) {
          if (line.startsWith(':') || !line.includes(':')) continue;
          const k = line.slice(0, line.indexOf(':'));
          fields[k] = line.slice(line.indexOf(':') + 1).trimStart();
        }
        if (fields.event === undefined) continue;
        const e = { id: fields.id, event: fields.event, data: JSON.parse(fields.data ?? 'null') };
        events.push(e);
        if (opts.until?.(e, events)) stop = true;
      }
      if (stop) break;
    }
  } catch (err) {
    if (!ctrl.signal.aborted) throw err;
  } finally {
    clearTimeout(timer);
    ctrl.abort();
  }
  return out;
}

describe('refit progress events', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('the fleet stream sends a `routing` event ({id, load, routing}, as the rows show them) for an engine whose figures moved, and none while nothing moves', async () => {
    const body = { input_ids: [5, 6, 7, 8], sampling_params: { max_new_tokens: 2 } };
    // The request goes once the snapshot is out, so the figures it moves are news to the stream.
    const moved = await readSse(`${t.url}/v1/rl/events`, {
      until: (e) => {
        if (e.event === 'snapshot') void t.http('POST', '/generate', { body });
        return e.event === 'routing' && e.data.routing.prompt_tokens > 0;
      },
    });
    const ev = moved.events.at(-1)!;
    expect(ev.event).toBe('routing');
    expect(Object.keys(ev.data).sort()).toEqual(['id', 'load', 'routing']);
    const row = (await t.http('GET', `/v1/rl/workers/${ev.data.id}`)).json;
    expect(ev.data).toEqual({ id: row.id, load: row.load, routing: row.routing });
    expect(row.routing).toMatchObject({ prompt_tokens: 4, decisions: { min_load: 1 } });

    // Nothing moves now: a new stream's snapshot has the figures, and no `routing` event follows.
    const quiet = await readSse(`${t.url}/v1/rl/events`, { until: () => false, timeoutMs: 2_500 });
    expect(quiet.events[0]!.event).toBe('snapshot');
    expect(quiet.events[0]!.data.workers.find((w: { id: string }) => w.id === row.id).routing).toEqual(row.routing);
    expect(quiet.events.filter((e) => e.event === 'routing')).toEqual([]);
  });

  it("streams every phase and every engine's leg, names a failed load's status, lists the refit while it runs, and replays from the start", async () => {
    for (const s of sims) await s.setFaults({ route: 'update_weights_from_disk', delayMs: 800, times: 1 });
    // One engine cannot load: its leg must say so, with the engine's 501.
    await sims[2]!.setFaults({ route: 'update_weights_from_disk', status: 501, body: { success: false, message: 'not implemented' }, times: 1 });
    const fleet = readSse(`${t.url}/v1/rl/events`, { until: (e) => e.event === 'refit' && e.data.type === 'report' });

    const accepted = await t.http('POST', '/v1/rl/refits', {
      body: { refit_id: 'ev-1', weight_version: 'ev-1', source: { kind: 'disk', model_path: '/m/ev-1' } },
      headers: { prefer: 'respond-async' },
    });
    expect(accepted.status, accepted.text).toBe(202);
    expect(accepted.headers.location).toBe('/v1/rl/refits/ev-1');
    expect(accepted.json).toEqual({ id: 'ev-1', status: 'accepted', events: '/v1/rl/refits/ev-1/events' });
    // Its Location answers at once, queued or already running (never 404 before a runner takes it).
    const located = await t.http('GET', accepted.headers.location as string);
    expect(located.status, located.text).toBe(200);
    expect(['queued', 'running']).toContain(located.json.status);

    // Running, with its phase, at the top of the list.
    let listed: any;
    for (let i = 0; i < 100; i++) {
      listed = (await t.http('GET', '/v1/rl/refits')).json.refits[0];
      if (listed?.id === 'ev-1' && listed.status === 'running' && listed.phase === 'refit') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(listed).toMatchObject({ id: 'ev-1', status: 'running', phase: 'refit', total: 3 });

    const live = await readSse(`${t.url}/v1/rl/refits/ev-1/events`);
    expect(live.status).toBe(200);
    expect(live.contentType).toMatch(/^text\/event-stream/);
    expect(live.ended, 'the stream ends after the report').toBe(true);
    const types = live.events.map((e) => e.event);
    expect(types[0]).toBe('accepted');
    expect(types.at(-1)).toBe('report');
    expect(types.filter((x) => x === 'report')).toHaveLength(1);
    for (const e of live.events) expect(e.data).toMatchObject({ refit_id: 'ev-1', type: e.event });
    const ids = live.events.map((e) => Number(e.id));
    expect(ids.every((n, i) => Number.isInteger(n) && (i === 0 || n > ids[i - 1]!))).toBe(true);

    const started = live.events.find((e) => e.event === 'started')!;
    expect(started.data).toMatchObject({ targets: expect.any(Array), quorum: 1, steps: expect.any(Array), verify: expect.any(Boolean) });
    const phases = live.events.filter((e) => e.event === 'phase').map((e) => e.data.phase);
    expect(phases).toEqual(expect.arrayContaining(['pause', 'refit', 'resume']));
    expect(phases.indexOf('pause')).toBeLessThan(phases.indexOf('refit'));
    expect(phases.indexOf('refit')).toBeLessThan(phases.lastIndexOf('resume'));
    const refitPhase = live.events.find((e) => e.event === 'phase' && e.data.phase === 'refit')!;
    expect(refitPhase.data.step).toEqual(expect.any(String));
    expect(refitPhase.data.targets).toHaveLength(3);

    const legs = live.events.filter((e) => e.event === 'leg').map((e) => e.data);
    for (const s of sims) {
      const mine = legs.filter((l) => l.url === s.url);
      expect(
        mine.filter((l) => l.phase === 'pause'),
        `${s.url} pause leg`,
      ).toHaveLength(1);
      expect(
        mine.filter((l) => l.phase === 'refit'),
        `${s.url} refit leg`,
      ).toHaveLength(1);
      for (const l of mine) {
        expect(l).toMatchObject({ worker_id: expect.any(String), step_index: expect.any(Number), latency_ms: expect.any(Number) });
        expect(Date.parse(l.finished_at)).toBeGreaterThanOrEqual(Date.parse(l.started_at));
      }
    }
    const failedLoad = legs.find((l) => l.url === sims[2]!.url && l.phase === 'refit')!;
    expect(failedLoad).toMatchObject({ outcome: 'failed', status: 501, error: 'upstream_error' });
    for (const s of sims.slice(0, 2)) {
      expect(legs.find((l) => l.url === s.url && l.phase === 'refit')).toMatchObject({ outcome: 'ok', status: 200 });
      expect(legs.find((l) => l.url === s.url && l.phase === 'resume')).toMatchObject({ outcome: 'ok' });
    }
    const report = live.events.at(-1)!.data.report;
    expect(report).toMatchObject({ id: 'ev-1', status: 'partial', succeeded: 2, total: 3 });
    // The report agrees with the GET.
    expect((await t.http('GET', '/v1/rl/refits/ev-1')).json.status).toBe('partial');

    // Replayed from the start, the same events in the same order; after Last-Event-ID, the rest.
    const again = await readSse(`${t.url}/v1/rl/refits/ev-1/events`);
    expect(again.events.map((e) => [e.id, e.event])).toEqual(live.events.map((e) => [e.id, e.event]));
    const cut = live.events[3]!;
    const rest = await readSse(`${t.url}/v1/rl/refits/ev-1/events`, { headers: { 'last-event-id': cut.id! } });
    expect(rest.events.map((e) => e.id)).toEqual(live.events.slice(4).map((e) => e.id));

    // The fleet stream: the snapshot first, then this refit's events and the engines' changes.
    const f = await fleet;
    expect(f.events[0]!.event).toBe('snapshot');
    expect(f.events[0]!.data.workers.map((w: { url: string }) => w.url).sort()).toEqual(sims.map((s) => s.url).sort());
    expect(Array.isArray(f.events[0]!.data.refits)).toBe(true);
    const refitEvents = f.events.filter((e) => e.event === 'refit' && e.data.refit_id === 'ev-1');
    expect(refitEvents.map((e) => e.data.type)).toEqual(live.events.map((e) => e.event));
    const states = f.events.filter((e) => e.event === 'engine' && e.data.url === sims[0]!.url).map((e) => e.data.state);
    expect(states).toEqual(expect.arrayContaining(['paused', 'refitting', 'serving']));
    const row = f.events.find((e) => e.event === 'engine')!.data;
    expect(row).toMatchObject({
      id: expect.any(String),
      url: expect.any(String),
      control: expect.any(String),
      breaker: expect.any(String),
      owner: expect.any(String),
    });

    // The engines' own word: the two that loaded serve the new version, none is paused.
    for (const s of sims) expect((await s.state()).paused).toBeNull();
    expect((await sims[0]!.state()).weightVersion).toBe('ev-1');
  });

  it('an engine cut by a phase deadline has one leg event, with the deadline error the report gives, and no late one', async () => {
    await sims[1]!.setFaults({ route: 'update_weights_from_disk', hang: true, times: 1 });
    try {
      const r = await t.http('POST', '/v1/rl/refits', {
        body: { refit_id: 'ev-cut', weight_version: 'ev-cut', source: { kind: 'disk', model_path: '/m/ev-cut' }, deadlines_ms: { refit: 1500 } },
      });
      expect(r.status, r.text).toBe(207);
      const hung = r.json.failed.find((f: { url: string }) => f.url === sims[1]!.url);
      expect(hung).toMatchObject({ failed_phase: 'refit', error: 'phase_deadline_exceeded' });
      // The hung call is cut now: an answer it might still get must not show up as a leg.
      await sims[1]!.releaseHung();
      await new Promise((res) => setTimeout(res, 500));
      const replay = await readSse(`${t.url}/v1/rl/refits/ev-cut/events`);
      const legs = replay.events.filter((e) => e.event === 'leg' && e.data.url === sims[1]!.url && e.data.phase === 'refit');
      expect(legs.map((e) => [e.data.outcome, e.data.error])).toEqual([['failed', 'phase_deadline_exceeded']]);
      expect(legs[0]!.data.latency_ms).toBeGreaterThanOrEqual(1400);
    } finally {
      await sims[1]!.clearFaults();
    }
  });

  it('answers 404 refit_not_found for a refit nobody knows, before any stream opens', async () => {
    const r = await readSse(`${t.url}/v1/rl/refits/nobody-ran-this/events`);
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body)).toMatchObject({ error: 'refit_not_found' });
  });

  it('publishes the same events on NATS, on rl.refit.<id>.events', async () => {
    const bus = await t.bus();
    const seen: any[] = [];
    const sub = bus.subscribe('rl.refit.ev-2.events', (data) => void seen.push(data));
    try {
      const r = await t.http('POST', '/v1/rl/refits', { body: { refit_id: 'ev-2', weight_version: 'ev-2', source: { kind: 'disk', model_path: '/m/ev-2' } } });
      expect(r.status, r.text).toBe(200);
      for (let i = 0; i < 50 && seen.at(-1)?.type !== 'report'; i++) await new Promise((res) => setTimeout(res, 20));
      const replay = await readSse(`${t.url}/v1/rl/refits/ev-2/events`);
      expect(seen.map((e) => e.type)).toEqual(replay.events.map((e) => e.event));
      expect(seen.filter((e) => e.type === 'leg')).toHaveLength(3 * replay.events.filter((e) => e.event === 'phase').length);
    } finally {
      sub.unsubscribe();
      await bus.close();
    }
  });
});
