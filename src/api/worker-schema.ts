// The data-plane worker registry's answers (POST|GET|PUT|PATCH|DELETE /workers), as the API
// document shows them: SMG's row shape, which slime reads (`id`, `url`). Documentation only:
// the request bodies are validated by their own schemas in http/workers.ts.

import { Type } from '@sinclair/typebox';

export const WorkerIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256, description: 'The registry worker id (a UUID).' }) });

export const WorkerRow = Type.Object(
  {
    id: Type.String({ description: 'Registry worker id.' }),
    url: Type.String({
      description: 'The registered URL (http(s)://, grpc(s):// or a ZMQ URL); in listings, possibly the control app URL (see `registry_url`).',
    }),
    registry_url: Type.Optional(
      Type.String({ description: 'Listings only, with --workers-list-control-urls: the registry URL of a token engine listed by its control app URL.' }),
    ),
    model_id: Type.String(),
    worker_type: Type.String({ description: '`regular`: prefill and decode (PD) workers are refused at registration.' }),
    connection_mode: Type.String({ description: '`http`, `grpc` or `zmq`.' }),
    runtime_type: Type.String({ description: 'The engine: `sglang`, `tokenspeed`, `vllm`, ...' }),
    status: Type.String({ description: '`ready` or `not_ready`.' }),
    is_healthy: Type.Boolean(),
    state: Type.String({ description: "The engine actor's lifecycle state." }),
    load: Type.Number({ description: 'Data-plane requests in flight on this worker.' }),
    labels: Type.Record(Type.String(), Type.String(), { description: "Discovered labels merged with the caller's (the caller wins)." }),
  },
  { additionalProperties: true, description: 'One registered worker (SMG-shaped). Secrets never appear.' },
);

export const WorkerTypeCounts = Type.Object(
  {
    prefill_count: Type.Integer({ minimum: 0 }),
    decode_count: Type.Integer({ minimum: 0 }),
    regular_count: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: true, description: "SMG's `stats`: registry workers by type (DP ranks each)." },
);

export const RlgateWorkerStats = Type.Object(
  {
    total_workers: Type.Integer({ minimum: 0 }),
    healthy_workers: Type.Integer({ minimum: 0 }),
    total_models: Type.Integer({ minimum: 0 }),
    total_load: Type.Number({ minimum: 0 }),
    by_type: Type.Object({ regular: Type.Integer(), prefill: Type.Integer(), decode: Type.Integer() }, { additionalProperties: true }),
  },
  {
    additionalProperties: true,
    description:
      "rlgate's own figures over every registry entry (DP ranks each): `healthy_workers` counts `status: ready`, `total_models` the distinct real models, `total_load` the data-plane requests in flight.",
  },
);

export const WorkerListing = Type.Object(
  {
    workers: Type.Array(WorkerRow, { description: 'Sorted by url.' }),
    total: Type.Integer({ minimum: 0, description: 'Workers listed; with `limit`, workers in the whole registry.' }),
    stats: WorkerTypeCounts,
    rlgate: RlgateWorkerStats,
    next_cursor: Type.Optional(
      Type.Union([Type.String(), Type.Null()], { description: 'rlgate, with `limit` only: the `cursor` of the next page; null on the last page.' }),
    ),
  },
  { additionalProperties: true, description: 'Every registered worker.' },
);

export const WorkerAccepted = Type.Object(
  {
    id: Type.String(),
    url: Type.String(),
    status: Type.Literal('accepted'),
    message: Type.String(),
  },
  { additionalProperties: true, description: 'Registration accepted; discovery runs in the background. Registering a URL again is idempotent (same id).' },
);

export const WorkerRemoved = Type.Object(
  { id: Type.String(), url: Type.String(), status: Type.Literal('removed') },
  { additionalProperties: true, description: 'The worker was removed from the registry.' },
);
