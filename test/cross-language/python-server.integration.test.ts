// A TokenSpeed engine written in Python from our proto/ (Debian protoc + python3-grpcio) serves a
// /generate through the gateway: the gateway's gRPC client speaks the real wire, not just ours.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { generatePythonStubs, removeStubs, startPythonServer, type PythonServer } from '../fixtures/python-grpc.ts';

describe('Python gRPC engine behind the gateway', () => {
  let stubs: string;
  let py: PythonServer;
  let t: TestGateway;

  beforeAll(async () => {
    stubs = generatePythonStubs();
    py = await startPythonServer(stubs, 'py-7');
    t = await startTestGateway();
    await t.register([{ url: py.url, runtime_type: 'tokenspeed' }]);
  });
  afterAll(async () => {
    await t?.close();
    await py?.stop();
    if (stubs) removeStubs(stubs);
  });

  it('is discovered over GetServerInfo/GetModelInfo', async () => {
    const row = (await t.http('GET', '/v1/rl/workers')).json.workers[0];
    expect(row.connection_mode).toBe('grpc');
    expect(row.engine).toBe('tokenspeed');
    expect(row.model_id).toBe('py-model');
    expect(row.tp_size).toBe(1); // attn_tp_size folded into tp_size
    expect(row.engine_version).toBe('py-test');
    expect(row.control_url).toBeNull();
  });

  it('serves /generate with the engine-stamped weight_version, buffered and streamed', async () => {
    const body = { input_ids: [1, 2, 3], sampling_params: { max_new_tokens: 3 } };
    const r = await t.http('POST', '/generate', { body });
    expect(r.status).toBe(200);
    expect(Array.isArray(r.json)).toBe(false);
    expect(r.json.output_ids).toEqual([100, 101, 102]);
    expect(r.json.meta_info.weight_version).toBe('py-7');
    expect(r.json.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
    expect(r.headers['x-smg-routed-worker-id']).toBe(py.url);

    const s = await t.http('POST', '/generate', { body: { ...body, stream: true } });
    expect(s.status).toBe(200);
    expect(String(s.headers['content-type'])).toContain('text/event-stream');
    expect(s.text).toContain('"weight_version":"py-7"');
    expect(s.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  });
});
