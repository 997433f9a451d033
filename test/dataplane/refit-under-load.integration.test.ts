// Issue 4 acceptance: a refit while 50 streams are open. 3 SGLang simulators at a moderate token
// rate; 30 long streams are open when POST /v1/rl/refits (disk, "2") starts, 20 more are sent
// while it runs (a 503 during the pause is retried, as a trainer's client does). The refit pauses
// in SGLang's abort mode (plan.ts sends `{}`), so running streams end with finish_reason abort.
// Every stream ends 200 + `data: [DONE]`, names the version that produced it, and the simulators'
// own records show no /generate arriving between an engine's pause and its continue.
// An engine leaves routing the moment its pause_generation is sent (lifecycle `pausing`), not
// when the pause answers: the late streams are sent as soon as every engine has left `serving`,
// which is inside the window where the pause calls are still in flight.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess, type SimRequest } from '../fixtures/sglang-sim.ts';

interface Streamed {
  rid: string;
  status: number;
  text: string;
  /** 503 answers retried before the 200. */
  retries: number;
}

/** One streamed /generate on its own socket, read to the end; a 503 (all paused) is retried. */
async function stream(base: string, rid: string, maxNewTokens: number, opened?: () => void): Promise<Streamed> {
  const body = JSON.stringify({ rid, text: `prompt ${rid}`, stream: true, sampling_params: { max_new_tokens: maxNewTokens } });
  for (let retries = 0; ; retries++) {
    const got = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest(`${base}/generate`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
      req.on('error', reject);
      req.on('response', (res) => {
        if (res.statusCode === 200) opened?.();
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
        res.on('error', reject);
      });
      req.end(body);
    });
    if (got.status !== 503 || retries >= 500) return { rid, retries, ...got };
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface Event {
  meta_info: { weight_version: string; finish_reason: { type: string } | null };
}

function events(text: string): Event[] {
  return text
    .split('\n\n')
    .filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice('data: '.length)) as Event);
}

describe('a refit while 50 streams are open', () => {
  let sims: SimProcess[];
  let t: TestGateway;

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '40'])));
    t = await startTestGateway();
    await t.register(sims.map((s) => s.url));
    await Promise.all(sims.map((s) => s.clearRequests()));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('every stream finishes, names its version, and no engine gets a request while paused or refitting', async () => {
    // 30 long streams (200 tokens at 40/s), all open before the refit starts.
    let open = 0;
    let allOpen!: () => void;
    const opened = new Promise<void>((r) => (allOpen = r));
    const early = Array.from({ length: 30 }, (_, i) => stream(t.url, `early-${i}`, 200, () => ++open === 30 && allOpen()));
    await opened;

    const refit = t.http('POST', '/v1/rl/refits', { body: { weight_version: '2', source: { kind: 'disk', model_path: '/models/step-2' } } });
    // 20 short streams while the refit runs, from the moment no engine is serving any more.
    const { registry, view } = t.gw.services;
    const deadline = Date.now() + 10_000;
    while (
      !registry.all().every((w) => {
        const e = view.engine(w);
        return e.state !== 'serving' || e.control !== 'active';
      })
    ) {
      if (Date.now() > deadline) throw new Error('the refit never paused the engines');
      await new Promise((r) => setTimeout(r, 2));
    }
    const late: Promise<Streamed>[] = [];
    for (let i = 0; i < 20; i++) {
      late.push(stream(t.url, `late-${i}`, 8));
      await new Promise((r) => setTimeout(r, 3));
    }
    const report = await refit;
    expect(report.status, report.text).toBe(200);
    expect(report.json.status).toBe('succeeded');
    const all = await Promise.all([...early, ...late]);
    expect(all).toHaveLength(50);

    // Where and when each request arrived, from the simulators' own records.
    const arrival = new Map<string, { seq: number; pause: number; resume: number }>();
    for (const s of sims) {
      const recs: SimRequest[] = await s.requests();
      const pauses = recs.filter((r) => r.path === '/pause_generation');
      const resumes = recs.filter((r) => r.path === '/continue_generation');
      expect(pauses).toHaveLength(1);
      expect(resumes).toHaveLength(1);
      expect(JSON.parse(pauses[0]!.body)).toEqual({}); // SGLang's default: abort mode
      const pause = pauses[0]!.seq;
      const resume = resumes[0]!.seq;
      expect(pause).toBeLessThan(resume);
      for (const r of recs) {
        if (r.path !== '/generate') continue;
        // The core assertion: nothing routed to this engine between its pause and its continue.
        expect(r.seq < pause || r.seq > resume, `/generate seq ${r.seq} at ${s.url} inside pause ${pause}..continue ${resume}`).toBe(true);
        arrival.set(JSON.parse(r.body).rid, { seq: r.seq, pause, resume });
      }
    }

    let aborted = 0;
    let refreshed = 0;
    for (const s of all) {
      expect(s.status, `${s.rid}: ${s.text}`).toBe(200);
      expect(s.text.endsWith('data: [DONE]\n\n'), s.rid).toBe(true);
      const evs = events(s.text);
      expect(evs.length).toBeGreaterThan(0);
      const versions = new Set(evs.map((e) => e.meta_info.weight_version));
      expect(versions.size, `${s.rid} mixes versions`).toBe(1);
      const version = evs[0]!.meta_info.weight_version;
      const finish = evs.at(-1)!.meta_info.finish_reason;
      const at = arrival.get(s.rid);
      expect(at, `${s.rid} never reached an engine`).toBeDefined();
      if (at!.seq < at!.pause) {
        // Ran on the old weights: finished before the pause, or cut by it.
        expect(version, s.rid).toBe('default');
        if (finish?.type === 'abort') aborted++;
      } else {
        expect(version, s.rid).toBe('2');
        expect(finish?.type, s.rid).toBe('length');
        refreshed++;
      }
    }
    // The 30 long streams were all running when the pause landed.
    for (const s of all.slice(0, 30)) expect(events(s.text).at(-1)!.meta_info.finish_reason?.type, s.rid).toBe('abort');
    expect(aborted).toBeGreaterThanOrEqual(30);
    expect(refreshed).toBeGreaterThan(0);
  }, 20_000);
});
