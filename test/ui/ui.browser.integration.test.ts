// The web page at /ui in a real browser (Debian's chromium, driven by playwright-core) against a
// real gateway, nats-server and SGLang simulators: the page lists the fleet, shows each engine's
// load and prefix hit rate as its row reports them while requests run, follows a refit phase by
// phase through the gateway's server-sent events, shows a failed leg with its error and the
// engine's status, turns a killed engine unreachable, and with an admin key shows nothing until
// the key is given. Without the browser binary these tests fail; they never skip.

import { existsSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const CHROMIUM = '/usr/lib/chromium/chromium';
const WAIT_MS = 20_000;

const disk = (v: string) => ({ weight_version: v, source: { kind: 'disk', model_path: `/models/step-${v}` } });

async function launchBrowser(): Promise<Browser> {
  expect(existsSync(CHROMIUM), `no browser at ${CHROMIUM} (Debian package chromium)`).toBe(true);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/** A page with its uncaught script errors collected (a page that throws fails the test). */
async function openPage(context: BrowserContext, url: string): Promise<{ page: Page; errors: Error[] }> {
  const page = await context.newPage();
  const errors: Error[] = [];
  page.on('pageerror', (e) => errors.push(e));
  await page.goto(url);
  return { page, errors };
}

// Browser-side expressions are given as source text: they run in the page, not under Node's types.

/**
 * Waits until the expression, evaluated in the page, is true. Polled with page.evaluate rather
 * than waitForFunction: the latter's poller evals the string inside the page, which the page's
 * own CSP (`script-src 'self'`) can refuse (a CI run failed with an EvalError there).
 */
async function until(page: Page, expression: string): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!(await page.evaluate(expression))) {
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${expression}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until exactly `n` elements match `selector`. */
async function count(page: Page, selector: string, n: number): Promise<void> {
  await until(page, `document.querySelectorAll(${JSON.stringify(selector)}).length === ${n}`);
}

/** Waits until the first element matching `selector` has exactly this text. */
async function text(page: Page, selector: string, want: string): Promise<void> {
  await until(page, `document.querySelector(${JSON.stringify(selector)})?.textContent === ${JSON.stringify(want)}`);
}

/** The `routing` object of a GET /v1/rl/workers row, as far as the page shows it. */
interface ApiRouting {
  prompt_tokens: number;
  cached_tokens: number;
  prefix_hit_rate: number;
  queued_tokens: number;
}

const row = (url: string) => `#fleet-table tr[data-url="${url}"]`;
const tile = (url: string) => `#tiles .tile[data-url="${url}"]`;
const leg = (refit: string, url: string, phase: string, outcome: string) =>
  `${refit} tr[data-url="${url}"] td.leg[data-phase="${phase}"][data-outcome="${outcome}"]`;

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});

