// GET /health's answers, as the API document shows them: healthy while the gateway is connected
// to NATS, 503 while it reconnects (every control call and refit would fail meanwhile).

import { Type } from '@sinclair/typebox';

export const Healthy = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: true, description: 'Connected to NATS.' });

export const Unhealthy = Type.Object(
  { status: Type.Literal('unavailable'), reason: Type.Literal('bus_unavailable'), message: Type.String() },
  { additionalProperties: true, description: 'Not connected to NATS (reconnecting): control calls and refits fail with bus_unavailable until it is back.' },
);
