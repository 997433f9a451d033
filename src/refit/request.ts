// What a trainer asks for when it starts a refit (POST /v1/rl/refits or a NATS request on
// `rl.refit.request`): the schema, its defaults, and the checks a schema cannot express.
// Both entry points validate through here, so they accept and refuse exactly the same input.

import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { GatewayError } from '../api/errors.ts';
import { validateVersion } from '../fleet/versions.ts';

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
    /** Keep the weight-update group after the refit (slime keeps it across refits). */
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
    /**
     * The refit's id, chosen by the client so that a retried request is the same refit (the queue
     * de-duplicates on it) and its report can be fetched by id from any replica. Generated if absent.
     */
    refit_id: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,128}$' })),
    /** Answer the plan (targets, skipped engines, world size, rank offsets, calls) and touch nothing. */
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
    /**
     * Once this long has passed in the pause and the quorum is met, engines still pausing are cut
     * from the refit and quarantined, so the others wait no longer (default 10000).
     */
    grace_ms: Type.Optional(Ms),
    /**
     * Parameters read back from every engine after the load (SGLang's `/get_weights_by_name`),
     * each with the first values the trainer sent: an engine that answered the load with 200
     * without applying it shows other values and fails verification (then is quarantined).
     */
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

export type RefitRequest = Static<typeof RefitRequestSchema>;
export type DistributedSourceSpec = Static<typeof DistributedSource>;

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
