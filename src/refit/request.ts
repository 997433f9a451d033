// What a trainer asks for when it starts a refit (POST /v1/rl/refits or a NATS request on
// `rl.refit.request`): the schema, its defaults, and the checks a schema cannot express; the
// fields are described with the shape, in wire/refit-request.ts. Both entry points validate
// through here, so they accept and refuse exactly the same input.

import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { GatewayError } from '../api/errors.ts';
import { validateVersion } from '../fleet/versions.ts';
import type { RefitRequest } from '../wire/refit-request.ts';

const Chunk = Type.Object(
  {
    names: Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }),
    dtypes: Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }),
    shapes: Type.Array(Type.Array(Type.Integer({ minimum: 0 })), { minItems: 1 }),
    load_format: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  },
  { additionalProperties: false },
);

const DiskSource = Type.Object(
  {
    kind: Type.Literal('disk'),
    model_path: Type.String({ minLength: 1 }),
    load_format: Type.Optional(Type.String()),
    flush_cache: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const DistributedSource = Type.Object(
  {
    kind: Type.Literal('distributed'),
    master_address: Type.String({ minLength: 1 }),
    master_port: Type.Integer({ minimum: 1, maximum: 65535 }),
    world_size: Type.Optional(Type.Integer({ minimum: 2 })),
    group_name: Type.Optional(Type.String({ minLength: 1 })),
    backend: Type.Optional(Type.String({ minLength: 1 })),
    chunks: Type.Array(Chunk, { minItems: 1 }),
    flush_cache: Type.Optional(Type.Boolean()),
    keep_group: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

// setTimeout's ceiling: a longer delay would overflow and fire at once.
const Ms = Type.Integer({ minimum: 1, maximum: 2_147_483_647 });
const Deadlines = Type.Object(
  {
    pause: Type.Optional(Ms),
    refit: Type.Optional(Ms),
    verify: Type.Optional(Ms),
    resume: Type.Optional(Ms),
  },
  { additionalProperties: false },
);

export const RefitRequestSchema = Type.Object(
  {
    refit_id: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,128}$' })),
    dry_run: Type.Optional(Type.Boolean()),
    weight_version: Type.String(),
    selector: Type.Optional(Type.String()),
    source: Type.Union([DiskSource, DistributedSource]),
    pause_mode: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
    verify: Type.Optional(Type.Boolean()),
    quorum: Type.Optional(
      Type.Object(
        {
          min_engines: Type.Optional(Type.Integer({ minimum: 1 })),
          min_fraction: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    deadlines_ms: Type.Optional(Deadlines),
    grace_ms: Type.Optional(Ms),
    verify_weights: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({ minLength: 1, maxLength: 512 }),
            values: Type.Array(Type.Union([Type.Number(), Type.Null()]), { minItems: 1, maxItems: 64 }),
          },
          { additionalProperties: false },
        ),
        { minItems: 1, maxItems: 16 },
      ),
    ),
  },
  { additionalProperties: false },
);

// The shape the schema accepts is the wire's (wire/refit-request.ts, where the fields are
// described): this fails to compile when the two drift apart.
type SchemaShape = Static<typeof RefitRequestSchema>;
type Same<A, B> = [A, B] extends [B, A] ? true : false;
type Holds<T extends true> = T;
type SchemaIsWireShape = Holds<Same<SchemaShape, RefitRequest>>;

const check = TypeCompiler.Compile(RefitRequestSchema);

/** Validates an already-parsed body; every refusal is a 400 with the field that failed. */
export function parseRefitRequest(body: unknown): RefitRequest {
  if (!check.Check(body)) {
    const first = check.Errors(body).First();
    const where = first?.path || '/';
    throw new GatewayError('invalid_request', `invalid refit request at \`${where}\`: ${first?.message ?? 'does not match the schema'}`, { field: where });
  }
  const req = body as RefitRequest;
  req.weight_version = validateVersion(req.weight_version);
  if (req.source.kind === 'distributed') {
    for (const [i, c] of req.source.chunks.entries()) {
      if (c.names.length !== c.dtypes.length || c.names.length !== c.shapes.length) {
        throw new GatewayError('invalid_request', `chunk ${i}: names, dtypes and shapes must have the same length`, { field: `/source/chunks/${i}` });
      }
    }
  }
  return req;
}
