// sglang-router's legacy worker API as slime up to 0.3.0 drives it (`sglang_router` ≤ 0.2.1):
// `POST /add_worker?url=` per engine (answered once the engine is ready, so a rollout can start at
// once), `GET /list_workers` for the abort flow, `/generate`, `POST /remove_worker?url=`. Answers
// and status codes are sglang-router's: plain-text successes, 400 for a worker that cannot be added.

import { createServer } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';
import { spawnTokenspeedSim, type TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import { slimeGet } from '../fixtures/slime-client.ts';

/** What slime's rollout sends: one prompt, no `model`. */
const SLIME_BODY = {
  input_ids: [1, 2, 3],
  sampling_params: { max_new_tokens: 4, no_stop_trim: true, spaces_between_special_tokens: false },
  return_logprob: true,
};

/** slime ≤ 0.3.0's registration: `requests.post(f"{router}/add_worker?url={worker_url}")`, no body, raise_for_status. */
async function addWorker(gateway: string, url: string, extra = ''): Promise<{ status: number; type: string; text: string }> {
  const r = await request(`${gateway}/add_worker?url=${url}${extra}`, { method: 'POST' });
  return { status: r.statusCode, type: String(r.headers['content-type']), text: await r.body.text() };
}

async function removeWorker(gateway: string, url: string, headers: Record<string, string> = {}): Promise<{ status: number; type: string; text: string }> {
  const r = await request(`${gateway}/remove_worker?url=${url}`, { method: 'POST', headers });
  return { status: r.statusCode, type: String(r.headers['content-type']), text: await r.body.text() };
}

async function generateCount(sim: SimProcess): Promise<number> {
  return (await sim.requests()).filter((r) => r.path === '/generate').length;
}

async function deadPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

describe('slime ≤ 0.3.0 against the legacy worker API', () => {
  let t: TestGateway;
  let sims: SimProcess[];

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--model', 'MODEL', '--token-rate', '0'])));
    t = await startTestGateway();
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('add, list, generate, remove, list again', async () => {
    const [a, b] = sims as [SimProcess, SimProcess];
    // Each answer comes once the engine is ready: the rollout's first /generate right after it
    // succeeds, with no retry loop.
    const addA = await addWorker(t.url, a.url);
    expect(addA).toEqual({ status: 200, type: 'text/plain; charset=utf-8', text: `Successfully added worker: ${a.url}` });
    const first = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(first.status, first.text).toBe(200);
    expect(first.headers['x-smg-routed-worker-id']).toBe(a.url);
    expect((await addWorker(t.url, b.url)).text).toBe(`Successfully added worker: ${b.url}`);

    const listed = await slimeGet(`${t.url}/list_workers`);
    expect(listed).toEqual({ urls: [a.url, b.url].sort() });

    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const r = await t.http('POST', '/generate', { body: SLIME_BODY });
      expect(r.status, r.text).toBe(200);
      expect(Array.isArray(r.json)).toBe(false);
      expect(r.json.meta_info.output_token_logprobs).toHaveLength(r.json.meta_info.completion_tokens);
      seen.add(String(r.headers['x-smg-routed-worker-id']));
    }
    expect(seen).toEqual(new Set([a.url, b.url]));

    const removed = await removeWorker(t.url, a.url);
    expect(removed).toEqual({ status: 200, type: 'text/plain; charset=utf-8', text: `Successfully removed worker: ${a.url}` });
    expect(await slimeGet(`${t.url}/list_workers`)).toEqual({ urls: [b.url] });
    expect((await t.http('GET', '/workers')).json.workers.map((w: { url: string }) => w.url)).toEqual([b.url]);

    const before = await generateCount(a);
    for (let i = 0; i < 4; i++) {
      const r = await t.http('POST', '/generate', { body: SLIME_BODY });
      expect(r.status).toBe(200);
      expect(r.headers['x-smg-routed-worker-id']).toBe(b.url);
    }
    expect(await generateCount(a)).toBe(before);
  });

  it('re-adding a registered URL is accepted (a restarted engine registers again)', async () => {
    const b = sims[1]!;
    expect((await addWorker(t.url, b.url)).status).toBe(200);
    expect(await slimeGet(`${t.url}/list_workers`)).toEqual({ urls: [b.url] });
  });

  it('removing a URL that is not registered is 200, as in sglang-router', async () => {
    const r = await removeWorker(t.url, 'http://127.0.0.1:9');
    expect(r).toMatchObject({ status: 200, text: 'Successfully removed worker: http://127.0.0.1:9' });
  });

  it('a worker that never gets ready is 400 after the timeout and is not kept', async () => {
    const dead = `http://127.0.0.1:${await deadPort()}`;
    const r = await addWorker(t.url, dead, '&timeout_secs=1');
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text)).toMatchObject({ error: 'invalid_request', url: dead });
    expect((await slimeGet(`${t.url}/list_workers`)).urls).not.toContain(dead);
  });

  it('bad input is a 400 that registers nothing; a wrong method is 405', async () => {
    const before = (await slimeGet(`${t.url}/list_workers`)).urls;
    const missing = await request(`${t.url}/add_worker`, { method: 'POST' });
    expect(missing.statusCode).toBe(400);
    expect(((await missing.body.json()) as { error: string }).error).toBe('invalid_request');
    for (const extra of ['', '&timeout_secs=0', '&timeout_secs=x']) {
      const r = await addWorker(t.url, extra === '' ? 'ftp://x:1' : sims[0]!.url, extra);
      expect(r.status, `${extra}: ${r.text}`).toBe(400);
      expect(JSON.parse(r.text).error).toBe('invalid_request');
    }
    expect((await request(`${t.url}/remove_worker`, { method: 'POST' })).statusCode).toBe(400);
    expect((await slimeGet(`${t.url}/list_workers`)).urls).toEqual(before);
    const get = await request(`${t.url}/add_worker?url=${sims[0]!.url}`);
    expect(get.statusCode).toBe(405);
    expect(get.headers.allow).toBe('POST');
    await get.body.dump();
    const post = await request(`${t.url}/list_workers`, { method: 'POST' });
    expect(post.statusCode).toBe(405);
    await post.body.dump();
  });
});

