// The server-side refit transaction over HTTP: POST /v1/rl/refits runs pause → refit → verify →
// resume across the selected engines and answers the report (200 all succeeded, 207 otherwise);
// GET /v1/rl/refits/:id returns a kept report; GET /v1/rl/refits lists the recent ones.

import type { FastifyPluginAsync } from 'fastify';
import type { RouteOptions } from './services.ts';
import { parseJsonObject } from '../api/json-object.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { reportStatus } from '../refit/report.ts';
import { methodNotAllowed } from './rl-workers.ts';
import { RefitRequestSchema } from '../refit/request.ts';
import { errorResponses, methodNotAllowedSchema, RL_AUTH } from '../api/error-responses.ts';
import { RefitIdParams, RefitListing, RefitPlan, RefitReport, RunningRefit } from '../api/refit-schema.ts';
import { Type } from '@sinclair/typebox';

const TAG = ['refits'];
const runSchema = {
  tags: TAG,
  summary: 'Run a refit',
  description:
    'Runs pause, refit, verify and resume across the selected engines (the whole fleet without a selector) and answers the report: 200 when every engine succeeded, 207 otherwise. With `dry_run: true`, answers the plan and touches nothing. The same `refit_id` again is the same refit.',
  body: RefitRequestSchema,
  response: {
    200: Type.Union([RefitReport, RefitPlan], { description: 'Every engine succeeded (the report), or the plan of a dry run.' }),
    207: { ...RefitReport, description: 'Multi-Status: at least one engine failed (see `failed`).' },
    202: Type.Object(
      { id: Type.String(), status: Type.Literal('accepted'), events: Type.String({ description: 'The SSE route of its progress.' }) },
      { description: 'With `Prefer: respond-async`: the refit is queued; follow `events`, or GET its `Location`.' },
    ),
    ...errorResponses(
      ...RL_AUTH,
      'invalid_request',
      'invalid_version',
      'invalid_selector',
      'no_workers_match',
      'payload_too_large',
      'no_eligible_targets',
      'refit_in_progress',
      'refit_id_conflict',
      'bus_unavailable',
    ),
  },
};

const RL_ROUTES = '/v1/rl';

/** `Prefer: respond-async` among the header's preferences (comma-separated, parameters after `;`). */
function prefersAsync(header: string | string[] | undefined): boolean {
  const all = Array.isArray(header) ? header.join(',') : (header ?? '');
  return all.split(',').some((p) => p.split(';')[0]!.trim().toLowerCase() === 'respond-async');
}

export const refitRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { refits } = services;
  acceptRawBodies(app);

  app.post('/refits', { schema: runSchema }, async (req, reply) => {
    // The refit route speaks the generic request-error code; invalid_body belongs to the version
    // and state writes.
    const body = parseJsonObject(rawBody(req.body), 'invalid_request');
    if (body.dry_run === true) return reply.code(200).send(refits.plan(body));
    // RFC 7240: answer once the refit is queued; its progress and report are followed by id.
    if (prefersAsync(req.headers.prefer)) {
      const { id } = await refits.submit(body, 'http');
      const at = `${RL_ROUTES}/refits/${encodeURIComponent(id)}`;
      return reply
        .code(202)
        .header('location', at)
        .header('preference-applied', 'respond-async')
        .send({ id, status: 'accepted', events: `${at}/events` });
    }
    const report = await refits.run(body, 'http');
    return reply.code(reportStatus(report)).send(report);
  });

  const listSchema = {
    tags: TAG,
    summary: 'List refits',
    description: 'The running refits, then the newest finished ones (reports), newest first.',
    response: { 200: RefitListing, ...errorResponses(...RL_AUTH) },
  };
  app.get('/refits', { schema: listSchema }, async () => ({ refits: await refits.list() }));

  const getSchema = {
    tags: TAG,
    summary: 'One refit',
    description: "A refit's report, or its progress while it runs, from any replica, for 24 hours after its journal's last write.",
    params: RefitIdParams,
    response: {
      200: Type.Union([RefitReport, RunningRefit], { description: 'The report, or the progress of a running refit.' }),
      ...errorResponses(...RL_AUTH, 'refit_not_found', 'uri_too_long'),
    },
  };
  app.get<{ Params: { id: string } }>('/refits/:id', { schema: getSchema }, async (req) => await refits.get(req.params.id));

  app.route({
    method: ['PUT', 'PATCH', 'DELETE'],
    url: '/refits',
    schema: methodNotAllowedSchema('refits', 'GET, POST', ...RL_AUTH),
    handler: methodNotAllowed('GET, POST'),
  });
  app.route({
    method: ['POST', 'PUT', 'PATCH', 'DELETE'],
    url: '/refits/:id',
    schema: methodNotAllowedSchema('refits', 'GET', ...RL_AUTH),
    handler: methodNotAllowed('GET'),
  });
};
