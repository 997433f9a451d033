// The refit queue's verdicts (src/refit/queue-verdict.ts): a message shaped as a gateway queues
// it is read back unchanged, and one that would not pass a door (schema, version, ids, targets)
// is dropped naming why; a new refit that a running refit overlaps, or whose target is not
// registered, is refused; a refit taken over goes on; one that meets a refit queued here waits.

import { describe, expect, it } from 'vitest';
import { readQueuedRefit, takeVerdict, type Clash } from '../../src/refit/queue-verdict.ts';
import type { QueuedRefit } from '../../src/wire/queued-refit.ts';

const W1 = '3f0c1a2b-6d4e-5a10-9b7c-1e2f3a4b5c6d';
const W2 = '9a1d0e2f-3b4c-5d6e-8f70-8192a3b4c5d6';

/** A queued refit as service.ts builds it. */
function queued(patch: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: 'step-42',
    request: { refit_id: 'step-42', weight_version: '42', source: { kind: 'disk', model_path: '/ckpt/step-42' }, selector: 'role=rollout' },
    selector: 'role=rollout',
    targets: [W1, W2],
    skipped: [{ worker_id: 'c27e', url: 'http://10.0.0.7:30000', reason: 'unreachable', message: 'the engine did not answer' }],
    origin: 'nats',
    submitted_at: '2026-12-01T16:02:11.518Z',
    ...patch,
  };
}

const bytes = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
const reason = (v: ReturnType<typeof readQueuedRefit>) => (v.ok ? 'accepted' : v.reason);