describe('legacy API with an admin key and with --workers-list-control-urls', () => {
  let t: TestGateway;
  let sg: SimProcess;
  let ts: TokenspeedSimProcess;

  beforeAll(async () => {
    [sg, ts] = await Promise.all([
      spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']),
      spawnTokenspeedSim(['--model', 'MODEL', '--token-rate', '0', '--rl-control-port', '0']),
    ]);
    t = await startTestGateway({ adminKey: 'adm', workersListControlUrls: true });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([sg?.stop(), ts?.stop()]);
  });

  it('adding stays open (slime sends no key); removing needs the admin bearer', async () => {
    expect((await addWorker(t.url, sg.url)).status).toBe(200);
    const bare = await removeWorker(t.url, sg.url);
    expect(bare.status).toBe(401);
    expect(JSON.parse(bare.text).error).toBe('unauthorized');
    expect((await slimeGet(`${t.url}/list_workers`)).urls).toEqual([sg.url]);
    expect((await removeWorker(t.url, sg.url, { authorization: 'Bearer adm' })).status).toBe(200);
    expect((await slimeGet(`${t.url}/list_workers`)).urls).toEqual([]);
  });

  it("a TokenSpeed worker is listed by its control app's URL, which serves slime's abort calls", async () => {
    expect((await addWorker(t.url, ts.url)).status).toBe(200);
    const { urls } = await slimeGet(`${t.url}/list_workers`);
    expect(urls).toEqual([ts.controlUrl]);
    const abort = await request(`${urls[0]}/abort_request`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ abort_all: true }),
    });
    expect(abort.statusCode).toBe(200);
    await abort.body.dump();
  });
});
