// The data-plane worker registry API that slime and SMG clients call: POST /workers (202,
// discovery in the background; re-registering a URL is idempotent), GET /workers,
// GET /workers/:id, PUT|PATCH /workers/:id, DELETE /workers/:id (an id, or sgl-router 0.2.x's encoded
// URL). Secrets never appear in an answer.

import type { FastifyPluginAsync } from 'fastify';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { RouteOptions } from './services.ts';
import { GatewayError } from '../api/errors.ts';
import { bearerMatches, checkRegistrationBearer } from './admin-auth.ts';
import { allowedHostsOf, checkWorkerUrl } from '../fleet/worker-url.ts';
import { checkLabels, LABEL_LIMITS } from '../fleet/label-limits.ts';
import { registeredWorkerType } from '../fleet/worker-type.ts';
import { mergedLabels, type Worker } from '../fleet/worker.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { healthOf, workerStats, workerTypeCounts } from '../fleet/fleet-view.ts';
import { workerControlUrl } from '../fleet/control-url.ts';
import { errorResponses } from '../api/error-responses.ts';
import { ADMIN_SECURITY } from '../api/openapi.ts';
import { WorkerAccepted, WorkerListing, WorkerRemoved, WorkerRow } from '../api/worker-schema.ts';
import { ListingQuery } from '../api/rl-worker-schema.ts';
import { MAX_PAGE, pageAfter } from '../fleet/listing-page.ts';

// Documents the bounds (fleet/label-limits.ts); checkLabels enforces them, key length included.
const Labels = Type.Record(Type.String({ maxLength: LABEL_LIMITS.maxKeyLength }), Type.String({ maxLength: LABEL_LIMITS.maxValueLength }), {
  maxProperties: LABEL_LIMITS.maxCount,
  description: `At most ${LABEL_LIMITS.maxCount} labels, keys of at most ${LABEL_LIMITS.maxKeyLength} characters, values of at most ${LABEL_LIMITS.maxValueLength}, ${LABEL_LIMITS.maxTotalBytes} bytes in all.`,
});

const Registration = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048 }),
    api_key: Type.Optional(Type.String({ maxLength: 4096 })),
    runtime_type: Type.Optional(Type.String({ maxLength: 64 })),
    worker_type: Type.Optional(
      Type.String({
        maxLength: 64,
        description: '`regular` (the default). `prefill`, `decode` and `encode` are refused (400): PD disaggregated routing is not supported yet.',
      }),
    ),
    labels: Type.Optional(Labels),
    bootstrap_port: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: "A PD prefill worker's: refused (400), as prefill workers are." })),
    http_pool: Type.Optional(
      Type.Object(
        {
          ca_cert_path: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
          max_connections: Type.Optional(Type.Integer({ minimum: 1, maximum: 4096 })),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);
type Registration = Static<typeof Registration>;

const Update = Type.Object(
  {
    api_key: Type.Optional(Type.Union([Type.String({ maxLength: 4096 }), Type.Null()])),
    runtime_type: Type.Optional(Type.String({ maxLength: 64 })),
    worker_type: Type.Optional(Type.String({ maxLength: 64, description: '`regular`; a PD type is refused (400), as at registration.' })),
    labels: Type.Optional(Labels),
  },
  { additionalProperties: false },
);
type Update = Static<typeof Update>;

const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) });
type IdParams = Static<typeof IdParams>;
// sgl-router 0.2.x (and slime written for it) removes a worker by its URL, percent-encoded into
// the path: as long as a registration's URL may be.
const IdOrUrlParams = Type.Object({
  id: Type.String({
    minLength: 1,
    maxLength: 2048,
    description: 'The registry worker id, or the worker URL it was registered with, percent-encoded (sgl-router 0.2.x).',
  }),
});

