// slime's calls replayed (registration, buffered and streamed /generate, the abort flow, a paused
// fleet, removal and re-registration) against TokenSpeed fleets on the gRPC and ZMQ wires; the HTTP
// fleet is slime-compat.integration.test.ts. The gateway lists control-app URLs
// (--workers-list-control-urls) so slime's abort loop reaches the engines. ZMQ workers need an
// operator registration (lane, `rl.control_url` and model labels) that slime itself would never
// send.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { inFlight, slimeAbortFlow, slimeCount, slimeGet, until } from '../fixtures/slime-client.ts';
import { spawnTokenspeedSim } from '../fixtures/tokenspeed-sim.ts';
import { spawnZmqSim, tempIpcUrl } from '../fixtures/zmq-sim.ts';
import { ZmqEngineClient } from '../../src/engines/zmq.ts';

type Wire = 'grpc' | 'zmq';
const MODEL = 'MODEL';
/** The weight version every engine starts with and holds throughout: nothing in this file refits. */
const VERSION = 'w0';
/** What slime's rollout sends: one prompt, no `model`. */
const SLIME_BODY = {
  input_ids: [1, 2, 3],
  sampling_params: { max_new_tokens: 4, no_stop_trim: true, spaces_between_special_tokens: false },
  return_logprob: true,
};
// Long-running, within the simulators' 32,768-token context (more is a 400 at the gateway).
const LONG = { ...SLIME_BODY, sampling_params: { ...SLIME_BODY.sampling_params, max_new_tokens: 30_000 } };

interface Fleet {
  engines: Array<{ url: string; controlUrl: string }>;
  /** POST /workers bodies, in the order of `engines`. */
  registrations: Array<Record<string, unknown>>;
  /** The `meta_info.weight_version` every answer must carry. */
  version: string;
  close(): Promise<void>;
}

async function startFleet(wire: Wire): Promise<Fleet> {
  const args = ['--model', MODEL, '--token-rate', '20', '--weight-version', VERSION];
  if (wire === 'grpc') {
    // Logprobs are off in TokenSpeed unless switched on (sim/tokenspeed/README.md).
    const sims = await Promise.all([0, 1].map(() => spawnTokenspeedSim([...args, '--rl-control-port', '0', '--enable-output-logprobs'])));
    return {
      engines: sims.map((s) => ({ url: s.url, controlUrl: s.controlUrl! })),
      // Exactly slime's body: no runtime_type, so the registry's default for grpc:// applies.
      registrations: sims.map((s) => ({ url: s.url, worker_type: 'regular' })),
      // The engine's own, stamped on every answer.
      version: VERSION,
      close: async () => {
        await Promise.all(sims.map((s) => s.stop()));
      },
    };
  }
  // ZMQ: the lane is opened here first (port 0, read back) and the gateway's client for the same
  // URL and handshake label shares it (see refit-wires.integration.test.ts).
  const HANDSHAKE = 'tcp://127.0.0.1:0';
  const dirs = [0, 1].map(() => tempIpcUrl());
  const clients = dirs.map((d) => new ZmqEngineClient(d.url, { handshakeAddress: HANDSHAKE, modelId: MODEL }));
  const started = await Promise.allSettled(
    dirs.map(async (d, i) => {
      const { handshake } = await clients[i]!.open();
      return spawnZmqSim({ url: d.url, handshake, args });
    }),
  );
  const sims = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const close = async () => {
    await Promise.all(sims.map((s) => s.stop()));
    await Promise.all(clients.map((c) => c.close()));
    for (const d of dirs) d.cleanup();
  };
  if (sims.length !== started.length) {
    await close();
    throw (started.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason;
  }
  return {
    engines: sims.map((s) => ({ url: s.url, controlUrl: s.controlUrl })),
    registrations: sims.map((s) => ({
      url: s.url,
      worker_type: 'regular',
      labels: { 'rl.control_url': s.controlUrl, zmq_handshake_address: HANDSHAKE, model_id: MODEL },
    })),
    // The wire carries no version and no refit has told the gateway one: its attribution's last
    // resort (docs/grpc-workers.md), whatever the engine holds.
    version: 'default',
    close,
  };
}

function sseDatas(text: string): string[] {
  return text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice(6));
}

/** The fields slime reads from one answer object. */
function expectSlimeShape(obj: any, finish: string[], version: string): void {
  expect(Array.isArray(obj)).toBe(false);
  const m = obj.meta_info;
  expect(m.output_token_logprobs).toHaveLength(m.completion_tokens);
  expect(m.output_token_logprobs.map((e: unknown[]) => e[1])).toEqual(obj.output_ids);
  expect(finish).toContain(m.finish_reason.type);
  expect(m.weight_version).toBe(version);
}