describe('readQueuedRefit', () => {
  it("reads a gateway's message back as it was queued", () => {
    const msg = queued();
    const v = readQueuedRefit(bytes(msg), 'step-42');
    expect(v).toEqual({ ok: true, refit: msg });
    const distributed = queued({
      id: 'd-1',
      request: {
        weight_version: 'v2',
        source: { kind: 'distributed', master_address: '10.0.0.1', master_port: 29500, chunks: [{ names: ['w'], dtypes: ['bfloat16'], shapes: [[2, 2]] }] },
      },
      selector: null,
      skipped: [],
      origin: 'http',
    });
    expect(readQueuedRefit(bytes(distributed), 'd-1')).toEqual({ ok: true, refit: distributed });
  });

  it('drops what is not JSON, not an object, or has no valid id', () => {
    expect(reason(readQueuedRefit(bytes('{nope'), 'x'))).toBe('not JSON');
    expect(reason(readQueuedRefit(bytes([1, 2]), 'x'))).toBe('not a JSON object');
    expect(reason(readQueuedRefit(bytes(queued({ id: 'a.b' })), 'a.b'))).toMatch(/no refit id/);
  });

  it('drops a message whose Nats-Msg-Id is missing or another id (it would escape de-duplication)', () => {
    expect(reason(readQueuedRefit(bytes(queued()), undefined))).toMatch(/Nats-Msg-Id null is not its id/);
    expect(reason(readQueuedRefit(bytes(queued()), 'forged-submit'))).toMatch(/Nats-Msg-Id "forged-submit"/);
  });

  it('drops a request the doors refuse: schema, version, chunk lists, another refit_id, a dry run', () => {
    const req = (r: Record<string, unknown>) => bytes(queued({ request: { weight_version: '42', source: { kind: 'disk', model_path: '/m' }, ...r } }));
    expect(reason(readQueuedRefit(req({ weight_version: 'has space' }), 'step-42'))).toMatch(/request is refused: .*printable ASCII/);
    expect(reason(readQueuedRefit(req({ weight_version: '' }), 'step-42'))).toMatch(/request is refused: weight_version is empty/);
    expect(reason(readQueuedRefit(req({ weight_version: 'x'.repeat(129) }), 'step-42'))).toMatch(/exceeds 128 bytes/);
    expect(reason(readQueuedRefit(req({ source: { kind: 'disk' } }), 'step-42'))).toMatch(/request is refused: invalid refit request at `\/source/);
    expect(reason(readQueuedRefit(req({ extra: 1 }), 'step-42'))).toMatch(/request is refused/);
    const chunks = { kind: 'distributed', master_address: 'm', master_port: 1, chunks: [{ names: ['a', 'b'], dtypes: ['f'], shapes: [[1]] }] };
    expect(reason(readQueuedRefit(req({ source: chunks }), 'step-42'))).toMatch(/same length/);
    expect(reason(readQueuedRefit(req({ refit_id: 'other' }), 'step-42'))).toBe('its request names another refit_id');
    expect(reason(readQueuedRefit(req({ dry_run: true }), 'step-42'))).toBe('a dry run is never queued');
    expect(reason(readQueuedRefit(bytes(queued({ request: null })), 'step-42'))).toMatch(/request is refused/);
  });

  it('drops targets that are not distinct worker ids, and a malformed selector, skip list, origin or time', () => {
    const read = (patch: Record<string, unknown>) => reason(readQueuedRefit(bytes(queued(patch)), 'step-42'));
    expect(read({ targets: [] })).toMatch(/targets are not a list/);
    expect(read({ targets: 'w1' })).toMatch(/targets are not a list/);
    expect(read({ targets: [W1, 7] })).toMatch(/targets are not a list/);
    expect(read({ targets: ['rl.>'] })).toMatch(/targets are not a list/);
    expect(read({ targets: [W1, W1] })).toMatch(/name a worker twice/);
    expect(read({ selector: 3 })).toMatch(/selector/);
    expect(read({ skipped: [{ worker_id: 'a' }] })).toMatch(/skipped/);
    expect(read({ skipped: undefined })).toMatch(/skipped/);
    expect(read({ origin: undefined })).toBe('no origin');
    expect(read({ submitted_at: 'yesterday' })).toBe('no submission time');
  });

  it('trims the version as the doors do', () => {
    const msg = queued({ request: { weight_version: ' 42 ', source: { kind: 'disk', model_path: '/m' } } });
    const v = readQueuedRefit(bytes(msg), 'step-42');
    expect(v.ok && v.refit.request.weight_version).toBe('42');
  });
});

describe('takeVerdict', () => {
  const q = (readQueuedRefit(bytes(queued()), 'step-42') as { refit: QueuedRefit }).refit;
  const known = (ids: string[]) => (id: string) => ids.includes(id);
  const running: Clash = { worker: W2, refit: 'step-41', running: true };
  const queuedHere: Clash = { worker: W2, refit: 'step-41', running: false };

  it('runs a new refit whose targets are registered and free', () => {
    expect(takeVerdict(q, { takeover: false, clash: undefined, known: known([W1, W2]) })).toEqual({ take: 'run' });
  });

  it('refuses a new refit that a running refit overlaps, naming the engine and the refit', () => {
    expect(takeVerdict(q, { takeover: false, clash: running, known: known([W1, W2]) })).toEqual({
      take: 'refuse',
      reason: `worker \`${W2}\` is already part of running refit \`step-41\``,
    });
  });

  it('refuses a new refit with a target that is not registered', () => {
    expect(takeVerdict(q, { takeover: false, clash: undefined, known: known([W1]) })).toEqual({ take: 'refuse', reason: `worker \`${W2}\` is not registered` });
  });

  it('hands back a refit that meets one queued here and not started yet, and a taken-over one that meets any', () => {
    expect(takeVerdict(q, { takeover: false, clash: queuedHere, known: known([W1, W2]) })).toEqual({ take: 'later' });
    expect(takeVerdict(q, { takeover: true, clash: running, known: known([]) })).toEqual({ take: 'later' });
  });

  it('goes on with a refit taken over, whatever the registry holds now', () => {
    expect(takeVerdict(q, { takeover: true, clash: undefined, known: known([]) })).toEqual({ take: 'run' });
  });
});