export const workerRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { registry, view } = services;
  // Strict validation: fastify's default Ajv coerces types (`{"labels":{"a":1}}` would register
  // a worker with label "1"); a wrong type must be a 400 that changes nothing.
  // A query is checked by query-params.ts, as on every route: its values arrive as strings.
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'querystring' ? (data: unknown) => ({ value: data }) : strictValidator(schema as TSchema, httpPart ?? 'body'),
  );

  // A worker's api key is sent as a bearer to wherever its `rl.control_url` label points (SMG
  // trusts the label). With an admin key configured, whatever can set or redirect those
  // — a key, an `rl.*` label, any change or removal of a worker — needs the admin bearer. So does
  // a `weight_version` label: it sets the version routing trusts, and a new engine claiming a
  // newer one would take every rollout under `latest-only`. A plain registration
  // (`{url, worker_type}`, what slime sends) stays open so slime works unchanged.
  const guard = (headers: { authorization?: string }, sensitive: boolean) => {
    if (sensitive && services.config.adminKey && !bearerMatches(headers.authorization, services.config.adminKey)) {
      throw new GatewayError('unauthorized', 'changing worker keys, rl.* or weight_version labels, or existing workers needs the admin bearer token');
    }
  };
  const needsAdmin = (b: { api_key?: unknown; labels?: Record<string, string> }) =>
    b.api_key !== undefined || Object.keys(b.labels ?? {}).some((k) => k.startsWith('rl.') || k === 'weight_version');

  const TAG = ['workers'];
  const BODY_ERRORS = ['invalid_request', 'payload_too_large', 'unsupported_media_type'] as const;
  const registerSchema = {
    tags: TAG,
    summary: 'Register a worker',
    description:
      'Accepts the worker and discovers it in the background (its row turns ready when discovery succeeds). Registering a URL again is idempotent and runs discovery again; with an admin key configured, it changes the worker only with the admin bearer. A key, `rl.*` labels or a `weight_version` label need the admin bearer when the gateway has one; a plain registration needs the registration bearer only when `--registration-key` is set. The URL must pass the worker URL rules (docs/operations.md). Prefill, decode and encode workers (`worker_type`, `bootstrap_port`) are refused with 400 `invalid_request` naming the worker: PD disaggregated routing is not supported yet.',
    body: Registration,
    response: { 202: WorkerAccepted, ...errorResponses(...BODY_ERRORS, 'unauthorized') },
  };
  app.post<{ Body: Registration }>('/workers', { schema: registerSchema }, async (req, reply) => {
    checkRegistrationBearer(req.headers.authorization, services.config);
    guard(req.headers, needsAdmin(req.body));
    checkWorkerUrl(req.body.url, allowedHostsOf(services.config.allowedWorkerHosts ?? []));
    checkLabels(req.body.labels);
    // Before the re-registration branch below, which changes nothing and would answer 202.
    registeredWorkerType(req.body.url.trim(), req.body.worker_type, req.body.bootstrap_port);
    // With an admin key, re-registering a known URL without its bearer changes nothing of the
    // worker (key, labels, version): discovery runs again, which is what slime needs for a
    // restarted engine. Without an admin key it replaces the registration, as it always did.
    const known = registry.findByUrl(req.body.url);
    if (known && services.config.adminKey && !bearerMatches(req.headers.authorization, services.config.adminKey)) {
      registry.touch(known.id);
      reply.code(202);
      return {
        id: known.id,
        url: known.url,
        status: 'accepted',
        message: 'worker already registered; discovery runs again (changing it needs the admin bearer token)',
      };
    }
    const { worker, created } = registry.register(req.body);
    reply.code(202);
    return {
      id: worker.id,
      url: worker.url,
      status: 'accepted',
      message: created ? 'worker registration accepted; discovery runs in the background' : 'worker already registered; discovery runs again',
    };
  });

  const listSchema = {
    tags: TAG,
    summary: 'List workers',
    description:
      "Every registered worker, sorted by url; `stats` is SMG's `{prefill_count, decode_count, regular_count}`, `rlgate` rlgate's own figures (totals, healthy, models, load).",
    querystring: ListingQuery,
    response: { 200: WorkerListing, ...errorResponses('invalid_request') },
  };
  app.get<{ Querystring: { limit?: string; cursor?: string } }>('/workers', { schema: listSchema }, async (req) => {
    const all = registry.all();
    const sorted = [...all].sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
    const { limit, cursor } = req.query;
    const paged = limit !== undefined || cursor !== undefined;
    // Without `limit` the whole registry, as SMG answers; with it one page (fleet/listing-page.ts).
    const page = paged ? pageAfter(sorted, (w) => [w.url], cursor, limit === undefined ? MAX_PAGE : Number(limit)) : undefined;
    const workers = (page?.items ?? sorted).map((w) => listedRow(w, view, services.config.workersListControlUrls));
    // `stats` is SMG's shape exactly; rlgate's own figures have a key of their own (docs/decisions.md).
    const out = { workers, total: all.length, stats: workerTypeCounts(all), rlgate: workerStats(all, view) };
    return page ? { ...out, next_cursor: page.next } : out;
  });

  const rowSchema = {
    tags: TAG,
    summary: 'One worker',
    description: 'The row of one registered worker.',
    params: IdParams,
    response: { 200: WorkerRow, ...errorResponses('worker_not_found', 'uri_too_long') },
  };
  app.get<{ Params: IdParams }>('/workers/:id', { schema: rowSchema }, async (req) => {
    return workerJson(registry.require(req.params.id), view);
  });

  // The worker update route: new caller labels (they replace the old ones), key or type; the
  // engine's actor re-runs discovery, and a changed weight_version label re-seeds its version.
  for (const method of ['PUT', 'PATCH'] as const) {
    app.route<{ Params: IdParams; Body: Update }>({
      method,
      url: '/workers/:id',
      schema: {
        tags: TAG,
        summary: 'Update a worker',
        description:
          "New caller labels (they replace the old ones), key or type; the worker's discovery runs again. Needs the admin bearer when the gateway has one.",
        security: ADMIN_SECURITY,
        params: IdParams,
        body: Update,
        response: { 200: WorkerRow, ...errorResponses(...BODY_ERRORS, 'unauthorized', 'worker_not_found', 'uri_too_long') },
      },
      handler: async (req) => {
        guard(req.headers, true);
        return workerJson(registry.update(req.params.id, req.body), view);
      },
    });
  }

  const removeSchema = {
    tags: TAG,
    summary: 'Remove a worker',
    description:
      'Removes the worker from the registry, named by its id or by its registered URL percent-encoded (`DELETE /workers/http%3A%2F%2Fhost%3A8000`, as sgl-router 0.2.x takes it). Needs the admin bearer when the gateway has one.',
    security: ADMIN_SECURITY,
    params: IdOrUrlParams,
    response: { 200: WorkerRemoved, ...errorResponses('unauthorized', 'worker_not_found', 'uri_too_long') },
  };
  app.delete<{ Params: IdParams }>('/workers/:id', { schema: removeSchema }, async (req) => {
    guard(req.headers, true);
    const { id } = req.params;
    // An id is a UUID and never holds `:`; a URL does. Only a registered URL matches: no DP-rank
    // expansion here (`POST /remove_worker` has it), so one row is removed and answered.
    const byUrl = registry.get(id) ? undefined : id.includes(':') ? registry.findByUrl(id) : undefined;
    const w = registry.remove(byUrl?.id ?? id);
    return { id: w.id, url: w.url, status: 'removed' };
  });
};