describe.each<Wire>(['grpc', 'zmq'])('slime replayed against a TokenSpeed %s fleet', (wire) => {
  let t: TestGateway;
  let fleet: Fleet;
  const ids: string[] = [];

  beforeAll(async () => {
    fleet = await startFleet(wire);
    t = await startTestGateway({ workersListControlUrls: true });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('POST /workers → 202; GET /workers lists {id, url} (the control app) per engine', async () => {
    for (const reg of fleet.registrations) {
      const r = await t.http('POST', '/workers', { body: reg });
      expect(r.status).toBe(202);
      ids.push(r.json.id);
    }
    await t.waitReady(2);
    const rows = (await t.http('GET', '/workers')).json.workers as Array<Record<string, unknown>>;
    expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    for (const [i, e] of fleet.engines.entries()) {
      expect(rows.find((r) => r.id === ids[i])).toMatchObject({ url: e.controlUrl, registry_url: e.url, connection_mode: wire });
    }
    // No runtime_type was sent: the registry's default for the wire is TokenSpeed, and the
    // one served model is known (discovered on gRPC, the operator's label on ZMQ).
    for (const row of (await t.http('GET', '/v1/rl/workers')).json.workers) {
      expect(row).toMatchObject({ engine: 'tokenspeed', connection_mode: wire, health: 'ready' });
    }
    for (const id of ids) expect((await t.http('GET', `/workers/${id}`)).json.model_id).toBe(MODEL);
  });

  it('slime /generate (no model) → one object whose logprobs carry the output ids', async () => {
    const r = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(r.status).toBe(200);
    expectSlimeShape(r.json, ['stop', 'length'], fleet.version);
    expect(r.json.meta_info.completion_tokens).toBeGreaterThan(0);
  });

  it('the same streamed → SSE objects of the same shape, final [DONE]', async () => {
    const r = await t.http('POST', '/generate', { body: { ...SLIME_BODY, stream: true } });
    expect(r.status).toBe(200);
    expect(String(r.headers['content-type'])).toContain('text/event-stream');
    const datas = sseDatas(r.text);
    expect(datas.at(-1)).toBe('[DONE]');
    expect(datas.length).toBeGreaterThan(1);
    for (const d of datas.slice(0, -1)) expect(Array.isArray(JSON.parse(d).output_ids)).toBe(true);
    expectSlimeShape(JSON.parse(datas.at(-2)!), ['stop', 'length'], fleet.version);
  });

  it('abort_all per listed URL → loads reach 0; streamed and buffered calls end 200 abort partials', async () => {
    const calls = [inFlight(t.url, { ...LONG, stream: true }), inFlight(t.url, { ...LONG, stream: true }), inFlight(t.url, LONG), inFlight(t.url, LONG)];
    expect(await Promise.all(calls.slice(0, 2).map((c) => c.headers))).toEqual([200, 200]);
    await until('all four running', async () => {
      let n = 0;
      for (const e of fleet.engines) n += slimeCount(await slimeGet(`${e.controlUrl}/v1/loads`));
      return n === 4 ? true : undefined;
    });
    const urls = await slimeAbortFlow(t.url);
    expect(urls.sort()).toEqual(fleet.engines.map((e) => e.controlUrl).sort());
    for (const c of calls.slice(0, 2)) {
      const r = await c.done;
      expect(r.status).toBe(200);
      const datas = sseDatas(r.text);
      expect(datas.at(-1)).toBe('[DONE]');
      const last = JSON.parse(datas.at(-2)!);
      expectSlimeShape(last, ['abort'], fleet.version);
      expect(last.meta_info.completion_tokens).toBeGreaterThan(0);
    }
    for (const c of calls.slice(2)) {
      const r = await c.done;
      expect(r.status).toBe(200);
      expectSlimeShape(JSON.parse(r.text), ['abort'], fleet.version);
    }
    // abort_all leaves the engines serving.
    expect((await t.http('POST', '/generate', { body: SLIME_BODY })).status).toBe(200);
  });

  it('every engine paused → /generate 503 (retryable); after continue_generation the retry succeeds', async () => {
    const selector = encodeURIComponent(`id in (${ids.join(',')})`);
    const paused = await t.http('POST', `/v1/rl/engine/pause_generation?selector=${selector}`, { body: { mode: 'abort' } });
    expect(paused.status).toBe(200);
    for (const e of fleet.engines) expect((await slimeGet(`${e.controlUrl}/is_paused`)).is_paused).toBe(true);
    const refused = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(refused.status).toBe(503);
    expect(refused.json.error).toBe('no_available_workers');
    const resumed = await t.http('POST', `/v1/rl/engine/continue_generation?selector=${selector}`, { body: {} });
    expect(resumed.status).toBe(200);
    const retried = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(retried.status).toBe(200);
    expectSlimeShape(retried.json, ['stop', 'length'], fleet.version);
  });

  it('re-registration of a known URL → 202 with the same id; the fleet still serves', async () => {
    const r = await t.http('POST', '/workers', { body: fleet.registrations[0] });
    expect(r.status).toBe(202);
    expect(r.json.id).toBe(ids[0]);
    await t.waitReady(2);
    expect((await t.http('GET', '/workers')).json.workers).toHaveLength(2);
    expect((await t.http('POST', '/generate', { body: SLIME_BODY })).status).toBe(200);
  });

  it('DELETE /workers/{id} → 2xx; gone from GET /workers and /v1/rl/workers', async () => {
    const r = await t.http('DELETE', `/workers/${ids[0]}`);
    expect(r.status).toBeGreaterThanOrEqual(200);
    expect(r.status).toBeLessThan(300);
    const listed = (await t.http('GET', '/workers')).json.workers.map((w: { id: string }) => w.id);
    expect(listed).toEqual([ids[1]]);
    const rl = (await t.http('GET', '/v1/rl/workers')).json.workers.map((w: { id: string }) => w.id);
    expect(rl).toEqual([ids[1]]);
    const after = await t.http('POST', '/generate', { body: SLIME_BODY });
    expect(after.status).toBe(200);
    expect(after.headers['x-smg-routed-worker-id']).toBe(fleet.engines[1]!.url);
  });
});
