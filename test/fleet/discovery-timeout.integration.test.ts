// Discovery has a deadline: an engine that accepts TCP connections and never answers becomes
// `unreachable` (naming the timeout) instead of staying `registering` for ever.

import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';

describe('discovery timeout', () => {
  let t: TestGateway;
  let mute: Server;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    mute = createServer((s) => sockets.push(s)); // accepts, never answers
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    t = await startTestGateway({ discoveryTimeoutSecs: 1 });
  });
  afterAll(async () => {
    await t?.close();
    for (const s of sockets) s.destroy();
    mute?.close();
  });

  it('an engine that never answers discovery is unreachable after the timeout', async () => {
    const url = `http://127.0.0.1:${(mute.address() as AddressInfo).port}`;
    const reg = await t.http('POST', '/workers', { body: { url } });
    expect(reg.status).toBeLessThan(300);
    const deadline = Date.now() + 5_000;
    let row: { state: string } | undefined;
    while (Date.now() < deadline) {
      row = (await t.http('GET', '/v1/rl/workers')).json.workers.find((w: { url: string }) => w.url === url);
      if (row?.state === 'unreachable') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(row?.state).toBe('unreachable');
    expect(sockets.length).toBeGreaterThan(0);
  });
});
