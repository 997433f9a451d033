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
