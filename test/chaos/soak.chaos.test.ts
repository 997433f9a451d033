// Chaos scenario `soak` (issue 15, item 8): a gateway process under a long steady run of `/generate`
// (32 at a time over 4 SGLang simulators) with a refit every few thousand requests. What must hold:
// every request and every refit answers 200, no engine is left paused, each ends on the last
// version, and the gateway's resident memory holds flat: its peak over the last quarter of the run
// is within 10% of its peak over the second quarter (the first is V8 growing its heap to its
// working size; RSS swings by a third between collections, so peaks, sampled every 250 requests,
// are compared, not single readings). Read from the kernel (/proc/<pid>/status), never from the
// gateway's own metrics. Short form: 4,000 requests and 4 refits; full: 100,000 and 200.

import { readFileSync } from 'node:fs';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chaosRandom, chaosSize, chaosTimeout, reportFigures } from '../fixtures/chaos.ts';
import { startGatewayProcess, until, type GatewayProcess } from '../fixtures/gateway-process.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const REQUESTS = chaosSize(4_000, 100_000);
const REFITS = chaosSize(4, 200);
const CONCURRENCY = 32;
const RSS_GROWTH_BOUND = 1.1;

/** Resident memory of a process, in bytes, as the kernel counts it. */
function rssOf(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line!.replace(/\D+/g, '')) * 1024;
}

describe('soak: a long steady run of rollouts and refits', () => {
  let nats: TestNats;
  let sims: SimProcess[] = [];
  let gw: GatewayProcess;

  beforeAll(async () => {
    nats = await startTestNats();
    sims = await Promise.all([0, 1, 2, 3].map(() => spawnSglangSim(['--token-rate', '0'])));
    gw = await startGatewayProcess(['--nats-url', nats.url, '--enable-rl', '--health-check-interval-secs', '2']);
    for (const s of sims) expect((await gw.http('POST', '/workers', { url: s.url })).status).toBe(202);
    await until('every engine serving', 20_000, async () => {
      const rows = (await gw.http('GET', '/v1/rl/workers')).json.workers as Array<{ state: string }>;
      return rows.length === sims.length && rows.every((w) => w.state === 'serving');
    });
  }, 60_000);
  afterAll(async () => {
    await gw?.stop();
    await Promise.all(sims.map((s) => s.stop()));
    await nats?.stop();
  });

  it(
    'answers everything, leaves nothing paused, and holds its memory flat',
    async () => {
      const random = chaosRandom('soak');
      const pool = new Pool(gw.url, { connections: CONCURRENCY });
      let sent = 0;
      let ok = 0;
      let retried = 0;
      const bad: string[] = [];
      let refits = 0;
      let asked = 0;
      let version = 0;
      const refitStatuses: number[] = [];
      const refitFailures: string[] = [];
      const refitEvery = Math.floor(REQUESTS / REFITS);
      const started = Date.now();
      /** Peak RSS per quarter of the run's requests. */
      const quarterPeak = [0, 0, 0, 0];
      const checkpoints: Array<[number, number]> = [];
      const sampleRss = (n: number) => {
        const q = Math.min(3, Math.floor((4 * n) / REQUESTS));
        quarterPeak[q] = Math.max(quarterPeak[q]!, rssOf(gw.pid));
      };
      // One trainer: refits go one after another, whichever worker's turn asked for one.
      let trainer: Promise<void> = Promise.resolve();
      const refit = () => (trainer = trainer.then(oneRefit));
      const oneRefit = async () => {
        version++;
        const r = await gw.http('POST', '/v1/rl/refits', {
          refit_id: `soak-${version}`,
          weight_version: String(version),
          source: { kind: 'disk', model_path: `/m/${version}` },
        });
        refitStatuses.push(r.status);
        if (r.status !== 200 && refitFailures.length < 3) refitFailures.push(JSON.stringify(r.json?.failed ?? r.json));
        refits++;
      };
      const worker = async () => {
        for (;;) {
          const n = sent++;
          if (n >= REQUESTS) return;
          const body = JSON.stringify({ input_ids: [1, 2, 3, Math.floor(random() * 1000)], sampling_params: { max_new_tokens: 1 + Math.floor(random() * 4) } });
          let res;
          let text;
          // While a refit holds every engine the gateway answers 503 `retryable`: a rollout client
          // (slime's) waits and sends again, and so does this one.
          for (;;) {
            res = await pool.request({ path: '/generate', method: 'POST', headers: { 'content-type': 'application/json' }, body });
            text = await res.body.text();
            if (res.statusCode !== 503 || !text.includes('"retryable":true')) break;
            retried++;
            await new Promise((r) => setTimeout(r, 20));
          }
          if (res.statusCode === 200) ok++;
          else if (bad.length < 5) bad.push(`${res.statusCode} ${text.slice(0, 200)}`);
          else bad.push('');
          if (n % refitEvery === refitEvery - 1 && asked < REFITS) {
            asked++;
            await refit();
          }
          if (n % 250 === 0) sampleRss(n);
          if (n % Math.floor(REQUESTS / 10) === 0) checkpoints.push([n, +(rssOf(gw.pid) / 2 ** 20).toFixed(1)]);
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      while (asked < REFITS) {
        asked++;
        void refit();
      }
      await trainer;
      await pool.close();
      // A moment of rest: what is still held then is held, not in flight.
      await new Promise((r) => setTimeout(r, 2_000));
      const endRss = rssOf(gw.pid);
      quarterPeak[3] = Math.max(quarterPeak[3]!, endRss);
      const mib = (b: number) => +(b / 2 ** 20).toFixed(1);

      const paused: string[] = [];
      const versions: string[] = [];
      for (const s of sims) {
        const st = await s.state();
        if (st.paused !== null) paused.push(s.url);
        versions.push(st.weightVersion);
      }
      reportFigures('soak', {
        requests: REQUESTS,
        requests_ok: ok,
        retried_503: retried,
        refits: REFITS,
        refits_200: refitStatuses.filter((s) => s === 200).length,
        engines_left_paused: paused.length,
        rss_peak_mib_by_quarter: quarterPeak.map(mib),
        rss_end_mib: mib(endRss),
        rss_last_over_second_quarter_peak: +(quarterPeak[3]! / quarterPeak[1]!).toFixed(3),
        rss_mib_by_request: checkpoints,
        duration_s: +((Date.now() - started) / 1000).toFixed(1),
      });
      expect(bad.filter(Boolean), 'failed /generate answers').toEqual([]);
      expect(ok).toBe(REQUESTS);
      expect(refitStatuses, refitFailures.join('\n')).toEqual(Array(REFITS).fill(200));
      expect(paused).toEqual([]);
      expect(versions).toEqual(sims.map(() => String(version)));
      expect(quarterPeak[1]).toBeGreaterThan(0);
      expect(quarterPeak[3]! / quarterPeak[1]!, `peak RSS by quarter (MiB) ${quarterPeak.map(mib).join(', ')}`).toBeLessThanOrEqual(RSS_GROWTH_BOUND);
    },
    chaosTimeout(120_000),
  );
});
