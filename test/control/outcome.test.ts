// Engine-call outcomes to the wire, as tables: every ControlOutcome kind to its RlCallOutcome
// (callOutcome), its failed[] entry and error code (failedCall, unreachableCode), the per-worker
// proxy's answer or GatewayError with its HTTP status and context (proxyAnswer), and a fan-out's
// body (fanoutResponse: results, failed sorted by worker id, total, succeeded). The codes and
// statuses are the ones docs/rl-control-plane.md lists (Errors, Pass-through and fan-out).

import { describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { callOutcome, failedCall, isSuccess, noControlEndpoint, proxyAnswer, unreachableCode } from '../../src/control/outcome.ts';
import { fanoutResponse } from '../../src/control/fanout-answer.ts';
import { Registry } from '../../src/fleet/registry.ts';
import type { ControlOutcome } from '../../src/wire/control-call.ts';

const w = { id: 'w-1', url: 'http://10.0.0.5:30000@1' };
const answer = (status: number, body: unknown = { success: true }, truncated = false): ControlOutcome => ({
  kind: 'answer',
  status,
  latencyMs: 12,
  body,
  truncated,
});
const timeout: ControlOutcome = { kind: 'timeout', latencyMs: 600_000, message: 'upstream `http://10.0.0.5:30000` timed out after 600s' };
const unreachable = (code?: 'bus_unavailable' | 'not_owner'): ControlOutcome => ({
  kind: 'unreachable',
  latencyMs: 3,
  message: 'connect ECONNREFUSED',
  ...(code ? { code } : {}),
});
const noEndpoint: ControlOutcome = { kind: 'no_control_endpoint', latencyMs: 0, message: 'no rl.control_url', connectionMode: 'grpc' };

describe('callOutcome: an answer as RlCallOutcome', () => {
  it.each([
    [
      'a JSON 200',
      answer(200, { success: true, message: 'ok' }),
      { worker_id: 'w-1', url: w.url, status: 200, latency_ms: 12, body: { success: true, message: 'ok' } },
    ],
    ['a text 500', answer(500, 'Internal Server Error'), { worker_id: 'w-1', url: w.url, status: 500, latency_ms: 12, body: 'Internal Server Error' }],
    ['a null body', answer(204, null), { worker_id: 'w-1', url: w.url, status: 204, latency_ms: 12, body: null }],
    [
      'a truncated body',
      answer(200, 'x'.repeat(8), true),
      { worker_id: 'w-1', url: w.url, status: 200, latency_ms: 12, body: 'x'.repeat(8), body_truncated: true },
    ],
  ])('%s', (_name, o, row) => {
    // The URL is the registry URL as given (with its DP rank), never the control URL.
    expect(callOutcome(w, o as Extract<ControlOutcome, { kind: 'answer' }>)).toStrictEqual(row);
  });
});

describe('isSuccess and failedCall: one outcome, one failed[] entry', () => {
  it.each<[string, ControlOutcome, boolean, Record<string, unknown> | undefined]>([
    ['200', answer(200), true, undefined],
    ['204', answer(204, null), true, undefined],
    ['299', answer(299), true, undefined],
    // A 2xx saying success: false still counts: the fan-out leaves bodies to the trainer.
    ['200 with success: false', answer(200, { success: false, message: 'no' }), true, undefined],
    ['199', answer(199), false, { worker_id: 'w-1', url: w.url, error: 'upstream_error', message: 'HTTP 199', status: 199 }],
    ['300', answer(300), false, { worker_id: 'w-1', url: w.url, error: 'upstream_error', message: 'HTTP 300', status: 300 }],
    ['404', answer(404), false, { worker_id: 'w-1', url: w.url, error: 'upstream_error', message: 'HTTP 404', status: 404 }],
    ['503', answer(503), false, { worker_id: 'w-1', url: w.url, error: 'upstream_error', message: 'HTTP 503', status: 503 }],
    ['a timeout', timeout, false, { worker_id: 'w-1', url: w.url, error: 'upstream_timeout', message: timeout.message }],
    ['unreachable', unreachable(), false, { worker_id: 'w-1', url: w.url, error: 'upstream_unreachable', message: 'connect ECONNREFUSED' }],
    [
      'unreachable, not_owner (still refused when its deadline ran out)',
      unreachable('not_owner'),
      false,
      { worker_id: 'w-1', url: w.url, error: 'upstream_unreachable', message: 'connect ECONNREFUSED' },
    ],
    ['the bus down', unreachable('bus_unavailable'), false, { worker_id: 'w-1', url: w.url, error: 'bus_unavailable', message: 'connect ECONNREFUSED' }],
    [
      'no control endpoint',
      noEndpoint,
      false,
      { worker_id: 'w-1', url: w.url, error: 'no_control_endpoint', message: 'no rl.control_url', connection_mode: 'grpc' },
    ],
  ])('%s', (_name, o, success, failed) => {
    expect(isSuccess(o)).toBe(success);
    expect(failedCall(w, o)).toStrictEqual(failed);
  });
});

describe('unreachableCode', () => {
  it.each([
    [undefined, 'upstream_unreachable'],
    ['not_owner', 'upstream_unreachable'],
    ['bus_unavailable', 'bus_unavailable'],
  ] as const)('code %s → %s', (code, want) => {
    expect(unreachableCode(unreachable(code) as Extract<ControlOutcome, { kind: 'unreachable' }>)).toBe(want);
  });
});

describe('proxyAnswer: the per-worker route', () => {
  // The engine's status is mirrored, whatever it is, when HTTP can carry it.
  it.each([
    [200, 200],
    [204, 204],
    [400, 400],
    [404, 404],
    [500, 500],
    [599, 599],
    [199, 502],
    [600, 502],
    [0, 502],
    [200.5, 502],
  ])('an answer %d → HTTP %d with the RlCallOutcome', (status, http) => {
    const o = answer(status);
    expect(proxyAnswer(w, o)).toStrictEqual({ status: http, body: callOutcome(w, o as Extract<ControlOutcome, { kind: 'answer' }>) });
  });

  it.each<[string, ControlOutcome, string, number, Record<string, unknown>]>([
    ['a timeout', timeout, 'upstream_timeout', 504, { worker_id: 'w-1', url: w.url }],
    ['unreachable', unreachable(), 'upstream_unreachable', 502, { worker_id: 'w-1', url: w.url }],
    ['unreachable, not_owner', unreachable('not_owner'), 'upstream_unreachable', 502, { worker_id: 'w-1', url: w.url }],
    ['the bus down', unreachable('bus_unavailable'), 'bus_unavailable', 503, { worker_id: 'w-1', url: w.url }],
    ['no control endpoint', noEndpoint, 'no_control_endpoint', 422, { worker_id: 'w-1', url: w.url, connection_mode: 'grpc' }],
  ])('%s → throws %s (%i) with worker_id and url', (_name, o, code, status, context) => {
    const err = gatewayError(() => proxyAnswer(w, o));
    expect(err.code).toBe(code);
    expect(err.status).toBe(status);
    expect(err.context).toStrictEqual(context);
    expect(err.message).toBe((o as { message: string }).message);
    expect(err.toJSON()).toStrictEqual({ error: code, message: err.message, ...context });
  });
});

describe('fanoutResponse: the fan-out body', () => {
  const registry = new Registry('replica-a');
  const [a, b, c, d] = ['http://127.0.0.1:30001', 'http://127.0.0.1:30002', 'http://127.0.0.1:30003', 'http://127.0.0.1:30004'].map(
    (url) => registry.register({ url }).worker,
  );
  const byId = [a!, b!, c!, d!].sort((x, y) => (x.id < y.id ? -1 : 1));

  it.each<[string, ControlOutcome[], number, string[], number[]]>([
    ['every engine answers 200', [answer(200), answer(200), answer(200), answer(200)], 4, [], [0, 1, 2, 3]],
    ['a 500 is in results and in failed', [answer(200), answer(500), answer(200), answer(200)], 3, ['upstream_error'], [0, 1, 2, 3]],
    [
      'failures without an answer are only in failed',
      [timeout, unreachable(), unreachable('bus_unavailable'), noEndpoint],
      0,
      ['upstream_timeout', 'upstream_unreachable', 'bus_unavailable', 'no_control_endpoint'],
      [],
    ],
    ['success: false still counts as succeeded', [answer(200, { success: false }), answer(200), answer(200), answer(200)], 4, [], [0, 1, 2, 3]],
  ])('%s', (_name, outcomes, succeeded, errors, answered) => {
    // Given in reverse id order: the body is in worker id order whatever the targets' order.
    const outs = new Map(byId.map((w, i) => [w.id, outcomes[i]!]));
    const body = fanoutResponse([...byId].reverse(), outs);
    expect(body.total).toBe(4);
    expect(body.succeeded).toBe(succeeded);
    expect(body.failed.map((f) => f.error)).toEqual(errors);
    expect(body.failed.map((f) => f.worker_id)).toEqual([...body.failed.map((f) => f.worker_id)].sort());
    expect(Object.keys(body.results)).toEqual(answered.map((i) => byId[i]!.id));
    for (const f of body.failed) expect(f.url).toBe(byId.find((w) => w.id === f.worker_id)!.url);
  });

  it('a target without an outcome is failed upstream_unreachable, never dropped', () => {
    const body = fanoutResponse([a!, b!], new Map([[a!.id, answer(200)]]));
    expect(body.total).toBe(2);
    expect(body.succeeded).toBe(1);
    expect(body.failed).toStrictEqual([
      { worker_id: b!.id, url: b!.url, error: 'upstream_unreachable', message: `upstream \`${b!.url}\` unreachable: no outcome` },
    ]);
  });
});

describe('noControlEndpoint: the message says what to do', () => {
  it.each([
    ['grpc', 'launch the engine with a routable --rl-control-host'],
    ['zmq', 'ZMQ engines advertise nothing: set the `rl.control_url` label'],
  ] as const)('%s', (mode, fix) => {
    const text = noControlEndpoint({ id: 'w-9', connectionMode: mode });
    expect(text).toContain(`worker \`w-9\` uses connection mode \`${mode}\` and has no \`rl.control_url\``);
    expect(text).toContain(fix);
  });
});
