// GET /health's answers, as the API document shows them: healthy while the gateway is connected
// to NATS, 503 while it reconnects (every control call and refit would fail meanwhile). And SMG's
// probes: /liveness (the process answers) and /readiness (the data plane can route: at least one
// healthy worker, whatever NATS does).

import { Type } from '@sinclair/typebox';

export const Healthy = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: true, description: 'Connected to NATS.' });

export const Unhealthy = Type.Object(
  { status: Type.Literal('unavailable'), reason: Type.Literal('bus_unavailable'), message: Type.String() },
  { additionalProperties: true, description: 'Not connected to NATS (reconnecting): control calls and refits fail with bus_unavailable until it is back.' },
);

export const Alive = Type.Literal('OK', { description: 'The gateway process answers.' });

export const Ready = Type.Object(
  { status: Type.Literal('ready'), healthy_workers: Type.Integer({ minimum: 1 }), total_workers: Type.Integer({ minimum: 1 }) },
  { additionalProperties: true, description: 'At least one worker can take data-plane requests.' },
);

export const NotReady = Type.Object(
  {
    status: Type.Literal('not ready'),
    reason: Type.Literal('insufficient healthy workers'),
    healthy_workers: Type.Literal(0),
    total_workers: Type.Integer({ minimum: 0 }),
    message: Type.String({ description: 'rlgate: whether no worker is registered, or none is healthy.' }),
  },
  { additionalProperties: true, description: "No worker can take data-plane requests (SMG's `status` and `reason`)." },
);
