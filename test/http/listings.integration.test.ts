// The fleet listings (`GET /v1/rl/workers`, `GET /workers`): each listed row is the one its own
// route answers, every change made after a listing shows in the next one, and a paged listing
// (`?limit=&cursor=`) covers every engine exactly once, in the whole listing's order.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

describe('fleet listings after changes', () => {
  let sims: SimProcess[];
  let t: TestGateway;
  let ids: string[];
  const rl = async () => (await t.http('GET', '/v1/rl/workers')).json;
  const smg = async () => (await t.http('GET', '/workers')).json;
  const rlRow = async (id: string) => (await rl()).workers.find((w: { id: string }) => w.id === id);
  const smgRow = async (id: string) => (await smg()).workers.find((w: { id: string }) => w.id === id);

  beforeAll(async () => {
    sims = await Promise.all([0, 1, 2].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });

  it('each listed row is the row its own route answers, in both listings', async () => {
    const listing = await rl();
    expect(listing.total).toBe(3);
    expect(listing.protocol_version).toBe(1);
    for (const row of listing.workers) expect(row).toEqual((await t.http('GET', `/v1/rl/workers/${row.id}`)).json);
    const smgListing = await smg();
    expect(smgListing.total).toBe(3);
    expect(smgListing.stats).toEqual({ prefill_count: 0, decode_count: 0, regular_count: 3 });
    expect(smgListing.rlgate).toMatchObject({ total_workers: 3, healthy_workers: 3 });
    const urls = smgListing.workers.map((w: { url: string }) => w.url);
    expect(urls).toEqual([...urls].sort());
    for (const row of smgListing.workers) expect(row).toEqual((await t.http('GET', `/workers/${row.id}`)).json);
  });

  it('paged with ?limit=: every engine exactly once, in the order of the whole listing, then next_cursor null', async () => {
    for (const [path, limit] of [
      ['/v1/rl/workers', 1],
      ['/v1/rl/workers', 2],
      ['/workers', 1],
      ['/workers', 2],
    ] as const) {
      const whole = (await t.http('GET', path)).json;
      expect(whole).not.toHaveProperty('next_cursor');
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const q: string = `?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const r = await t.http('GET', `${path}${q}`);
        expect(r.status, `${path}${q}`).toBe(200);
        expect(r.json.total).toBe(3);
        expect(r.json.workers.length).toBeLessThanOrEqual(limit);
        expect(r.json).toHaveProperty('next_cursor');
        seen.push(...r.json.workers.map((w: { id: string }) => w.id));
        cursor = r.json.next_cursor;
        pages++;
      } while (cursor !== null && pages < 10);
      expect(seen, path).toEqual(whole.workers.map((w: { id: string }) => w.id));
      expect(pages).toBe(Math.ceil(3 / limit));
    }
  });

  it('a page starts after the cursor whatever left meanwhile; bad paging is a 400 naming the parameter', async () => {
    const first = (await t.http('GET', '/v1/rl/workers?limit=1')).json;
    const rest = (await t.http('GET', `/v1/rl/workers?limit=5&cursor=${first.next_cursor}`)).json;
    expect(rest.workers.map((w: { id: string }) => w.id)).toEqual((await rl()).workers.slice(1).map((w: { id: string }) => w.id));
    expect(rest.next_cursor).toBeNull();
    for (const path of ['/v1/rl/workers', '/workers']) {
      for (const q of ['limit=0', 'limit=abc', 'limit=10001', 'limit=1&limit=2', 'cursor=not-a-cursor', 'limit=1&cursor=W10']) {
        const r = await t.http('GET', `${path}?${q}`);
        expect(r.status, `${path}?${q}`).toBe(400);
        expect(r.json.error, `${path}?${q}`).toBe('invalid_request');
      }
    }
  });

  it('a control write, a version write, new labels and a removal each show in the next listing', async () => {
    await rl();
    await smg();
    // The control state alone (the lifecycle stays what it was).
    expect((await t.http('POST', `/v1/rl/workers/${ids[0]}/state`, { body: { control: 'paused' } })).status).toBe(200);
    expect((await rlRow(ids[0]!)).control).toBe('paused');
    expect(await rlRow(ids[0]!)).toEqual((await t.http('GET', `/v1/rl/workers/${ids[0]}`)).json);

    expect((await t.http('POST', `/v1/rl/workers/${ids[1]}/version`, { body: { weight_version: '7' } })).status).toBe(200);
    expect(await rlRow(ids[1]!)).toMatchObject({ weight_version: '7', version_source: 'api' });

    expect((await t.http('PUT', `/workers/${ids[1]}`, { body: { labels: { pool: 'b' } } })).status).toBe(200);
    expect((await smgRow(ids[1]!)).labels).toMatchObject({ pool: 'b' });
    expect((await rlRow(ids[1]!)).labels).toMatchObject({ pool: 'b' });

    expect((await t.http('DELETE', `/workers/${ids[2]}`)).status).toBe(200);
    const after = await rl();
    expect(after.total).toBe(2);
    expect(after.workers.map((w: { id: string }) => w.id).sort()).toEqual([ids[0], ids[1]].sort());
    const smgAfter = await smg();
    expect(smgAfter.total).toBe(2);
    expect(smgAfter.workers.map((w: { id: string }) => w.id)).not.toContain(ids[2]);
    expect(smgAfter.rlgate.total_workers).toBe(2);
  });
});
