// Bounds of what one client may hold (issue 11 item 4), over real sockets against a real gateway
// and a real SGLang simulator: token limits past the model's context length are refused before any
// engine is called; a request whose headers or body stall gets 408 and its connection is closed,
// while a long streamed answer is not cut; the in-flight cap answers 503 with Retry-After and
// recovers; a connection past the connection cap is closed.

import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const CONTEXT = 4096;
const BODY_TIMEOUT_SECS = 2;
const HEADER_TIMEOUT_SECS = 1;
const MAX_IN_FLIGHT = 2;

/** What a raw socket received until the server closed it, and when that was. */
function rawExchange(port: number, bytes: string): Promise<{ text: string; closedAfterMs: number }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    socket.on('data', (c) => chunks.push(c));
    // A socket the server resets (the connection cap) ends here too, with what it received.
    socket.on('error', () => {});
    socket.on('close', () => resolve({ text: Buffer.concat(chunks).toString('utf8'), closedAfterMs: Date.now() - started }));
  });
}

function portOf(url: string): number {
  return Number(new URL(url).port);
}

describe('bounds', () => {
  let sim: SimProcess;
  let gw: TestGateway;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--context-length', String(CONTEXT), '--token-rate', '20']);
    gw = await startTestGateway({ requestBodyTimeoutSecs: BODY_TIMEOUT_SECS, requestHeaderTimeoutSecs: HEADER_TIMEOUT_SECS, maxInFlight: MAX_IN_FLIGHT });
    await gw.register([sim.url]);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await sim?.stop();
  });

  const proxied = async () => (await sim.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path));

  it('discovers the context length the engine reports', () => {
    const [row] = gw.gw.services.registry.all();
    expect(row!.discoveredLabels.context_length).toBe(String(CONTEXT));
  });

  it('refuses token limits past the context length with 400 naming the field and the limit, calling no engine', async () => {
    await sim.clearRequests();
    const cases: Array<[string, unknown, string]> = [
      ['/generate', { text: 'hi', sampling_params: { max_new_tokens: 3e9 } }, '/sampling_params/max_new_tokens'],
      [
        '/generate',
        {
          input_ids: [
            [1, 2],
            [3, 4],
          ],
          sampling_params: [{ max_new_tokens: 4 }, { max_new_tokens: CONTEXT + 1 }],
        },
        '/sampling_params/1/max_new_tokens',
      ],
      ['/v1/completions', { prompt: 'hi', max_tokens: 1e308 }, '/max_tokens'],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: CONTEXT + 1 }, '/max_completion_tokens'],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: CONTEXT * 2 }, '/max_tokens'],
    ];
    for (const [path, body, field] of cases) {
      const res = await gw.http('POST', path, { body });
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(res.json).toMatchObject({ error: 'invalid_request', field, limit: CONTEXT });
    }
    expect(await proxied()).toEqual([]);
  });

  it('refuses a non-integer or non-finite token limit with 400, calling no engine', async () => {
    await sim.clearRequests();
    const cases: Array<[string, string, string]> = [
      ['/generate', '{"text":"hi","sampling_params":{"max_new_tokens":1.5}}', '/sampling_params/max_new_tokens'],
      ['/generate', '{"text":"hi","sampling_params":{"max_new_tokens":1e400}}', '/sampling_params/max_new_tokens'],
      ['/generate', '{"text":"hi","sampling_params":{"max_new_tokens":"8"}}', '/sampling_params/max_new_tokens'],
      ['/generate', '{"text":"hi","sampling_params":{"max_new_tokens":-1}}', '/sampling_params/max_new_tokens'],
      ['/v1/completions', '{"prompt":"hi","max_tokens":1e400}', '/max_tokens'],
    ];
    for (const [path, raw, field] of cases) {
      const res = await gw.http('POST', path, { raw, headers: { 'content-type': 'application/json' } });
      expect(res.status, raw).toBe(400);
      expect(res.json).toMatchObject({ error: 'invalid_request', field });
    }
    expect(await proxied()).toEqual([]);
  });

  it('passes a token limit equal to the context length to the engine', async () => {
    await sim.clearRequests();
    const res = await gw.http('POST', '/v1/completions', { body: { prompt: 'hi', max_tokens: CONTEXT, max_completion_tokens: 1 } });
    expect(res.status).toBe(200);
    const gen = await gw.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } } });
    expect(gen.status).toBe(200);
    expect((await proxied()).map((r) => r.path)).toEqual(['/v1/completions', '/generate']);
  });

  it('answers 408 to a stalled body within the body timeout and closes the connection', async () => {
    await sim.clearRequests();
    const body = '{"text":"hello","sampling_params":{"max_new_tokens":4}}';
    const head = `POST /generate HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const { text, closedAfterMs } = await rawExchange(portOf(gw.url), head + body.slice(0, body.length / 2));
    expect(text.startsWith('HTTP/1.1 408 ')).toBe(true);
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: 'request_timeout', body_timeout_secs: BODY_TIMEOUT_SECS });
    // Not before the timeout, and within it plus Node's one-second check.
    expect(closedAfterMs).toBeGreaterThanOrEqual(BODY_TIMEOUT_SECS * 1000 - 100);
    expect(closedAfterMs).toBeLessThan((BODY_TIMEOUT_SECS + 1) * 1000 + 2000);
    expect(await proxied()).toEqual([]);
  }, 20_000);

  it('answers 408 to stalled headers within the header timeout and closes the connection', async () => {
    const { text, closedAfterMs } = await rawExchange(portOf(gw.url), 'GET /health HTTP/1.1\r\nHost: gw\r\nX-Slow: ');
    expect(text.startsWith('HTTP/1.1 408 ')).toBe(true);
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ error: 'request_timeout', header_timeout_secs: HEADER_TIMEOUT_SECS });
    expect(closedAfterMs).toBeLessThan((HEADER_TIMEOUT_SECS + 1) * 1000 + 2000);
  }, 20_000);

  it('lets a streamed /generate run past the body timeout', async () => {
    const tokens = 20 * (BODY_TIMEOUT_SECS + 2); // at 20 tokens/s: about two seconds past the timeout
    const started = Date.now();
    const res = await request(`${gw.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: 'hi', stream: true, sampling_params: { max_new_tokens: tokens, ignore_eos: true } }),
    });
    const text = await res.body.text();
    const elapsed = Date.now() - started;
    expect(res.statusCode).toBe(200);
    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    expect(events.at(-1)).toBe('[DONE]');
    const last = JSON.parse(events.at(-2)!);
    expect(last.meta_info).toMatchObject({ completion_tokens: tokens, finish_reason: { type: 'length' } });
    // The test only means something if the answer did outlive the body timeout.
    expect(elapsed).toBeGreaterThan(BODY_TIMEOUT_SECS * 1000);
  }, 30_000);

  it('answers 503 with Retry-After past the in-flight cap while held requests run, keeps /health and /metrics, and recovers', async () => {
    await sim.clearRequests();
    await sim.setFaults({ route: 'generate', delayMs: 3000, times: MAX_IN_FLIGHT });
    try {
      const held = Array.from({ length: MAX_IN_FLIGHT }, () => gw.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } } }));
      // Both reached the engine: they are in flight at the gateway.
      const until = Date.now() + 10_000;
      while ((await proxied()).length < MAX_IN_FLIGHT && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
      expect((await proxied()).length).toBe(MAX_IN_FLIGHT);

      const refused = await gw.http('POST', '/v1/completions', { body: { prompt: 'hi', max_tokens: 2 } });
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBe('1');
      expect(refused.json).toMatchObject({ error: 'overloaded', limit: MAX_IN_FLIGHT, retryable: true });
      expect((await gw.http('GET', '/health')).status).toBe(200);
      expect((await gw.http('GET', '/metrics')).status).toBe(200);
      expect(await proxied()).toHaveLength(MAX_IN_FLIGHT);

      for (const res of await Promise.all(held)) expect(res.status).toBe(200);
      const after = await gw.http('POST', '/generate', { body: { text: 'hi', sampling_params: { max_new_tokens: 2 } } });
      expect(after.status).toBe(200);
    } finally {
      await sim.clearFaults();
    }
  }, 30_000);
});

describe('connection cap', () => {
  let gw: TestGateway;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    gw = await startTestGateway({ maxConnections: 2 });
  }, 60_000);

  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await gw?.close();
  });

  function open(): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = connect(portOf(gw.url), '127.0.0.1', () => resolve(s));
      s.on('error', reject);
      sockets.push(s);
    });
  }

  it('closes a connection past --max-connections without an answer, and takes new ones once one closes', async () => {
    const held = [await open(), await open()];
    const { text } = await rawExchange(portOf(gw.url), 'GET /health HTTP/1.1\r\nHost: gw\r\n\r\n');
    expect(text).toBe('');

    held[0]!.destroy();
    const until = Date.now() + 10_000;
    let answer = '';
    while (!answer.startsWith('HTTP/1.1 200') && Date.now() < until) {
      answer = (await rawExchange(portOf(gw.url), 'GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n')).text;
      if (!answer) await new Promise((r) => setTimeout(r, 50));
    }
    expect(answer.startsWith('HTTP/1.1 200')).toBe(true);
  }, 30_000);
});
