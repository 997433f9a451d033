// What may be sent to a token engine (TokenSpeed gRPC, the ZMQ lane): an SGLang /generate body
// shaped into one TokenRequest (a `text` prompt tokenized), and the refusals of what no token engine
// takes (400) or what one wire cannot carry (EngineCannotServe: another engine may still serve it).
// A sampling parameter is refused, never dropped. Pure shaping: it never calls an engine or routes.

import { randomUUID } from 'node:crypto';
import { PLAIN_SAMPLING_KEYS, type TokenEngine, type TokenRequest, type TokenSampling } from '../engines/generation.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import type { Tokenizer } from '../engines/tokenizer.ts';
import { GatewayError, type ErrorContext } from '../api/errors.ts';

const NO_TOKENIZER_FIX = 'start the engine with a tokenizer (gRPC engines serve theirs through GetTokenizer) or start the gateway with `--tokenizer-path DIR`';

function hasText(body: Record<string, unknown>): boolean {
  return body.text !== undefined && body.text !== null;
}

/**
 * A 400 about the engine, not the request: `text` where no tokenizer is available, a parameter
 * its wire has no field for. Another eligible engine may still serve the request (generate.ts).
 */
export class EngineCannotServe extends GatewayError {
  constructor(message: string, context: ErrorContext = {}) {
    super('invalid_request', message, context);
  }
}

export type TokenWire = 'grpc' | 'zmq';

export function wireOf(engine: TokenEngine): TokenWire {
  return engine instanceof GrpcEngineClient ? 'grpc' : 'zmq';
}

/** Sampling fields the gRPC wire carries and the ZMQ lane does not (it sends them as null). */
const NOT_ON_ZMQ: Readonly<Partial<Record<keyof TokenSampling, string>>> = {
  stop: 'string `stop` sequences are not supported on ZMQ engines (the wire carries token ids only): send `stop_token_ids`',
  logit_bias: '`logit_bias` is not supported on ZMQ engines (the wire has no field for it); gRPC and HTTP engines take it',
  structural_tag: '`structural_tag` is not supported on ZMQ engines; gRPC and HTTP engines take it',
  custom_params: '`custom_params` is not supported on ZMQ engines; gRPC and HTTP engines take it',
};

/**
 * Refuses a sampling parameter the request set that `wire` cannot carry, pointing at the
 * request's field (`pointer`): a user's sampling setting is never dropped silently.
 */
export function checkWire(sampling: TokenSampling, wire: TokenWire, pointer: (k: keyof TokenSampling) => string): void {
  if (wire === 'grpc') return;
  for (const [k, why] of Object.entries(NOT_ON_ZMQ) as Array<[keyof TokenSampling, string]>) {
    if (sampling[k] !== undefined) throw new EngineCannotServe(why, { field: pointer(k) });
  }
}

/**
 * Refuses what a token engine cannot honour, before any engine is called. A
 * `text` prompt is tokenized with `tokenizer`; without one it is refused, saying how to get one.
 */
