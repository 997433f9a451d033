// The error part of a route's `response` map for the API document: each HTTP status a route can
// answer with an error, from the codes it raises. Every body is the one envelope (ErrorAnswer),
// referenced as one shared schema; the codes of each status are named in its description, since
// clients key on `error`.

import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorStatus, type ErrorCode } from './errors.ts';
import { ErrorAnswer } from './error-schema.ts';

/**
 * ErrorAnswer under a name, for `app.addSchema` (http/app.ts): the routes' error answers refer to
 * it, so the document holds the envelope (and its list of codes) once instead of per answer.
 */
export const SharedErrorAnswer = { ...ErrorAnswer, $id: 'ErrorAnswer' };

/** Any route can fail on a bug: 500 internal_error (details go to the log only). */
const ALWAYS: readonly ErrorCode[] = ['internal_error'];

/** `{status: ErrorAnswer}` for the given codes and internal_error, grouped by status. */
export function errorResponses(...codes: ErrorCode[]): Record<number, TSchema> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of [...codes, ...ALWAYS]) {
    const status = ErrorStatus[code];
    const list = byStatus.get(status) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(status, list);
  }
  const out: Record<number, TSchema> = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) out[status] = errorAnswer(status, list);
  return out;
}

function errorAnswer(status: number, codes: readonly string[]): TSchema {
  const description = `Error: ${codes.map((c) => `\`${c}\``).join(', ')}.`;
  const answer = Type.Ref(SharedErrorAnswer, { description });
  return status === 405 ? { ...answer, headers: { allow: { type: 'string', description: 'The methods the path takes.' } } } : answer;
}

/**
 * A route's `response` map with one more code documented, for checks that every route of a kind
 * gets (http/query-params.ts): merged into the status's error answer (its codes are read back
 * from the description errorAnswer wrote), or added as one.
 */
export function withErrorCode(response: Record<number, unknown>, code: ErrorCode): Record<number, unknown> {
  const status = ErrorStatus[code];
  const description = (response[status] as { description?: unknown } | undefined)?.description;
  if (response[status] !== undefined && !(typeof description === 'string' && description.startsWith('Error: '))) return response;
  const codes = typeof description === 'string' ? [...description.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!) : [];
  if (codes.includes(code)) return response;
  return { ...response, [status]: errorAnswer(status, [...codes, code]) };
}

/** What every `/v1/rl` route may answer besides its own errors (the admin bearer, when configured). */
export const RL_AUTH: readonly ErrorCode[] = ['unauthorized'];

/** The schema of a route that only answers 405 (a wrong method on a known path), with its `allow` header. */
export function methodNotAllowedSchema(tag: string, allow: string, ...codes: ErrorCode[]) {
  return {
    tags: [tag],
    summary: `Wrong method (use ${allow})`,
    description: `Answers 405 \`method_not_allowed\` with \`allow: ${allow}\`; nothing is called or changed.`,
    response: errorResponses('method_not_allowed', ...codes),
  };
}
