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

const Strategy = Type.Object(
  {
    kind: Type.Union([Type.Literal('all'), Type.Literal('rolling'), Type.Literal('in_flight')]),
    max_unavailable: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^(100|[1-9][0-9]?)%$' })])),
    drain_timeout_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 2_147_483_647 })),
    pause_mode: Type.Optional(Type.Union([Type.Literal('abort'), Type.Literal('retract')])),
    max_failed: Type.Optional(Type.Integer({ minimum: 0 })),
    cache: Type.Optional(Type.Union([Type.Literal('flush'), Type.Literal('keep')])),
  },
  { additionalProperties: false },
);

/** The strategy fields each kind reads: a field another kind reads is refused, not ignored. */
const STRATEGY_FIELDS: Record<string, readonly string[]> = {
  all: [],
  rolling: ['max_unavailable', 'drain_timeout_ms', 'pause_mode', 'max_failed'],
  in_flight: ['cache'],
};

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
    strategy: Type.Optional(Strategy),
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
  if (req.strategy) checkStrategy(req);
  if (req.source.kind === 'distributed') {
    for (const [i, c] of req.source.chunks.entries()) {
      if (c.names.length !== c.dtypes.length || c.names.length !== c.shapes.length) {
        throw new GatewayError('invalid_request', `chunk ${i}: names, dtypes and shapes must have the same length`, { field: `/source/chunks/${i}` });
      }
    }
  }
  return req;
}

/** What the strategy schema cannot say: which fields each kind takes, and what it combines with. */
function checkStrategy(req: RefitRequest): void {
  const st = req.strategy!;
  const allowed = STRATEGY_FIELDS[st.kind]!;
  for (const k of Object.keys(st)) {
    if (k !== 'kind' && !allowed.includes(k)) {
      throw new GatewayError('invalid_request', `invalid refit request at \`/strategy/${k}\`: not a field of the \`${st.kind}\` strategy`, {
        field: `/strategy/${k}`,
      });
    }
  }
  // The trainer broadcasts each NCCL refit to one group of every engine at once: a wave of its own
  // would need a broadcast per wave, which no trainer protocol here says (docs/refit-strategies.md).
  if (st.kind === 'rolling' && req.source.kind === 'distributed') {
    throw new GatewayError(
      'invalid_request',
      'a rolling refit loads from disk: an NCCL (distributed) refit broadcasts to every engine at once; use strategy `all` or `in_flight`',
      {
        field: '/strategy/kind',
      },
    );
  }
  // An in_flight refit's `cache` says whether the load flushes: a source flag saying otherwise is a contradiction.
  if (st.kind === 'in_flight' && req.source.flush_cache !== undefined && req.source.flush_cache !== (st.cache === 'flush')) {
    throw new GatewayError(
      'invalid_request',
      `invalid refit request at \`/source/flush_cache\`: the in_flight strategy's cache (\`${st.cache ?? 'keep'}\`) says otherwise`,
      {
        field: '/source/flush_cache',
      },
    );
  }
  // The strategy says how each engine is paused: a request-level mode would contradict it.
  if (st.kind !== 'all' && req.pause_mode !== undefined) {
    throw new GatewayError('invalid_request', `invalid refit request at \`/pause_mode\`: the \`${st.kind}\` strategy sets how engines are paused`, {
      field: '/pause_mode',
    });
  }
}