function strictValidator(schema: TSchema, part: string) {
  const check = TypeCompiler.Compile(schema);
  return (data: unknown) => {
    if (check.Check(data)) return { value: data };
    const first = check.Errors(data).First();
    return { error: new Error(`${part}${first?.path ?? ''} ${first?.message ?? 'is invalid'}`) };
  };
}

/**
 * A listing row. slime's end-of-rollout abort calls `<url>/abort_request` and `<url>/v1/loads`
 * on every listed URL, which a `grpc://` or ZMQ URL cannot serve. With
 * `--workers-list-control-urls` such a worker with a control app is listed by that app's URL,
 * and its registry URL moves to `registry_url` (docs/decisions.md). Without a control app, or
 * with the setting off, the row is the registry's.
 */
function listedRow(w: Worker, view: FleetView, controlUrls: boolean) {
  const row = workerJson(w, view);
  if (!controlUrls || w.connectionMode === 'http') return row;
  const control = workerControlUrl(w);
  return control ? { ...row, url: control, registry_url: w.url } : row;
}

/** The SMG-shaped data-plane row; slime reads `id` and `url`. */
function workerJson(w: Worker, view: FleetView) {
  const e = view.engine(w);
  const health = healthOf(e);
  return {
    id: w.id,
    url: w.url,
    model_id: w.modelId,
    worker_type: w.workerType,
    connection_mode: w.connectionMode,
    runtime_type: w.engine,
    status: health,
    is_healthy: health === 'ready',
    state: e.state,
    load: e.load,
    labels: mergedLabels(w),
  };
}