export function tokenRequestOf(body: Record<string, unknown>, tokenizer?: Tokenizer, whyNoTokenizer?: string): TokenRequest {
  let ids = body.input_ids;
  if (hasText(body)) {
    if (typeof body.text !== 'string')
      throw new GatewayError('invalid_request', '`text` must be one string: gRPC and ZMQ engines take one prompt per request', { field: '/text' });
    if (ids !== undefined && ids !== null) throw new GatewayError('invalid_request', 'give either `text` or `input_ids`, not both', { field: '/text' });
    if (!tokenizer) {
      const why = whyNoTokenizer ? ` (${whyNoTokenizer})` : '';
      throw new EngineCannotServe(
        `\`text\` needs the engine's tokenizer and none is available for this worker${why}: send \`input_ids\`, ${NO_TOKENIZER_FIX}`,
        { field: '/text' },
      );
    }
    ids = tokenizer.encode(body.text);
    if ((ids as number[]).length === 0) throw new GatewayError('invalid_request', '`text` tokenized to no tokens', { field: '/text' });
  }
  if (!Array.isArray(ids) || ids.length === 0)
    throw new GatewayError('invalid_request', '`input_ids` must be a non-empty list of token ids', { field: '/input_ids' });
  if (Array.isArray(ids[0]))
    throw new GatewayError('invalid_request', 'gRPC and ZMQ engines take one prompt per request: `input_ids` must be a flat list', { field: '/input_ids' });
  if (body.return_routed_experts === true) {
    throw new EngineCannotServe('`return_routed_experts` has no field on the TokenSpeed wire', { field: '/return_routed_experts' });
  }
  const sp = (body.sampling_params ?? {}) as Record<string, unknown>;
  if (Array.isArray(sp)) throw new GatewayError('invalid_request', 'one prompt takes one `sampling_params` object', { field: '/sampling_params' });
  const sampling: TokenSampling = {};
  for (const k of PLAIN_SAMPLING_KEYS) if (sp[k] !== undefined && sp[k] !== null) (sampling as Record<string, unknown>)[k] = sp[k];
  const stop = stopStringsOf(sp.stop, '`sampling_params.stop`', '/sampling_params/stop');
  if (stop) sampling.stop = stop;
  const bias = logitBiasOf(sp.logit_bias, '/sampling_params/logit_bias');
  if (bias) sampling.logit_bias = bias;
  if (sp.structural_tag !== undefined && sp.structural_tag !== null) sampling.structural_tag = sp.structural_tag as string;
  if (sp.custom_params !== undefined && sp.custom_params !== null) {
    if (typeof sp.custom_params !== 'object' || Array.isArray(sp.custom_params)) {
      throw new GatewayError('invalid_request', '`sampling_params.custom_params` must be an object', { field: '/sampling_params/custom_params' });
    }
    sampling.custom_params = sp.custom_params as Record<string, unknown>;
  }
  checkConstraints(sampling, (k) => `/sampling_params/${k}`);
  // proto3 plain bools: SGLang's defaults must be sent explicitly (slime sends false).
  sampling.skip_special_tokens ??= true;
  sampling.spaces_between_special_tokens ??= true;
  return {
    rid: typeof body.rid === 'string' && body.rid ? body.rid : randomUUID().replace(/-/g, ''),
    inputIds: ids as number[],
    sampling,
    returnLogprob: body.return_logprob === true,
    topLogprobsNum: typeof body.top_logprobs_num === 'number' ? body.top_logprobs_num : 0,
    stream: true,
  };
}

/** SGLang's (and OpenAI's) `stop`: one string or a list of them; empty means none. */
export function stopStringsOf(stop: unknown, name: string, field: string): string[] | undefined {
  if (stop === undefined || stop === null) return undefined;
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list) || !list.every((x) => typeof x === 'string')) {
    throw new GatewayError('invalid_request', `${name} must be a string or a list of strings`, { field });
  }
  const kept = list.filter((x) => x !== '');
  return kept.length > 0 ? kept : undefined;
}

/** SGLang's `logit_bias`: token id (a decimal string) → finite bias; empty or null is none. */
export function logitBiasOf(v: unknown, field: string): Record<string, number> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new GatewayError('invalid_request', '`logit_bias` must be an object of token id → bias', { field });
  const out: Record<string, number> = {};
  for (const [k, b] of Object.entries(v as Record<string, unknown>)) {
    if (!/^\d+$/.test(k) || !Number.isSafeInteger(Number(k)))
      throw new GatewayError('invalid_request', `\`logit_bias\` keys are token ids: \`${k}\` is not one`, { field });
    if (typeof b !== 'number' || !Number.isFinite(b))
      throw new GatewayError('invalid_request', `\`logit_bias\` of token ${k} must be a finite number`, { field });
    out[k] = b;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

const CONSTRAINTS = ['regex', 'json_schema', 'ebnf', 'structural_tag'] as const;

/** At most one grammar constraint (SGLang refuses more; gRPC's `oneof` would keep only one). */
export function checkConstraints(s: TokenSampling, pointer: (k: keyof TokenSampling) => string): void {
  const set = CONSTRAINTS.filter((k) => s[k] !== undefined);
  for (const k of set) {
    if (typeof s[k] !== 'string') throw new GatewayError('invalid_request', `\`${k}\` must be a string`, { field: pointer(k) });
  }
  if (set.length > 1)
    throw new GatewayError('invalid_request', `only one of \`regex\`, \`json_schema\`, \`ebnf\` and \`structural_tag\` can be set (got ${set.join(', ')})`, {
      field: pointer(set[1]!),
    });
}
