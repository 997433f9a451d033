// ZMQ worker URLs the gateway cannot bind are refused at registration with a 400 that says why,
// and leave nothing behind (no half-registered worker without an actor).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';

describe('ZMQ registration', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  });
  afterAll(async () => {
    await t?.close();
  });

  it.each(['zmq://127.0.0.1:5555', 'tcp://10.0.0.1:5555', 'ipc://relative/path', 'tcp://127.0.0.1:99999'])('%s → 400, nothing registered', async (url) => {
    const r = await t.http('POST', '/workers', { body: { url, runtime_type: 'tokenspeed' } });
    expect(r.status).toBe(400);
    expect(r.json.error).toBe('invalid_request');
    expect(r.json.field).toBe('url');
    expect((await t.http('GET', '/workers')).json.total).toBe(0);
  });
});
