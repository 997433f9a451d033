// Drop-in gaps found by running upstream clients against rlgate, each against a real gateway and
// real simulators: sgl-router 0.2.x's `DELETE /workers/{url-encoded url}` (as slime written for
// it removes an engine).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const ADMIN = { authorization: 'Bearer adm' };

describe('registration with an admin key: removal by URL', () => {
  let t: TestGateway;
  let sg: SimProcess;

  beforeAll(async () => {
    sg = await spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']);
    t = await startTestGateway({ adminKey: 'adm' });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await sg?.stop();
  });

  const listed = async () => (await t.http('GET', '/workers')).json.workers.map((w: { url: string }) => w.url);

  it('DELETE /workers/{url percent-encoded} (sgl-router 0.2.x) removes it as DELETE /workers/{id} does', async () => {
    const [id] = await t.register([sg.url]);
    const path = `/workers/${encodeURIComponent(sg.url)}`;
    // The same admin rule as the id route.
    expect(await t.http('DELETE', path)).toMatchObject({ status: 401, json: { error: 'unauthorized' } });
    expect(await listed()).toEqual([sg.url]);
    const r = await t.http('DELETE', path, { headers: ADMIN });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toEqual({ id, url: sg.url, status: 'removed' });
    expect(await listed()).toEqual([]);
    expect((await t.http('GET', '/v1/rl/workers', { headers: ADMIN })).json.workers).toEqual([]);
    // Gone, or never registered: the id route's 404.
    const again = await t.http('DELETE', path, { headers: ADMIN });
    expect(again.status).toBe(404);
    expect(again.json).toMatchObject({ error: 'worker_not_found', id: sg.url });
    const never = await t.http('DELETE', `/workers/${encodeURIComponent('http://127.0.0.1:1')}`, { headers: ADMIN });
    expect(never).toMatchObject({ status: 404, json: { error: 'worker_not_found' } });
    // The id form still works.
    const [id2] = await t.register([sg.url]);
    expect(await t.http('DELETE', `/workers/${id2}`, { headers: ADMIN })).toMatchObject({ status: 200, json: { id: id2, status: 'removed' } });
  });
});
