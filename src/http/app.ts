// Builds the gateway's fastify app (it never listens: cli/gateway does). Route groups are
// plugins registered from one explicit list; errors go through one handler that answers
// `{error, message, ...context}`; with RL off every `/v1/rl` path is an empty 404.

import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyError, type FastifyReply, type FastifyServerOptions } from 'fastify';
import swagger from '@fastify/swagger';
import { DOCUMENT_PATH, documentHeadRoutes, documentOptions } from '../api/openapi.ts';
import { GatewayError } from '../api/errors.ts';
import { errorResponses, SharedErrorAnswer } from '../api/error-responses.ts';
import { Alive, Healthy, NotReady, Ready, Unhealthy } from '../api/health-schema.ts';
import { workerStats } from '../fleet/fleet-view.ts';
import { bearerMatches } from './admin-auth.ts';
import { capConnections, followAnswers, InFlightCap, receiveBounds } from './bounds.ts';
import { errorAnswer } from './error-answer.ts';
import { HotPath } from './hot-path.ts';
import { documentWriteGuard, isPreflight, writeGuard } from './write-guard.ts';
import { parseAllowedOrigins } from './origin-policy.ts';
import { checkQueryParams } from './query-params.ts';
import type { Services } from './services.ts';
import { workerRoutes } from './workers.ts';
import { rlWorkerRoutes } from './rl-workers.ts';
import { rlEngineRoutes } from './rl-engine.ts';
import { refitRoutes } from './refits.ts';
import { refitEventRoutes } from './refit-events.ts';
import { fleetEventRoutes } from './fleet-events.ts';
import { generateRoutes } from './generate.ts';
import { tokenizeRoutes } from './tokenize.ts';
import { healthGenerateRoutes } from './health-generate.ts';
import { EXPOSED_HEADERS } from '../relay/stamping.ts';
import { metricsRoutes } from './metrics.ts';
import { modelRoutes } from './models.ts';
import { loadRoutes } from './loads.ts';
import { sglangRouterRoutes } from './sglang-router.ts';
import { uiRoutes } from './ui.ts';
import { swaggerUiRoutes } from './swagger-ui.ts';

const RL_PREFIX = '/v1/rl';

/** fastify's compiler factories (typed for Ajv and fast-json-stringify): every route's validator passes, every answer is JSON.stringify's. */
type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
const SCHEMAS_DOCUMENT_ONLY = {
  buildValidator: () => () => () => true,
  buildSerializer: () => () => (data: unknown) => JSON.stringify(data),
} as unknown as CompilersFactory;

