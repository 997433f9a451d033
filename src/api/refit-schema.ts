// The refit transaction's answers (POST|GET /v1/rl/refits), as the API document shows them: the
// report (refit/report.ts), a running refit's progress and the dry-run plan (refit/service.ts).
// Documentation only; the request is validated by refit/request.ts, whose schema the route shows.

import { Type, type TSchema } from '@sinclair/typebox';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const Source = Type.Union([Type.Literal('disk'), Type.Literal('distributed')]);
const Phase = Type.Union([Type.Literal('pause'), Type.Literal('refit'), Type.Literal('verify'), Type.Literal('resume')]);
const Ms = Nullable(Type.Number());

export const RefitIdParams = Type.Object({ id: Type.String({ description: 'The refit id (`refit_id` of the request, or generated).' }) });

export const SkippedEngine = Type.Object(
  {
    worker_id: Type.String(),
    url: Type.String(),
    reason: Type.String({ description: '`unreachable`, `not_discovered`, `no_control_endpoint` or `source_unsupported`.' }),
    message: Type.String(),
  },
  { additionalProperties: true, description: 'A selected engine left out before anything was paused.' },
);

export const EngineReport = Type.Object(
  {
    worker_id: Type.String(),
    url: Type.String(),
    outcome: Type.Union([Type.Literal('ok'), Type.Literal('failed')]),
    failed_phase: Type.Optional(Phase),
    failed_step: Type.Optional(Type.String()),
    error: Type.Optional(
      Type.String({
        description:
          'An envelope code, or `engine_refused`, `verify_failed`, `phase_deadline_exceeded`, `cut_after_grace`, `engine_asleep`, `quorum_not_met`, `transfer_aborted`, `gateway_failover`, ...',
      }),
    ),
    status: Type.Optional(Type.Integer({ description: "The engine's HTTP status, when it answered." })),
    message: Type.Optional(Type.String()),
    phases: Type.Object(
      { pause: Ms, refit: Ms, verify: Ms, resume: Ms },
      { additionalProperties: true, description: 'Milliseconds per phase; null for a phase not reached.' },
    ),
    rank_offset: Type.Optional(Type.Integer({ description: 'Distributed refits: the first rank of this engine in the weight-update group.' })),
    breaker: Type.String(),
    state: Type.String(),
    weight_version: Nullable(Type.String()),
  },
  { additionalProperties: true, description: 'One engine of a refit, after it.' },
);

export const RefitReport = Type.Object(
  {
    id: Type.String(),
    status: Type.Union([Type.Literal('succeeded'), Type.Literal('partial'), Type.Literal('failed')]),
    weight_version: Type.String(),
    source: Source,
    selector: Nullable(Type.String()),
    started_at: Type.String({ format: 'date-time' }),
    finished_at: Type.String({ format: 'date-time' }),
    duration_ms: Type.Number(),
    phases: Type.Record(Type.String(), Type.Number(), { description: 'Milliseconds per phase reached.' }),
    total: Type.Integer({ minimum: 0 }),
    succeeded: Type.Integer({ minimum: 0 }),
    quorum: Type.Integer({ minimum: 0 }),
    aborted: Type.Optional(Type.String({ description: '`quorum_not_met`, `no_target_paused` or `gateway_failover`.' })),
    world_size: Type.Optional(Type.Integer({ description: 'Distributed refits.' })),
    engines: Type.Array(EngineReport),
    failed: Type.Array(EngineReport, { description: 'The failed engines again.' }),
    skipped: Type.Array(SkippedEngine),
  },
  { additionalProperties: true, description: 'The audit record of one finished refit.' },
);

export const RunningRefit = Type.Object(
  {
    id: Type.String(),
    status: Type.Union([Type.Literal('running'), Type.Literal('queued')], {
      description: '`queued` (on the replica that queued it) until a replica takes it.',
    }),
    weight_version: Type.String(),
    source: Source,
    selector: Nullable(Type.String()),
    submitted_at: Type.String({ format: 'date-time' }),
    replica: Nullable(Type.String({ description: 'The replica running it; null while queued.' })),
    phase: Nullable(Type.String()),
    step_index: Type.Integer(),
    total: Type.Integer({ minimum: 0 }),
    pending: Type.Array(Type.String(), { description: 'Worker ids whose call of the current phase has not answered.' }),
  },
  { additionalProperties: true, description: 'A refit that is still running.' },
);

export const RefitPlan = Type.Object(
  {
    dry_run: Type.Literal(true),
    refit_id: Nullable(Type.String()),
    weight_version: Type.String(),
    source: Source,
    selector: Nullable(Type.String()),
    quorum: Type.Integer({ minimum: 0 }),
    targets: Type.Array(
      Type.Object({ worker_id: Type.String(), url: Type.String(), rank_offset: Type.Optional(Type.Integer()) }, { additionalProperties: true }),
    ),
    skipped: Type.Array(SkippedEngine),
    asleep: Type.Array(Type.String(), { description: 'Worker ids left out because they are asleep.' }),
    world_size: Type.Optional(Type.Integer()),
    phases: Type.Array(
      Type.Object(
        { phase: Type.String(), step: Nullable(Type.String()), method: Type.String(), path: Type.String(), engines: Type.Array(Type.String()) },
        { additionalProperties: true },
      ),
    ),
    calls: Type.Integer({ minimum: 0, description: 'Engine calls the refit would make when every engine succeeds.' }),
  },
  { additionalProperties: true, description: 'What the refit would do (`dry_run: true`); nothing is touched.' },
);

export const RefitListing = Type.Object(
  { refits: Type.Array(Type.Union([RunningRefit, RefitReport])) },
  { additionalProperties: true, description: 'The running refits and the newest finished ones.' },
);
