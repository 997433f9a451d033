// The `/v1/rl` worker rows (GET /v1/rl/workers, /workers/{id}, and the answers of the version and
// state writes), as the API document shows them. Mirrors RlWorkerEntry (fleet/fleet-view.ts):
// SMG's fields in SMG's order with explicit nulls, then rlgate's own. Documentation only.

import { Type, type TSchema } from '@sinclair/typebox';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

export const RlCapabilities = Type.Object(
  {
    source: Type.Union([Type.Literal('static'), Type.Literal('label')], { description: 'A static row per engine, or `rl.*` labels.' }),
    pause_modes: Type.Array(Type.String()),
    update_from: Type.Array(Type.String(), { description: '`disk`, `tensor`, `distributed`.' }),
    abort: Type.Boolean(),
    flush_cache: Type.Boolean(),
    sleep_wake: Type.Boolean(),
    reports_weight_version: Type.Boolean(),
  },
  { additionalProperties: true, description: 'What the engine can do on the control plane (informational: nothing is refused because of it).' },
);

export const RlRouting = Type.Object(
  {
    prompt_tokens: Type.Integer({ minimum: 0, description: "Prompt tokens of the engine's answers (their `prompt_tokens`)." }),
    cached_tokens: Type.Integer({ minimum: 0, description: 'Of those, the tokens its prefix cache held (their `cached_tokens`).' }),
    completion_tokens: Type.Integer({ minimum: 0, description: "Completion tokens of the engine's answers." }),
    prefix_hit_rate: Nullable(Type.Number({ minimum: 0, maximum: 1, description: 'cached_tokens ÷ prompt_tokens; null before any prompt token was counted.' })),
    queued_tokens: Nullable(
      Type.Number({ minimum: 0, description: "The routing policy's queued work on the engine, in tokens; null when the policy keeps no such count." }),
    ),
    decisions: Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
      description: 'Routing decisions that chose the engine, by reason (`cache_hit`, `min_load`, ...), retries included.',
    }),
  },
  {
    additionalProperties: true,
    description:
      "rlgate: what this replica's routing did with the engine (its DP ranks summed), counted since the engine was registered or this replica started. Token counts come from HTTP engines' answers.",
  },
);

export const RlWorkerRow = Type.Object(
  {
    id: Type.String(),
    url: Type.String(),
    base_url: Type.String(),
    engine: Type.String(),
    engine_version: Nullable(Type.String()),
    model_id: Type.String(),
    worker_type: Type.String(),
    connection_mode: Type.String(),
    control_url: Nullable(Type.String({ description: 'Where control calls go; null for a token engine without `rl.control_url`.' })),
    tp_size: Nullable(Type.Integer()),
    dp_size: Nullable(Type.Integer()),
    pp_size: Nullable(Type.Integer()),
    dp_ranks: Type.Integer({ minimum: 1 }),
    role: Nullable(Type.String()),
    health: Type.String({ description: '`ready` or `not_ready`.' }),
    weight_version: Nullable(Type.String()),
    version_source: Nullable(Type.String({ description: '`registration`, `passthrough` or `api`.' })),
    control: Type.String({ description: '`active`, `paused` or `asleep`.' }),
    labels: Type.Record(Type.String(), Type.String()),
    capabilities: RlCapabilities,
    state: Type.String({
      description: 'rlgate: the engine actor lifecycle (`registering`, `serving`, `pausing`, `paused`, `asleep`, `refitting`, `unreachable`).',
    }),
    breaker: Type.String({ description: 'rlgate: `closed`, `open` or `half_open`.' }),
    load: Type.Number({ description: 'rlgate: data-plane requests in flight.' }),
    owner: Nullable(Type.String({ description: "rlgate: the replica that runs the engine's actor." })),
    quarantined: Type.Boolean({ description: 'rlgate: held out of routing until a refit brings it up and verifies it.' }),
    quarantine_reason: Nullable(Type.String()),
    routing: RlRouting,
  },
  { additionalProperties: true, description: 'One engine (DP ranks collapsed onto the lowest rank).' },
);

export const RlWorkerListing = Type.Object(
  {
    protocol_version: Type.Integer({ description: 'The `/v1/rl` protocol version (1).' }),
    workers: Type.Array(RlWorkerRow),
    total: Type.Integer({ minimum: 0, description: 'Engines listed; with `limit`, engines in the whole fleet.' }),
    next_cursor: Type.Optional(Nullable(Type.String({ description: 'rlgate, with `limit` only: the `cursor` of the next page; null on the last page.' }))),
  },
  { additionalProperties: true, description: 'Rows sorted by base_url, then url.' },
);

/** Paging of a fleet listing (fleet/listing-page.ts); without `limit` the whole fleet is listed, as SMG does. */
export const ListingQuery = Type.Object({
  limit: Type.Optional(
    Type.Integer({ minimum: 1, maximum: 10_000, description: 'rlgate: at most this many rows, from `cursor` on; the answer carries `next_cursor`.' }),
  ),
  cursor: Type.Optional(Type.String({ maxLength: 4096, description: "rlgate: the previous page's `next_cursor` (the first page without it)." })),
});

export const SelectorQuery = Type.Object({
  selector: Type.Optional(
    Type.String({
      description:
        'Label selector (`k=v,k!=v,k in (a,b),k,!k`); required and non-blank. Synthetic keys id, url, engine, model, health, weight_version, control, ... shadow labels.',
    }),
  ),
});

export const VersionWrite = Type.Object(
  { weight_version: Type.String({ description: 'Printable ASCII, 1-128 bytes after trimming.' }) },
  { additionalProperties: true, description: 'Records the version the engines hold (gateway-local: no engine is called).' },
);

export const StateWrite = Type.Object(
  { control: Type.Union([Type.Literal('active'), Type.Literal('paused'), Type.Literal('asleep')]) },
  { additionalProperties: true, description: 'Marks the engines active, paused or asleep (gateway-local: no engine is called).' },
);