export async function buildApp(services: Services): Promise<FastifyInstance> {
  const { config } = services;
  // One in-flight count for both doors of the data plane: fastify's routes and the hot path.
  const cap = new InFlightCap(config.maxInFlight);
  const hot = new HotPath(services, cap);
  const app = Fastify({
    // The data plane's common requests are served below fastify (hot-path.ts); the rest come here.
    serverFactory: (handler, options) => hot.server(handler, options),
    // Per-request access lines are left out (warn level): the data plane is the hot path and
    // control calls log their own structured `rl.proxy` / `rl.fanout` lines.
    loggerInstance: services.log.child({ component: 'http' }, { level: 'warn' }) as FastifyBaseLogger,
    // No child logger per request (fastify's default): making one costs every data-plane request
    // a pino child with its redaction set-up, for lines (warn and above) that are rare.
    childLoggerFactory: (logger) => logger,
    bodyLimit: config.maxBodyBytes,
    // Receiving a request is bounded (408 past it); answering it is not (http/bounds.ts).
    ...receiveBounds(config),
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 2048 },
    // Route schemas document the API (the OpenAPI document); they never validate or serialize. The
    // handlers validate their input themselves and answer the catalogue's codes (fastify's Ajv would
    // answer its own errors, and coerce types), and fast-json-stringify would drop every field a
    // response schema does not declare (docs/decisions.md). Given here rather than set after
    // construction, fastify never loads Ajv or fast-json-stringify (a tenth of start-up's CPU).
    schemaController: { compilersFactory: SCHEMAS_DOCUMENT_ONLY },
    // URLs the router cannot even match (broken percent-encoding, an over-long id) get the same
    // JSON envelope as every other error; with RL off a /v1/rl URL stays an empty 404.
    frameworkErrors: (err, req, rawReply) => {
      const reply = rawReply as unknown as FastifyReply;
      if (!config.rl.enabled && isRlPath(req.url)) return reply.code(404).header('content-length', '0').send();
      const tooLong = (err as FastifyError).code === 'FST_ERR_MAX_PARAM_LENGTH';
      const e = tooLong
        ? new GatewayError('uri_too_long', 'a path segment of the URL is too long')
        : new GatewayError('invalid_request', `the URL is not valid: ${err.message}`);
      return reply.code(e.status).send(e.toJSON());
    },
  });

  // The OpenAPI document collects every route registered after this line.
  documentHeadRoutes(app);
  await app.register(swagger, documentOptions());
  app.addSchema(SharedErrorAnswer);
  await app.register(swaggerUiRoutes);
  app.get(DOCUMENT_PATH, { schema: { hide: true } }, async () => app.swagger());

  // Connection and in-flight caps, before any other hook: a refused generation costs nothing more.
  capConnections(app, config, cap);
  followAnswers(app);
  // From the moment the app starts closing, fastify answers 503 (return503OnClosing): the hot path steps aside.
  app.addHook('preClose', (done) => {
    hot.closing = true;
    done();
  });

  // Callback-style hooks: an async hook costs every request (the data plane too) a promise.
  app.addHook('onRequest', (req, reply, done) => {
    // Judge by the route fastify matched (it decodes the path: `/v1/%72l/...` is `/v1/rl/...`),
    // and by the decoded path when nothing matched, never by the raw URL alone.
    const pattern = req.routeOptions?.url;
    if (!(pattern ? isRlPath(pattern) : isRlPath(decodedPath(req.url)))) return done();
    // With RL off, every /v1/rl path, any method, is a 404 with zero bytes — before auth (as SMG's
    // end-to-end test asserts).
    if (!config.rl.enabled) {
      reply.code(404).header('content-length', '0').send();
      return;
    }
    // A browser's preflight carries no credentials; write-guard.ts answers it by origin alone.
    if (config.adminKey && !isPreflight(req) && !bearerMatches(req.headers.authorization, config.adminKey)) {
      return done(new GatewayError('unauthorized', 'missing or wrong admin bearer token'));
    }
    done();
  });

  // Writes: a browser origin outside --allowed-origins is refused, a body must be JSON (after the
  // RL-off 404 and the admin key above, before any body is read or route runs).
  app.addHook('onRequest', writeGuard(parseAllowedOrigins(config.allowedOrigins)));
  // `application/*+json` bodies are JSON too (write-guard.ts lets them through).
  app.addContentTypeParser(/^application\/[^;\s]+\+json(?:$|;)/i, { parseAs: 'string' }, app.getDefaultJsonParser('error', 'error'));

  // Browsers may read the stamping headers of a cross-origin answer. Exposure only:
  // which origins may call at all (allow-origin) is write-guard.ts's, by --allowed-origins.
  // (The HTTP-engine relay writes its answers itself and sets the same header: http-relay.ts.)
  app.addHook('onSend', (req, reply, payload, done) => {
    if (req.headers.origin !== undefined) reply.header('access-control-expose-headers', EXPOSED_HEADERS);
    done(null, payload);
  });

  // A repeated or malformed query parameter that a route declares is a 400 naming it (on every
  // route registered below).
  checkQueryParams(app);
  // The write guard's 403 and 415, in the document of every write route registered below.
  documentWriteGuard(app);

  app.setErrorHandler((err: FastifyError | GatewayError, req, reply) => {
    const answer = errorAnswer(err, config.maxBodyBytes);
    if (answer.internal) req.log.error({ err, method: req.method, url: req.url }, 'unhandled error');
    return reply.code(answer.status).send(answer.body);
  });

  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send({ error: 'not_found', message: `no route for ${req.method} ${req.url.split('?')[0]}` });
  });

  // Unhealthy while NATS is down: every control call and refit fails then (bus_unavailable), so a
  // load balancer or supervisor should look elsewhere; nats.js keeps reconnecting meanwhile.
  const healthSchema = {
    tags: ['gateway'],
    summary: 'Health',
    description:
      'Healthy while the gateway is connected to NATS and its lease is confirmed; 503 while it reconnects, or while its heartbeats are not confirmed (a silent cut).',
    response: { 200: Healthy, 503: Unhealthy, ...errorResponses() },
  };
  app.get('/health', { schema: healthSchema }, async (_req, reply) => {
    if (!services.bus.connected) {
      return reply.code(503).send({
        status: 'unavailable',
        reason: 'bus_unavailable',
        message: 'the gateway is not connected to NATS (reconnecting); control calls and refits fail with bus_unavailable until it is back',
      });
    }
    // Connected as far as the client knows, yet its heartbeats are not confirmed: a silent cut,
    // or a bus that cannot write. Its lease may pass to another replica, so it commands nothing.
    const fenced = services.fence.reason();
    if (fenced !== null) {
      return reply.code(503).send({
        status: 'unavailable',
        reason: 'bus_unavailable',
        message: `${fenced}; control calls and refits fail with bus_unavailable until it is confirmed again`,
      });
    }
    return { status: 'ok' };
  });
  // SMG's Kubernetes probes. Readiness is the data plane's: it routes without NATS, so a bus outage
  // (every replica's /health 503 at once) does not take every replica out of a load balancer.
  app.get(
    '/liveness',
    {
      schema: {
        tags: ['gateway'],
        summary: 'Liveness',
        description: 'Always 200 `OK` (text, as SMG answers it) while the process answers.',
        response: { 200: { description: 'The process answers.', content: { 'text/plain': { schema: Alive } } } },
      },
    },
    async (_req, reply) => reply.type('text/plain; charset=utf-8').send('OK'),
  );
  app.get(
    '/readiness',
    {
      schema: {
        tags: ['gateway'],
        summary: 'Readiness',
        description:
          'Ready while at least one worker can take data-plane requests (NATS is not needed for that); 503 otherwise. Probe this, not /health, to route rollouts.',
        response: { 200: Ready, 503: NotReady },
      },
    },
    async (_req, reply) => {
      const { healthy_workers, total_workers } = workerStats(services.registry.all(), services.view);
      if (healthy_workers > 0) return { status: 'ready', healthy_workers, total_workers };
      // SMG's `status` and `reason`; rlgate's counts and which of the two cases it is beside them.
      return reply.code(503).send({
        status: 'not ready',
        reason: 'insufficient healthy workers',
        healthy_workers: 0,
        total_workers,
        message: total_workers === 0 ? 'no workers are registered' : 'no healthy workers available',
      });
    },
  );
  await app.register(healthGenerateRoutes, { services });
  await app.register(workerRoutes, { services });
  await app.register(generateRoutes, { services });
  await app.register(tokenizeRoutes, { services });
  await app.register(metricsRoutes, { services });
  await app.register(modelRoutes, { services });
  await app.register(loadRoutes, { services });
  await app.register(sglangRouterRoutes, { services });
  await app.register(uiRoutes);
  if (config.rl.enabled) {
    await app.register(rlWorkerRoutes, { services, prefix: RL_PREFIX });
    await app.register(rlEngineRoutes, { services, prefix: RL_PREFIX });
    await app.register(refitRoutes, { services, prefix: RL_PREFIX });
    await app.register(refitEventRoutes, { services, prefix: RL_PREFIX });
    await app.register(fleetEventRoutes, { services, prefix: RL_PREFIX });
  }
  return app;
}

function decodedPath(url: string): string {
  const path = url.split('?', 1)[0]!;
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

/** `/v1/rl`, `/v1/rl/...` or `/v1/rl?...`; not `/v1/rlx`. */
function isRlPath(url: string): boolean {
  return url.startsWith(RL_PREFIX) && (url.length === RL_PREFIX.length || '/?'.includes(url[RL_PREFIX.length]!));
}
