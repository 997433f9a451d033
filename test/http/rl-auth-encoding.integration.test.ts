// The admin bearer guards every path that reaches the /v1/rl routes, however the path is spelled:
// fastify decodes percent-escapes before matching, so the guard must judge the matched route.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';

describe('admin auth with percent-encoded paths', () => {
  let on: TestGateway;
  let off: TestGateway;

  beforeAll(async () => {
    on = await startTestGateway({ adminKey: 'admin-secret' });
    off = await startTestGateway({ rl: { enabled: false } });
  });
  afterAll(async () => {
    await on?.close();
    await off?.close();
  });

  it.each(['/v1/rl/workers', '/v1/%72l/workers', '/v1/r%6C/workers', '/%761/rl/workers', '/v1/rl/refits'])('%s needs the admin key', async (path) => {
    const r = await on.http('GET', path);
    expect(r.status).toBe(401);
    expect(r.json.error).toBe('unauthorized');
    const ok = await on.http('GET', path, { headers: { authorization: 'Bearer admin-secret' } });
    expect(ok.status).toBe(200);
  });

  it.each(['/v1/%72l/workers', '/%761/rl/state'])('%s with RL off is the empty 404', async (path) => {
    const r = await off.http('GET', path);
    expect(r.status).toBe(404);
    expect(r.text).toBe('');
  });
});

describe('worker changes with an admin key configured', () => {
  let t: TestGateway;

  beforeAll(async () => {
    t = await startTestGateway({ adminKey: 'admin-secret' });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('lets a plain registration and re-registration through (slime sends no credentials)', async () => {
    const r = await t.http('POST', '/workers', { body: { url: 'http://127.0.0.1:1', worker_type: 'regular' } });
    expect(r.status).toBe(202);
    const again = await t.http('POST', '/workers', { body: { url: 'http://127.0.0.1:1', worker_type: 'regular' } });
    expect(again.status).toBe(202);
    expect(again.json.id).toBe(r.json.id);
  });

  it('needs the admin bearer to set a key or rl.* labels, or to change or remove a worker', async () => {
    const id = (await t.http('POST', '/workers', { body: { url: 'http://127.0.0.1:2' } })).json.id;
    const cases: Array<[string, string, unknown]> = [
      ['POST', '/workers', { url: 'grpc://127.0.0.1:3', api_key: 'k' }],
      ['POST', '/workers', { url: 'grpc://127.0.0.1:4', labels: { 'rl.control_url': 'http://attacker:1' } }],
      ['PATCH', `/workers/${id}`, { labels: { 'rl.control_url': 'http://attacker:1' } }],
      ['DELETE', `/workers/${id}`, undefined],
    ];
    for (const [method, path, body] of cases) {
      const r = await t.http(method, path, body === undefined ? {} : { body });
      expect(r.status, `${method} ${path}`).toBe(401);
      expect(r.json.error).toBe('unauthorized');
    }
    expect(
      t.gw.services.registry
        .all()
        .map((w) => w.url)
        .sort(),
    ).toEqual(['http://127.0.0.1:1', 'http://127.0.0.1:2']);
    const ok = await t.http('DELETE', `/workers/${id}`, { headers: { authorization: 'Bearer admin-secret' } });
    expect(ok.status).toBe(200);
  });
});