describe('web page /ui', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let context: BrowserContext;
  let page: Page;
  let errors: Error[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    // Slow loads must not hit the control deadline; one failed probe makes a dead engine unreachable.
    t = await startTestGateway({ probeFailureThreshold: 1, rl: { controlTimeoutSecs: 30 } });
    await t.register(sims.map((s) => s.url));
    context = await browser.newContext();
    ({ page, errors } = await openPage(context, `${t.url}/ui`));
  });
  afterAll(async () => {
    await context?.close();
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });
  afterEach(() => {
    expect(errors.map((e) => e.message)).toEqual([]);
  });

  it('is served from the package without a key: the page, its files with their content types, no-cache with an ETag; nothing outside ui/', async () => {
    const root = await t.http('GET', '/');
    expect(root.status).toBe(302);
    expect(new URL(String(root.headers.location), `${t.url}/`).pathname).toBe('/ui');

    const html = await t.http('GET', '/ui');
    expect(html.status).toBe(200);
    expect(html.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(html.headers['cache-control']).toBe('no-cache');
    expect(String(html.headers['content-security-policy'])).toContain("connect-src 'self'");
    const again = await t.http('GET', '/ui', { headers: { 'if-none-match': String(html.headers.etag) } });
    expect(again.status).toBe(304);

    for (const [file, type] of [
      ['app.js', 'text/javascript; charset=utf-8'],
      ['style.css', 'text/css; charset=utf-8'],
    ]) {
      const res = await t.http('GET', `/ui/${file}`);
      expect(res.status, file).toBe(200);
      expect(res.headers['content-type'], file).toBe(type);
    }
    for (const path of ['/ui/..%2Fpackage.json', '/ui/..%2F..%2Fpackage.json', '/ui/%2Fetc%2Fpasswd', '/ui/missing.js']) {
      const res = await t.http('GET', path);
      expect(res.status, path).toBe(404);
      expect(res.json.error, path).toBe('not_found');
    }
  });

  it('parses text/event-stream as browsers do, whatever the chunking: CRLF split across chunks, multi-line data, comments, ids kept', async () => {
    // The page's own module as the gateway serves it, loaded by the browser (as source text, too:
    // the test runner would rewrite an `import()` in a function it compiles).
    const parsed = (await page.evaluate(`(async () => {
      const { parser } = await import(location.origin + '/ui/sse.js');
      const text = ': stream open\\r\\n\\r\\nid: 7\\r\\nevent: leg\\r\\ndata: {"a":\\r\\ndata: 1}\\r\\n\\r\\nretry: 2500\\ndata: plain\\n\\nevent: report\\rdata:x\\r\\r';
      const runs = [], ids = [], retries = [];
      for (const size of [1, 2, 3, 7, text.length]) {
        const out = [], seen = [], retry = [];
        const feed = parser((e) => out.push(e), (v) => seen.push(v), (n) => retry.push(n));
        for (let i = 0; i < text.length; i += size) feed(text.slice(i, i + size));
        runs.push(out);
        ids.push(seen);
        retries.push(retry);
      }
      return { runs, ids, retries };
    })()`)) as { runs: object[][]; ids: string[][]; retries: number[][] };
    const want = [
      { type: 'leg', data: '{"a":\n1}', id: '7' },
      { type: 'message', data: 'plain', id: '7' },
      { type: 'report', data: 'x', id: '7' },
    ];
    for (const run of parsed.runs) expect(run).toEqual(want);
    for (const ids of parsed.ids) expect(ids).toEqual(['7']);
    for (const r of parsed.retries) expect(r).toEqual([2500]);
  });

  it('lists every engine in the table and as tiles, serving, with its version and owner replica', async () => {
    await count(page, '#fleet-table tbody tr', sims.length);
    for (const s of sims) {
      await page.waitForSelector(`${row(s.url)}[data-state="serving"]`, { timeout: WAIT_MS });
      await page.waitForSelector(`${tile(s.url)}[data-tone="serving"]`, { timeout: WAIT_MS });
    }
    const rows = (await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; owner: string; weight_version: string | null }>;
    for (const w of rows) {
      expect(await page.textContent(`${row(w.url)} .col-owner`)).toBe(w.owner);
      expect(await page.textContent(`${row(w.url)} .col-version`)).toBe(w.weight_version ?? '—');
    }
    expect(await page.isVisible('#login')).toBe(false);
  });

  it("shows each engine's load (in flight, queued tokens) and prefix hit rate as the rows report them, kept up to date while requests run", async () => {
    const prompt = { input_ids: Array.from({ length: 64 }, (_, i) => 500 + i), sampling_params: { max_new_tokens: 4, ignore_eos: true } };
    const first = await t.http('POST', '/generate', { body: prompt });
    expect(first.status, first.text).toBe(200);
    const home = String(first.headers['x-smg-routed-worker-id']);
    expect(sims.map((s) => s.url)).toContain(home);
    const apiRow = async () =>
      ((await t.http('GET', '/v1/rl/workers')).json.workers as Array<{ url: string; load: number; routing: ApiRouting }>).find((w) => w.url === home)!;

    // A repeat held by the engine for 3 s: in flight there, with its work queued.
    await sims.find((s) => s.url === home)!.setFaults({ route: 'generate', delayMs: 3000, times: 1 });
    const held = t.http('POST', '/generate', { body: prompt });
    let busy = await apiRow();
    for (const deadline = Date.now() + WAIT_MS; busy.load !== 1 && Date.now() < deadline; busy = await apiRow()) await new Promise((r) => setTimeout(r, 50));
    expect(busy.load).toBe(1);
    expect(busy.routing.queued_tokens).toBeGreaterThan(0);
    await text(page, `${row(home)} .col-load`, '1');
    await text(page, `${row(home)} .col-queued`, String(busy.routing.queued_tokens));
    expect((await held).status).toBe(200);
    expect((await t.http('POST', '/generate', { body: prompt })).status).toBe(200);

    // All three answered: the page shows the hit rate the row reports, and an empty queue.
    let done = await apiRow();
    for (const deadline = Date.now() + WAIT_MS; done.routing.prompt_tokens < 3 * 64 && Date.now() < deadline; done = await apiRow())
      await new Promise((r) => setTimeout(r, 50));
    const r = done.routing;
    expect(r.prompt_tokens).toBe(3 * 64);
    expect(r.cached_tokens).toBeGreaterThan(0);
    await text(page, `${row(home)} .col-hit`, `${(r.prefix_hit_rate * 100).toFixed(1)}%`);
    await text(page, `${row(home)} .col-queued`, String(r.queued_tokens));
    await text(page, `${row(home)} .col-load`, '0');
    expect(await page.getAttribute(`${row(home)} .col-hit`, 'title')).toContain(`${r.cached_tokens} of ${r.prompt_tokens} prompt tokens cached`);
    expect(await page.getAttribute(tile(home), 'title')).toContain(`prefix hit ${(r.prefix_hit_rate * 100).toFixed(1)}%`);
    // Engines nothing was sent to: no hit rate yet, nothing queued.
    for (const s of sims.filter((x) => x.url !== home)) {
      expect(await page.textContent(`${row(s.url)} .col-hit`)).toBe('—');
      expect(await page.textContent(`${row(s.url)} .col-queued`)).toBe('0');
    }
  });

  it('follows a refit as it runs: pause ok on each engine, then the refit step running, then the report', async () => {
    await Promise.all(sims.map((s) => s.setFaults({ route: 'update_weights_from_disk', delayMs: 4000, times: 1 })));
    const answer = t.http('POST', '/v1/rl/refits', { body: disk('7') });
    const running = 'article.refit[data-status="running"]';
    await page.waitForSelector(running, { timeout: WAIT_MS });
    for (const s of sims) await page.waitForSelector(leg(running, s.url, 'pause', 'ok'), { timeout: WAIT_MS });
    for (const s of sims) {
      await page.waitForSelector(leg(running, s.url, 'refit:0', 'running'), { timeout: WAIT_MS });
      // The fleet table names the refit that holds each engine while it runs.
      await page.waitForSelector(`${row(s.url)}[data-refit]`, { timeout: WAIT_MS });
    }

    const report = (await answer).json;
    expect(report.status).toBe('succeeded');
    const done = `article.refit[data-refit="${report.id}"]`;
    await page.waitForSelector(`${done}[data-status="${report.status}"]`, { timeout: WAIT_MS });
    for (const s of sims) {
      for (const phase of ['pause', 'refit:0', 'resume']) await page.waitForSelector(leg(done, s.url, phase, 'ok'), { timeout: WAIT_MS });
      await text(page, `${row(s.url)} .col-version`, '7');
      await page.waitForSelector(`${row(s.url)}:not([data-refit])[data-state="serving"]`, { timeout: WAIT_MS });
    }
    expect(await page.textContent(`${done} .refit-now`)).toContain(`${report.succeeded}/${report.total} ok`);
  });

  it('follows a rolling refit: the wave running on the refit, each wave as a refit of its own with its legs, then the report over the waves', async () => {
    await Promise.all(sims.map((s) => s.setFaults({ route: 'update_weights_from_disk', delayMs: 1500, times: 1 })));
    const id = 'ui-rolling';
    const answer = t.http('POST', '/v1/rl/refits', { body: { ...disk('17'), refit_id: id, strategy: { kind: 'rolling' } } });
    const parent = `article.refit[data-refit="${id}"]`;
    await page.waitForSelector(`${parent}[data-wave="1"]`, { timeout: WAIT_MS });
    await text(page, `${parent} .refit-now`, `now: wave 1/${sims.length} refitting (${id}-w1)`);
    // The first wave's own refit shows its engine's legs.
    const w1 = `article.refit[data-refit="${id}-w1"]`;
    await page.waitForSelector(`${w1} td.leg[data-phase="refit:0"][data-outcome="running"]`, { timeout: WAIT_MS });
    const report = (await answer).json;
    expect(report.status).toBe('succeeded');
    await page.waitForSelector(`${parent}[data-status="succeeded"]`, { timeout: WAIT_MS });
    expect(await page.textContent(`${parent} .refit-now`)).toContain(`${report.succeeded}/${report.total} ok`);
    expect(await page.textContent(`${parent} .refit-now`)).toContain(`over ${sims.length} waves`);
    for (let n = 1; n <= sims.length; n++) await page.waitForSelector(`article.refit[data-refit="${id}-w${n}"][data-status="succeeded"]`, { timeout: WAIT_MS });
  });

  it("shows a failed leg with its error code and the engine's HTTP status, and the report's status", async () => {
    const failing = sims[0]!;
    await failing.setFaults({ route: 'update_weights_from_disk', status: 501, body: { error: 'not implemented' }, times: 1 });
    const report = (await t.http('POST', '/v1/rl/refits', { body: disk('8') })).json;
    expect(report.status).toBe('partial');
    const failed = report.engines.find((e: { url: string }) => e.url === failing.url);
    expect(failed).toMatchObject({ outcome: 'failed', status: 501 });

    const art = `article.refit[data-refit="${report.id}"]`;
    await page.waitForSelector(`${art}[data-status="partial"]`, { timeout: WAIT_MS });
    const cell = `${art} tr[data-url="${failing.url}"] td.leg[data-phase="refit:0"][data-outcome="failed"]`;
    await page.waitForSelector(`${cell}[data-status="501"][data-error="${failed.error}"]`, { timeout: WAIT_MS });
    expect(await page.textContent(cell)).toContain(failed.error);
    for (const s of sims.slice(1)) await page.waitForSelector(leg(art, s.url, 'refit:0', 'ok'), { timeout: WAIT_MS });
  });

  it('turns an engine unreachable when its process dies', async () => {
    const dead = sims[2]!;
    await dead.kill();
    await page.waitForSelector(`${row(dead.url)}[data-state="unreachable"]`, { timeout: WAIT_MS });
    await page.waitForSelector(`${tile(dead.url)}[data-tone="unreachable"]`, { timeout: WAIT_MS });
    for (const s of sims.slice(0, 2)) expect(await page.getAttribute(row(s.url), 'data-state')).toBe('serving');
  });
});

