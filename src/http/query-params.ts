// The query parameters a route reads itself, checked before its handler: each one its
// querystring schema declares is single-valued (a repeated one is a 400 naming it, not a 500 or a
// silent first value), and a declared number or boolean must be one. Route schemas never validate
// (docs/decisions.md 97), so this is the one place a schema's query part is enforced; a parameter
// the schema does not declare is not the gateway's (the engine pass-through forwards it as sent,
// duplicates included) and is left alone.

import type { FastifyInstance, FastifyRequest, preValidationHookHandler, RouteOptions } from 'fastify';
import { GatewayError } from '../api/errors.ts';
import { withErrorCode } from '../api/error-responses.ts';

interface ParamRule {
  type: string | undefined;
  minimum?: number;
  maximum?: number;
}

/**
 * Adds the check to every route registered after this call whose schema declares a querystring,
 * and documents its 400 `invalid_request`. Routes without one pay nothing (the data plane).
 */
export function checkQueryParams(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    const rules = declaredParams(route.schema?.querystring);
    if (rules.size === 0) return;
    const check: preValidationHookHandler = (req, _reply, done) => done(queryError(req, rules));
    route.preValidation = [check, ...asList(route.preValidation)];
    const response = route.schema!.response as Record<number, unknown> | undefined;
    route.schema = { ...route.schema, response: withErrorCode(response ?? {}, 'invalid_request') };
  });
}

function asList(hooks: RouteOptions['preValidation']): preValidationHookHandler[] {
  if (hooks === undefined) return [];
  return (Array.isArray(hooks) ? hooks : [hooks]) as preValidationHookHandler[];
}

/** The declared, single-valued parameters of a querystring schema (an `array` property may repeat). */
function declaredParams(schema: unknown): Map<string, ParamRule> {
  const out = new Map<string, ParamRule>();
  const properties = (schema as { properties?: Record<string, Record<string, unknown>> } | undefined)?.properties;
  if (!properties) return out;
  for (const [name, p] of Object.entries(properties)) {
    if (p.type === 'array') continue;
    out.set(name, {
      type: typeof p.type === 'string' ? p.type : undefined,
      ...(typeof p.minimum === 'number' ? { minimum: p.minimum } : {}),
      ...(typeof p.maximum === 'number' ? { maximum: p.maximum } : {}),
    });
  }
  return out;
}

function queryError(req: FastifyRequest, rules: Map<string, ParamRule>): GatewayError | undefined {
  const query = req.query as Record<string, string | string[] | undefined>;
  for (const [name, rule] of rules) {
    const value = query[name];
    if (value === undefined) continue;
    if (Array.isArray(value)) {
      return new GatewayError('invalid_request', `query parameter \`${name}\` is given ${value.length} times; give it once`, { parameter: name });
    }
    const why = malformed(value, rule);
    if (why) return new GatewayError('invalid_request', `query parameter \`${name}\` ${why}, got \`${shown(value)}\``, { parameter: name });
  }
  return undefined;
}

/** A refused value as the message quotes it: the start of it only (a URL may be kilobytes long). */
function shown(value: string): string {
  return value.length > 64 ? `${value.slice(0, 64)}…` : value;
}

/** Why a value does not fit its declared type and bounds, or undefined when it does. */
function malformed(value: string, rule: ParamRule): string | undefined {
  if (rule.type === 'boolean') return value === 'true' || value === 'false' ? undefined : 'must be true or false';
  if (rule.type !== 'integer' && rule.type !== 'number') return undefined;
  const syntax = rule.type === 'integer' ? /^-?[0-9]+$/ : /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/;
  const n = Number(value);
  const inRange = (rule.minimum === undefined || n >= rule.minimum) && (rule.maximum === undefined || n <= rule.maximum);
  if (syntax.test(value) && Number.isFinite(n) && inRange) return undefined;
  const kind = rule.type === 'integer' ? 'an integer' : 'a number';
  if (rule.minimum !== undefined && rule.maximum !== undefined) return `must be ${kind} from ${rule.minimum} to ${rule.maximum}`;
  if (rule.minimum !== undefined) return `must be ${kind} of at least ${rule.minimum}`;
  if (rule.maximum !== undefined) return `must be ${kind} of at most ${rule.maximum}`;
  return `must be ${kind}`;
}
