// The command subjects are open to anyone on the bus: `rl.engine.<id>.cmd`, `rl.replica.<id>.cmd`
// and `rl.replica.<id>.outcomes` answer a payload they cannot parse with a request error (`invalid_request`
// naming what is wrong), never `internal_error`, and call no engine; a well-formed command still
// runs. Judged on the simulator's own request record.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusRemoteError, type Bus } from '../../src/bus/connection.ts';
import { encode } from '../../src/bus/codec.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { GATEWAY_OWN_PATHS, spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const subj = subjects('rl');

const call = (over: Record<string, unknown> = {}) => ({
  method: 'POST',
  path: 'flush_cache',
  query: '',
  body: Buffer.from('{}').toString('base64'),
  contentType: 'application/json',
  deadline: Date.now() + 5_000,
  timeoutSecs: 5,
  ...over,
});

describe('command subjects refuse payloads they cannot parse', () => {
  let t: TestGateway;
  let sim: SimProcess;
  let bus: Bus;
  let workerId: string;

  beforeAll(async () => {
    sim = await spawnSglangSim(['--token-rate', '0']);
    t = await startTestGateway();
    [workerId] = (await t.register([sim.url])) as [string];
    bus = await t.bus();
  });
  afterAll(async () => {
    await t?.close();
    await sim?.stop();
  });

  const engineCalls = async () => (await sim.requests()).filter((r) => !GATEWAY_OWN_PATHS.has(r.path));

  /** Sends raw bytes as a request and returns the error reply (or fails if it was not one). */
  async function refused(subject: string, payload: Uint8Array): Promise<BusRemoteError> {
    const reply = await bus.nc.request(subject, payload, { timeout: 5_000 });
    const code = reply.headers?.get('Rlgate-Error');
    expect(code, `${subject}: ${new TextDecoder().decode(reply.data)}`).toBeTruthy();
    const body = JSON.parse(new TextDecoder().decode(reply.data)) as Record<string, unknown>;
    return new BusRemoteError(subject, code!, String(body.message), body);
  }

  const garbage: Array<[string, Uint8Array]> = [
    ['bytes that are not JSON', new TextEncoder().encode('{"call": ')],
    ['JSON null', encode(null)],
    ['a JSON array', encode([1, 2])],
    ['a string', encode('pause_generation')],
    ['no call', encode({ requestId: 'r1' })],
    ['a call without a method', encode({ call: call({ method: undefined }), requestId: 'r1' })],
    ['a call with method DELETE', encode({ call: call({ method: 'DELETE' }), requestId: 'r1' })],
    ['a call whose path is a number', encode({ call: call({ path: 7 }), requestId: 'r1' })],
    ['a call whose path climbs out (`../..`)', encode({ call: call({ path: '../../etc/passwd' }), requestId: 'r1' })],
    ['a call whose path carries a query', encode({ call: call({ path: 'flush_cache?x=1' }), requestId: 'r1' })],
    ['a call whose body is an object', encode({ call: call({ body: { a: 1 } }), requestId: 'r1' })],
    ['a call whose trace holds a number', encode({ call: call({ trace: { 'x-request-id': 1 } }), requestId: 'r1' })],
    ['a call without a deadline', encode({ call: call({ deadline: 'soon' }), requestId: 'r1' })],
    ['a call with timeoutSecs 0', encode({ call: call({ timeoutSecs: 0 }), requestId: 'r1' })],
    ['a requestId that is a number', encode({ call: call(), requestId: 5 })],
  ];

  it.each(garbage)('rl.engine.<id>.cmd: %s → a request error, no engine called', async (_name, payload) => {
    await sim.clearRequests();
    const err = await refused(subj.engineCmd(workerId), payload);
    expect(['invalid_request', 'bus_bad_payload']).toContain(err.code);
    expect(err.message.length).toBeGreaterThan(0);
    expect(await engineCalls()).toEqual([]);
  });

  const badShares: Array<[string, unknown]> = [
    ['null', null],
    ['no requestId', { calls: [call()], legs: [{ workerId: 'w', call: 0 }], concurrency: 1 }],
    ['calls not an array', { requestId: 'r', calls: {}, legs: [], concurrency: 1 }],
    ['a bad call', { requestId: 'r', calls: [call({ method: 'PUT' })], legs: [{ workerId: 'w', call: 0 }], concurrency: 1 }],
    ['a leg pointing past the calls', { requestId: 'r', calls: [call()], legs: [{ workerId: 'w', call: 3 }], concurrency: 1 }],
    ['a leg without a worker', { requestId: 'r', calls: [call()], legs: [{ call: 0 }], concurrency: 1 }],
    ['concurrency 0', { requestId: 'r', calls: [call()], legs: [{ workerId: 'w', call: 0 }], concurrency: 0 }],
  ];

  it.each(badShares)('rl.replica.<id>.cmd: %s → a request error, no engine called', async (_name, share) => {
    await sim.clearRequests();
    const err = await refused(subj.replicaCmd(t.gw.replicaId), encode(share));
    expect(err.code).toBe('invalid_request');
    expect(await engineCalls()).toEqual([]);
  });

  it.each([
    ['null', null],
    ['no requestId', {}],
    ['a requestId that is a number', { requestId: 7 }],
  ])('rl.replica.<id>.outcomes: %s → a request error', async (_name, payload) => {
    const err = await refused(subj.replicaOutcomes(t.gw.replicaId), encode(payload));
    expect(err.code).toBe('invalid_request');
  });

  it('a well-formed command still runs on the engine', async () => {
    await sim.clearRequests();
    const outcome = await bus.request<{ kind: string; status?: number }>(subj.engineCmd(workerId), { call: call(), requestId: 'ok-1' }, 10_000);
    expect(outcome).toMatchObject({ kind: 'answer', status: 200 });
    expect((await engineCalls()).map((r) => r.path)).toEqual(['/flush_cache']);
  });
});