describe('web page /ui with an admin key', () => {
  const KEY = 'page-admin-key';
  let t: TestGateway;
  let sim: SimProcess;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway({ adminKey: KEY });
    await t.register([sim.url]);
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  it('serves the page without the key, while its data need it', async () => {
    for (const path of ['/ui', '/ui/app.js', '/ui/style.css']) expect((await t.http('GET', path)).status, path).toBe(200);
    expect((await t.http('GET', '/v1/rl/workers')).status).toBe(401);
  });

  it('shows nothing until the key is entered, refuses a wrong key, then follows the fleet and a refit with it', async () => {
    const context = await browser.newContext();
    const { page, errors } = await openPage(context, `${t.url}/ui`);
    await page.waitForSelector('#login', { state: 'visible', timeout: WAIT_MS });
    expect(await page.isVisible('#main')).toBe(false);
    expect(await page.$$('#fleet-table tbody tr')).toHaveLength(0);
    expect(await page.$$('#tiles .tile')).toHaveLength(0);

    await page.fill('#key-input', 'not-the-key');
    await page.click('#key-form button[type="submit"]');
    await until(page, `(document.getElementById('key-error')?.textContent ?? '') !== ''`);
    expect(await page.isVisible('#login')).toBe(true);
    expect(await page.isVisible('#main')).toBe(false);
    expect(await page.$$('#fleet-table tbody tr')).toHaveLength(0);

    await page.fill('#key-input', KEY);
    await page.click('#key-form button[type="submit"]');
    await page.waitForSelector(`${row(sim.url)}[data-state="serving"]`, { timeout: WAIT_MS });
    expect(await page.isVisible('#login')).toBe(false);
    expect(await page.evaluate(`sessionStorage.getItem('rlgate.admin-key')`)).toBe(KEY);

    // The key stays for the tab: a reload goes straight to the fleet.
    await page.reload();
    await page.waitForSelector(`${row(sim.url)}[data-state="serving"]`, { timeout: WAIT_MS });
    expect(await page.isVisible('#login')).toBe(false);

    const report = (await t.http('POST', '/v1/rl/refits', { body: disk('3'), headers: { authorization: `Bearer ${KEY}` } })).json;
    expect(report.status).toBe('succeeded');
    await page.waitForSelector(`article.refit[data-refit="${report.id}"][data-status="succeeded"]`, { timeout: WAIT_MS });
    await page.waitForSelector(leg(`article.refit[data-refit="${report.id}"]`, sim.url, 'resume', 'ok'), { timeout: WAIT_MS });
    expect(errors.map((e) => e.message)).toEqual([]);
    await context.close();
  });
});

describe('web page /ui with RL off', () => {
  let t: TestGateway;

  beforeAll(async () => {
    t = await startTestGateway({ rl: { enabled: false } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('is still served, and says there is nothing to show instead of asking for a key', async () => {
    const context = await browser.newContext();
    const { page, errors } = await openPage(context, `${t.url}/ui`);
    await page.waitForSelector('#notice', { state: 'visible', timeout: WAIT_MS });
    expect(await page.textContent('#notice')).toContain('/v1/rl');
    expect(await page.isVisible('#login')).toBe(false);
    expect(await page.isVisible('#main')).toBe(false);
    expect(errors.map((e) => e.message)).toEqual([]);
    await context.close();
  });
});
