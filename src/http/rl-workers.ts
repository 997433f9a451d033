// `/v1/rl` discovery and the gateway-local writes: worker listing and rows,
// version and control-state writes for one worker or a selector. Writes go to the engines'
// actors (their single writer); no engine is called.

import type { FastifyPluginAsync } from 'fastify';
import type { RouteOptions } from './services.ts';
import { GatewayError } from '../api/errors.ts';
import { acceptRawBodies, jsonObjectBody } from './raw-body.ts';
import { RL_PROTOCOL_VERSION } from '../fleet/fleet-view.ts';
import { selectorFromQuery } from '../fleet/selector.ts';
import { validateVersion } from '../fleet/versions.ts';
import type { ControlState } from '../fleet/observe.ts';
import { errorResponses, methodNotAllowedSchema, RL_AUTH } from '../api/error-responses.ts';
import { ListingQuery, RlWorkerListing, RlWorkerRow, SelectorQuery, StateWrite, VersionWrite } from '../api/rl-worker-schema.ts';
import { MAX_PAGE } from '../fleet/listing-page.ts';
import { WorkerIdParams } from '../api/worker-schema.ts';

const CONTROL_STATES = new Set<ControlState>(['active', 'paused', 'asleep']);
const OTHER_METHODS = ['DELETE', 'PUT', 'PATCH'] as const;

export const rlWorkerRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { view, registry, host } = services;
  acceptRawBodies(app);

  const TAG = ['rl-workers'];
  const SELECTOR_ERRORS = ['selector_required', 'invalid_selector', 'no_workers_match'] as const;
  const BODY_ERRORS = ['invalid_body', 'payload_too_large'] as const;

  app.get(
    '/workers',
    {
      schema: {
        tags: TAG,
        summary: 'List engines',
        description:
          "One row per engine (DP ranks collapsed), sorted by base_url, then url. The whole fleet without `limit`; with it, one page from `cursor` on and the next page's `next_cursor` (rlgate).",
        querystring: ListingQuery,
        response: { 200: RlWorkerListing, ...errorResponses(...RL_AUTH, 'invalid_request') },
      },
    },
    async (req) => {
      const { limit, cursor } = req.query as { limit?: string; cursor?: string };
      if (limit === undefined && cursor === undefined) {
        const workers = view.rows();
        return { protocol_version: RL_PROTOCOL_VERSION, workers, total: workers.length };
      }
      const page = view.rowsPage(cursor, limit === undefined ? MAX_PAGE : Number(limit));
      return { protocol_version: RL_PROTOCOL_VERSION, workers: page.rows, total: page.total, next_cursor: page.next };
    },
  );

  const rowSchema = {
    tags: TAG,
    summary: 'One engine',
    description: 'The row of exactly this registry entry; `dp_ranks` counts the DP ranks of its engine.',
    params: WorkerIdParams,
    response: { 200: RlWorkerRow, ...errorResponses(...RL_AUTH, 'worker_not_found', 'uri_too_long') },
  };
  app.get<{ Params: { id: string } }>('/workers/:id', { schema: rowSchema }, async (req) => view.rowOf(req.params.id));

  const versionSchema = {
    tags: TAG,
    summary: "Record one engine's version",
    description: 'Records the weight version the engine holds, in the gateway only (no engine is called); answers its row.',
    params: WorkerIdParams,
    body: VersionWrite,
    response: { 200: RlWorkerRow, ...errorResponses(...RL_AUTH, ...BODY_ERRORS, 'invalid_version', 'worker_not_found', 'uri_too_long') },
  };
  app.post<{ Params: { id: string } }>('/workers/:id/version', { schema: versionSchema }, async (req) => {
    const version = versionFromBody(req.body);
    const w = registry.require(req.params.id);
    host.setVersion(w.baseUrl, version, 'api');
    return view.rowOf(w.id);
  });

  const stateSchema = {
    tags: TAG,
    summary: "Record one engine's control state",
    description: 'Marks the engine active, paused or asleep, in the gateway only (no engine is called); answers its row.',
    params: WorkerIdParams,
    body: StateWrite,
    response: { 200: RlWorkerRow, ...errorResponses(...RL_AUTH, ...BODY_ERRORS, 'worker_not_found', 'uri_too_long') },
  };
  app.post<{ Params: { id: string } }>('/workers/:id/state', { schema: stateSchema }, async (req) => {
    const control = controlFromBody(req.body);
    const w = registry.require(req.params.id);
    host.setControl(w.baseUrl, control);
    return view.rowOf(w.id);
  });

  const fleetVersionSchema = {
    tags: TAG,
    summary: 'Record the version of every matching engine',
    description: 'The version write for every engine the selector matches (gateway-local); answers their rows.',
    querystring: SelectorQuery,
    body: VersionWrite,
    response: { 200: RlWorkerListing, ...errorResponses(...RL_AUTH, ...BODY_ERRORS, ...SELECTOR_ERRORS, 'invalid_version') },
  };
  app.post<{ Querystring: { selector?: string } }>('/version', { schema: fleetVersionSchema }, async (req) => {
    const version = versionFromBody(req.body);
    const targets = view.targets(selectorOrThrow(req.query.selector, view));
    for (const w of targets) host.setVersion(w.baseUrl, version, 'api');
    return listing(targets.map((w) => w.id));
  });

  const fleetStateSchema = {
    tags: TAG,
    summary: 'Record the control state of every matching engine',
    description: 'The state write for every engine the selector matches (gateway-local); answers their rows.',
    querystring: SelectorQuery,
    body: StateWrite,
    response: { 200: RlWorkerListing, ...errorResponses(...RL_AUTH, ...BODY_ERRORS, ...SELECTOR_ERRORS) },
  };
  app.post<{ Querystring: { selector?: string } }>('/state', { schema: fleetStateSchema }, async (req) => {
    const control = controlFromBody(req.body);
    const targets = view.targets(selectorOrThrow(req.query.selector, view));
    for (const w of targets) host.setControl(w.baseUrl, control);
    return listing(targets.map((w) => w.id));
  });

  for (const path of ['/workers/:id/version', '/workers/:id/state', '/version', '/state']) {
    app.route({
      method: ['GET', ...OTHER_METHODS],
      url: path,
      schema: methodNotAllowedSchema('rl-workers', 'POST', ...RL_AUTH),
      handler: methodNotAllowed('POST'),
    });
  }
  for (const path of ['/workers', '/workers/:id']) {
    app.route({
      method: ['POST', ...OTHER_METHODS],
      url: path,
      schema: methodNotAllowedSchema('rl-workers', 'GET', ...RL_AUTH),
      handler: methodNotAllowed('GET'),
    });
  }

  function listing(ids: string[]) {
    const workers = ids.map((id) => view.rowOf(id));
    return { protocol_version: RL_PROTOCOL_VERSION, workers, total: workers.length };
  }
};

