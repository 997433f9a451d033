// The door of every write (POST, PUT, PATCH, DELETE), checked in onRequest before any body is
// read or any route runs: a browser origin outside `--allowed-origins` is refused (403), and a
// body must be JSON (415). A page elsewhere can send a "simple" cross-origin request (a form or
// a `text/plain` fetch) with no CORS preflight; without these checks it could pause engines or
// run a refit on a gateway without an admin key. Also answers CORS preflights, and labels
// answers to allowed origins with `access-control-allow-origin`.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { withErrorCode } from '../api/error-responses.ts';
import { GatewayError } from '../api/errors.ts';
import { allowOriginValue, originAllowed, preflightHeaders, type AllowedOrigins } from './origin-policy.ts';

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

// SMG's pass-through contract: a body sent without a content type is JSON (the gateway labels it
// `application/json` to the engine), so there, and only there, no content type passes.
const TYPELESS_JSON_ROUTES = new Set(['/v1/rl/workers/:id/engine/*', '/v1/rl/workers/:id/engine', '/v1/rl/engine/*', '/v1/rl/engine']);

/** A CORS preflight: OPTIONS from a browser, naming the method it wants to send. */
export function isPreflight(req: FastifyRequest): boolean {
  return req.method === 'OPTIONS' && typeof req.headers.origin === 'string' && typeof req.headers['access-control-request-method'] === 'string';
}

export function writeGuard(policy: AllowedOrigins) {
  return (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
    const origin = req.headers.origin;
    const preflight = isPreflight(req);
    if (origin !== undefined) {
      if (!originAllowed(policy, origin, req.headers.host)) {
        if (preflight || WRITES.has(req.method)) return done(refused(origin));
      } else {
        // Set on the raw response so answers written by the relay carry it too.
        reply.raw.setHeader('access-control-allow-origin', allowOriginValue(policy, origin));
        if (!policy.any) reply.raw.setHeader('vary', 'Origin');
        if (preflight) {
          reply
            .code(204)
            .headers(preflightHeaders(policy, origin, header(req, 'access-control-request-headers')))
            .send();
          return;
        }
      }
    }
    if (WRITES.has(req.method) && hasBody(req)) {
      const type = header(req, 'content-type');
      const typelessOk = type === undefined && TYPELESS_JSON_ROUTES.has(req.routeOptions?.url ?? '');
      if (!typelessOk && !isJsonMediaType(type)) {
        return done(
          new GatewayError(
            'unsupported_media_type',
            `a request body must be JSON (content-type: application/json), got ${type === undefined ? 'no content-type' : `\`${type}\``}`,
            {
              content_type: type ?? null,
            },
          ),
        );
      }
    }
    done();
  };
}

/**
 * Documents the guard's two answers (403 `origin_not_allowed`, 415 `unsupported_media_type`) on
 * every write route registered after this call, so the API document tells what the door refuses.
 */
export function documentWriteGuard(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!route.schema || !methods.some((m) => WRITES.has(m))) return;
    const response = (route.schema.response ?? {}) as Record<number, unknown>;
    route.schema = { ...route.schema, response: withErrorCode(withErrorCode(response, 'origin_not_allowed'), 'unsupported_media_type') };
  });
}

function refused(origin: string): GatewayError {
  return new GatewayError('origin_not_allowed', `origin \`${origin}\` may not write to this gateway; add it to --allowed-origins`, { origin });
}

/** `application/json` or `application/<x>+json`, any parameters, and a charset (if any) of UTF-8. */
export function isJsonMediaType(type: string | undefined): boolean {
  if (type === undefined) return false;
  const [essence, ...params] = type.split(';');
  const media = essence!.trim().toLowerCase();
  if (media !== 'application/json' && !/^application\/[!#$&^_.+\-a-z0-9]+\+json$/.test(media)) return false;
  for (const p of params) {
    const [name, value] = p.split('=', 2).map((s) => s.trim().toLowerCase());
    // JSON text is UTF-8 (RFC 8259 §8.1): a body declared in another charset is not ours to read.
    if (name === 'charset' && !['utf-8', 'utf8', '"utf-8"'].includes(value ?? '')) return false;
  }
  return true;
}

/** Whether bytes follow the head: a non-zero length, or a chunked body (its size unknown yet). */
function hasBody(req: FastifyRequest): boolean {
  const length = header(req, 'content-length');
  if (length !== undefined) return length.trim() !== '0';
  return req.headers['transfer-encoding'] !== undefined;
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === 'string' ? v : undefined;
}
