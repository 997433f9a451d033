// Messages put on the refit queue by hand, past the doors (a connection with a gateway's rights
// publishing on rl.refit.submit): the runner holds each to the doors' checks before it touches an
// engine. An invalid version or a Nats-Msg-Id that is not the id is dropped; a target that is not
// registered, a call the bus cannot carry, or an overlap with a running refit is refused with a
// report in the refit's journal. Judged on the simulators' own records: no pause and no load
// reached them. A message shaped as a gateway queues it still runs.

import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RUNNERS, refitStreamName } from '../../src/bus/refit-queue.ts';
import type { Bus } from '../../src/bus/connection.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { spawnSglangSim, type SimProcess } from '../fixtures/sglang-sim.ts';

const STREAM = refitStreamName('rl');
const UNKNOWN = '00000000-0000-5000-8000-000000000000';

describe('hand-made refit queue messages', () => {
  let t: TestGateway;
  let sims: SimProcess[];
  let ids: string[];
  let bus: Bus;

  beforeAll(async () => {
    sims = await Promise.all([0, 1].map(() => spawnSglangSim(['--token-rate', '0'])));
    t = await startTestGateway();
    ids = await t.register(sims.map((s) => s.url));
    bus = await t.bus();
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all((sims ?? []).map((s) => s.stop()));
  });
  beforeEach(async () => {
    for (const s of sims) await s.clearRequests();
  });

  /** A queued refit as service.ts builds it, for the registered engines. */
  const queued = (id: string, patch: Record<string, unknown> = {}, request: Record<string, unknown> = {}) => ({
    id,
    request: { refit_id: id, weight_version: id, source: { kind: 'disk', model_path: '/ckpt' }, ...request },
    selector: null,
    targets: ids,
    skipped: [],
    origin: 'nats',
    submitted_at: new Date().toISOString(),
    ...patch,
  });

  /** Publishes on the queue past the doors, as a gateway does after its checks. */
  async function forge(payload: unknown, msgID: string): Promise<number> {
    return (await jetstream(bus.nc).publish('rl.refit.submit', JSON.stringify(payload), { msgID })).seq;
  }

  /** Resolves once every message up to `seq` is off the queue (acknowledged or dropped). */
  async function taken(seq: number): Promise<void> {
    const jsm = await jetstreamManager(bus.nc);
    const deadline = Date.now() + 10_000;
    for (;;) {
      const c = await jsm.consumers.info(STREAM, RUNNERS);
      if (c.ack_floor.stream_seq >= seq) return;
      if (Date.now() > deadline) throw new Error(`message ${seq} still on the queue: ${JSON.stringify(c.ack_floor)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** The refit's report, once its journal holds one (10 s at most). */
  async function report(id: string): Promise<{ status: string; engines: Array<{ error?: string; message?: string }> }> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await t.http('GET', `/v1/rl/refits/${id}`);
      if (r.status === 200 && ['succeeded', 'partial', 'failed'].includes(r.json.status)) return r.json;
      if (Date.now() > deadline) throw new Error(`no report for ${id}: ${r.status} ${r.text}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** What reached the engines: no control call at all (discovery and probes are the gateway's own). */
  async function untouched(): Promise<void> {
    for (const s of sims) {
      const calls = (await s.requests()).filter((r) => ['/pause_generation', '/update_weights_from_disk', '/continue_generation'].includes(r.path));
      expect(calls.map((r) => r.path)).toEqual([]);
      expect((await s.state()).paused).toBeNull();
    }
  }

  it('drops a message whose version a door refuses; nothing reaches the engines', async () => {
    await taken(await forge(queued('forged-version', {}, { weight_version: 'FORGED Q' }), 'forged-version'));
    await untouched();
    expect((await t.http('GET', '/v1/rl/refits/forged-version')).status).toBe(404);
  });

  it('drops a message whose Nats-Msg-Id is not its id', async () => {
    await taken(await forge(queued('forged-id'), 'forged-submit'));
    await untouched();
  });

  it('refuses a refit with a target that is not registered, with a report naming it', async () => {
    await forge(queued('forged-target', { targets: [...ids, UNKNOWN] }), 'forged-target');
    const r = await report('forged-target');
    await untouched();
    expect(r.status).toBe('failed');
    expect(r.engines.every((e) => e.error === 'plan_refused')).toBe(true);
    expect(r.engines[0]!.message).toContain(`worker \`${UNKNOWN}\` is not registered`);
  });

  it('refuses a refit whose load call the bus cannot carry', async () => {
    await forge(queued('forged-size', {}, { source: { kind: 'disk', model_path: `/${'x'.repeat(6_500_000)}` } }), 'forged-size');
    expect((await report('forged-size')).engines[0]!.message).toContain('limited to');
    await untouched();
  });

  it('refuses a refit that overlaps a running one, and never runs it after', async () => {
    for (const s of sims) await s.setFaults({ route: 'update_weights_from_disk', delayMs: 1_000, times: 1 });
    const first = t.http('POST', '/v1/rl/refits', { body: { refit_id: 'real-1', weight_version: 'real-1', source: { kind: 'disk', model_path: '/ckpt' } } });
    const deadline = Date.now() + 10_000;
    while ((await sims[0]!.state()).paused === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await forge(queued('forged-overlap'), 'forged-overlap');
    expect((await first).status).toBe(200);
    const r = await report('forged-overlap');
    expect(r.engines[0]!.message).toContain('already part of running refit `real-1`');
    // A message handed back comes again 1 s later: it must not come back and run.
    await new Promise((r) => setTimeout(r, 1_200));
    for (const s of sims) {
      const loads = (await s.requests()).filter((q) => q.path === '/update_weights_from_disk');
      expect(loads.map((q) => JSON.parse(q.body).weight_version)).toEqual(['real-1']);
      expect((await s.state()).weightVersion).toBe('real-1');
    }
  });

  it("runs a message shaped as a gateway queues it (checks are not an author's proof)", async () => {
    await forge(queued('hand-made'), 'hand-made');
    expect((await report('hand-made')).status).toBe('succeeded');
    for (const s of sims) expect((await s.state()).weightVersion).toBe('hand-made');
  });
});
