// The pass-through answers of `/v1/rl`, as the API document shows them:
// one engine's answer wrapped with who answered (RlCallOutcome), and a fan-out's per-engine
// results and failures (RlFanoutResponse, control/fanout-answer.ts). Documentation only.

import { Type, type TSchema } from '@sinclair/typebox';

export const EnginePathParams = Type.Object({
  '*': Type.String({ description: "The engine's own route (e.g. `pause_generation`, `update_weights_from_disk`): at most 4 segments of `[A-Za-z0-9._-]`." }),
});

export const WorkerEnginePathParams = Type.Object({
  id: Type.String({ description: 'The registry worker id.' }),
  '*': EnginePathParams.properties['*'],
});

export const CallOutcome = Type.Object(
  {
    worker_id: Type.String(),
    url: Type.String({ description: 'The registry URL (never the control URL).' }),
    status: Type.Integer({ description: "The engine's HTTP status." }),
    latency_ms: Type.Number(),
    body: Type.Unknown({ description: "The engine's body: JSON when it parsed, else text." }),
    body_truncated: Type.Optional(Type.Literal(true)),
  },
  { additionalProperties: true, description: "One engine's answer." },
);

export const FailedCall = Type.Object(
  {
    worker_id: Type.String(),
    url: Type.String(),
    error: Type.String({
      description: '`upstream_error` (a non-2xx answer), `upstream_timeout`, `upstream_unreachable`, `bus_unavailable`, `no_control_endpoint`.',
    }),
    message: Type.String(),
    status: Type.Optional(Type.Integer()),
    connection_mode: Type.Optional(Type.String()),
  },
  { additionalProperties: true, description: 'An engine whose call did not succeed.' },
);

export const FanoutAnswer = Type.Object(
  {
    results: Type.Record(Type.String(), CallOutcome, { description: 'Every engine that answered, by worker id (non-2xx answers too).' }),
    failed: Type.Array(FailedCall),
    total: Type.Integer({ minimum: 1 }),
    succeeded: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: true, description: 'One call sent to every matching engine (DP ranks collapsed).' },
);

const Trace = {
  'x-request-id': Type.Optional(Type.String({ description: 'Forwarded to the engines.' })),
  traceparent: Type.Optional(Type.String({ description: 'Forwarded to the engines.' })),
  tracestate: Type.Optional(Type.String({ description: 'Forwarded to the engines.' })),
};

export const TraceHeaders = Type.Object(Trace, { additionalProperties: true });

export const FanoutHeaders = Type.Object(
  {
    'x-rlgate-fanout-concurrency': Type.Optional(
      Type.String({ description: 'How many legs run at once per replica, 1-65536 (default: 32 for weight loads, the whole fleet for other calls).' }),
    ),
    ...Trace,
  },
  { additionalProperties: true },
);

/**
 * The per-worker route's answers: the engine's status is mirrored, so any status may carry its
 * answer (CallOutcome), and the gateway's own errors share some of those statuses.
 */
export function mirroredResponses(errors: Record<number, TSchema>): Record<string, TSchema> {
  const out: Record<string, TSchema> = {
    '2xx': { ...CallOutcome, description: "The engine's answer; the HTTP status is the engine's." },
    '4xx': { ...CallOutcome, description: "The engine's own 4xx answer, mirrored." },
    '5xx': { ...CallOutcome, description: "The engine's own 5xx answer, mirrored (502 when its status is not a usable HTTP status)." },
  };
  for (const [status, error] of Object.entries(errors)) {
    out[status] = Type.Union([error, CallOutcome], { description: `${error.description} Or the engine's own answer with this status, mirrored.` });
  }
  return out;
}