function versionFromBody(body: unknown): string {
  const obj = jsonObjectBody(body);
  if (!('weight_version' in obj)) throw new GatewayError('invalid_body', 'missing field `weight_version`');
  if (typeof obj.weight_version !== 'string') throw new GatewayError('invalid_body', 'field `weight_version` must be a string');
  return validateVersion(obj.weight_version);
}

function controlFromBody(body: unknown): ControlState {
  const obj = jsonObjectBody(body);
  if (!('control' in obj)) throw new GatewayError('invalid_body', 'missing field `control`');
  const c = obj.control;
  if (typeof c !== 'string' || !CONTROL_STATES.has(c as ControlState)) {
    throw new GatewayError('invalid_body', `unknown variant \`${String(c)}\`, expected one of \`active\`, \`paused\`, \`asleep\``);
  }
  return c as ControlState;
}

function selectorOrThrow(raw: string | undefined, view: { targets(s: ReturnType<typeof selectorFromQuery>): unknown[] }) {
  const sel = selectorFromQuery(raw);
  if (view.targets(sel).length === 0) {
    throw new GatewayError('no_workers_match', `no workers match selector \`${sel.text}\``, { selector: sel.text });
  }
  return sel;
}

export function methodNotAllowed(allowed: string) {
  return async (_req: unknown, reply: { header(k: string, v: string): unknown }) => {
    reply.header('allow', allowed);
    throw new GatewayError('method_not_allowed', `method not allowed; use ${allowed}`);
  };
}
