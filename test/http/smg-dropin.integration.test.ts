// Drop-in gaps found by running upstream clients against rlgate, each against a real gateway and
// real simulators: sgl-router 0.2.x's `DELETE /workers/{url-encoded url}` (as slime written for
// it removes an engine), and prefill/decode (PD) workers refused at registration with the reason
// (slime registers `{url, worker_type, bootstrap_port}`), judged on the registry and on what the
// engine was asked.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const ADMIN = { authorization: 'Bearer adm' };

describe('registration with an admin key: removal by URL, PD workers refused', () => {
  let t: TestGateway;
  let sg: SimProcess;
  let pd: SimProcess;

  beforeAll(async () => {
    [sg, pd] = await Promise.all([spawnSglangSim(['--model', 'MODEL', '--token-rate', '0']), spawnSglangSim(['--model', 'PD', '--token-rate', '0'])]);
    t = await startTestGateway({ adminKey: 'adm' });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([sg?.stop(), pd?.stop()]);
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

  it("slime's PD registrations are 400 invalid_request naming the worker and the reason; nothing registered, the engine never asked", async () => {
    await pd.clearRequests();
    const bodies = [
      { url: pd.url, worker_type: 'prefill', bootstrap_port: 8998 },
      { url: pd.url, worker_type: 'decode' },
      { url: pd.url, worker_type: 'Prefill' },
      { url: pd.url, worker_type: 'encode' },
    ];
    for (const body of bodies) {
      const r = await t.http('POST', '/workers', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json).toMatchObject({ error: 'invalid_request', field: 'worker_type', url: pd.url, worker_type: body.worker_type });
      expect(r.json.message).toContain(`worker \`${pd.url}\``);
      expect(r.json.message).toContain('PD disaggregated routing is not supported yet');
    }
    expect((await t.http('POST', '/workers', { body: bodies[0] })).json.message).toContain('bootstrap_port 8998');
    // A bootstrap port is a prefill worker's, whatever the type says.
    const port = await t.http('POST', '/workers', { body: { url: pd.url, bootstrap_port: 8998 } });
    expect(port).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'bootstrap_port', url: pd.url } });
    // A type SMG does not know is refused too, never routed as regular.
    const odd = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'gpu' } });
    expect(odd).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type' } });
    expect(await listed()).toEqual([]);
    expect(await pd.requests()).toEqual([]);
  });

  it('a registered worker cannot become prefill or decode: re-registration and PUT/PATCH are refused and change nothing', async () => {
    const [id] = await t.register([{ url: pd.url, worker_type: 'regular' }]);
    // Without the admin bearer a re-registration of a known URL only re-runs discovery (202): a PD
    // one is refused before that.
    const again = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'decode' } });
    expect(again).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type' } });
    const withKey = await t.http('POST', '/workers', { body: { url: pd.url, worker_type: 'prefill', bootstrap_port: 1 }, headers: ADMIN });
    expect(withKey.status).toBe(400);
    for (const method of ['PUT', 'PATCH']) {
      const r = await t.http(method, `/workers/${id}`, { body: { worker_type: 'decode' }, headers: ADMIN });
      expect(r).toMatchObject({ status: 400, json: { error: 'invalid_request', field: 'worker_type', url: pd.url } });
    }
    const row = (await t.http('GET', `/workers/${id}`)).json;
    expect(row.worker_type).toBe('regular');
    expect((await t.http('GET', '/workers')).json.stats).toEqual({ prefill_count: 0, decode_count: 0, regular_count: 1 });
    // Routed as before.
    const g = await t.http('POST', '/generate', { body: { input_ids: [1, 2], sampling_params: { max_new_tokens: 2 } } });
    expect(g.status).toBe(200);
    expect(g.headers['x-smg-routed-worker-id']).toBe(pd.url);
  });
});
