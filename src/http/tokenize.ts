// SMG's OpenAI-compatible tokenizer routes: `POST /v1/tokenize` and `POST /v1/detokenize`, with
// the tokenizer of the request's model (resolved as /generate resolves it). Workers of the model
// are tried in turn, routable ones first, then any that is up (tokenizing needs no generation, so
// a paused engine can answer): the first with a tokenizer answers (relay/tokenize.ts). None with
// one is 400 `tokenizer_not_found` naming the fix; none up is 503 `no_available_workers`.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { GatewayError } from '../api/errors.ts';
import { errorResponses } from '../api/error-responses.ts';
import { parseJsonObject } from '../api/json-object.ts';
import { DetokenizeAnswer, DetokenizeRequest, TokenizeAnswer, TokenizeRequest } from '../api/tokenize-schema.ts';
import { healthOf } from '../fleet/fleet-view.ts';
import type { Worker } from '../fleet/worker.ts';
import { ROUTED_HEADER } from '../relay/stamping.ts';
import { tokenizerCall, type TokenizerAsk } from '../relay/tokenize.ts';
import { resolveModel } from './model-resolution.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import type { RouteOptions, Services } from './services.ts';

const CHECKS = { tokenize: TypeCompiler.Compile(TokenizeRequest), detokenize: TypeCompiler.Compile(DetokenizeRequest) };

const FIX =
  'SGLang engines tokenize themselves (/v1/tokenize), gRPC engines serve their tokenizer through GetTokenizer; otherwise start the gateway with `--tokenizer-path DIR`';

/** Workers that give up on being unreachable before the answer is a 502: one retry, as /generate has. */
const MAX_UNREACHABLE = 2;

export const tokenizeRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  acceptRawBodies(app);
  app.post('/v1/tokenize', { schema: schemaOf('tokenize', TokenizeRequest, TokenizeAnswer) }, (req, reply) => serve(services, 'tokenize', req, reply));
  app.post('/v1/detokenize', { schema: schemaOf('detokenize', DetokenizeRequest, DetokenizeAnswer) }, (req, reply) =>
    serve(services, 'detokenize', req, reply),
  );
};

function schemaOf(kind: 'tokenize' | 'detokenize', body: TSchema, answer: TSchema) {
  return {
    tags: ['generate'],
    summary: kind === 'tokenize' ? 'Tokenize (SMG)' : 'Detokenize (SMG)',
    description:
      "With the tokenizer of the request's model: an SGLang engine's own route, else the worker's tokenizer (a gRPC engine's GetTokenizer bundle, else `--tokenizer-path`).",
    body,
    response: {
      200: answer,
      ...errorResponses(
        'invalid_request',
        'tokenizer_not_found',
        'model_not_found',
        'payload_too_large',
        'unsupported_media_type',
        'no_available_workers',
        'upstream_unreachable',
        'upstream_timeout',
      ),
    },
  };
}

async function serve(services: Services, kind: 'tokenize' | 'detokenize', req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const body: Record<string, unknown> = parseJsonObject(rawBody(req.body), 'invalid_request');
  const check = CHECKS[kind];
  // Checked as `unknown`: the guard would narrow `body` to one route's shape, which the fields below do not need.
  if (!check.Check(body as unknown)) {
    const first = check.Errors(body).First();
    const field = first?.path || '/';
    throw new GatewayError('invalid_request', `invalid field \`${field}\`: ${first?.message ?? 'wrong type'}`, { field });
  }
  const modelId = resolveModel(services, body.model);
  const model = typeof body.model === 'string' && body.model.trim() !== '' ? body.model.trim() : modelId;
  const ask: TokenizerAsk =
    kind === 'tokenize'
      ? { kind, prompt: body.prompt as string | string[], addSpecialTokens: body.add_special_tokens === true, model }
      : { kind, tokens: body.tokens as number[] | number[][], skipSpecialTokens: body.skip_special_tokens !== false, model };

  const unfit: string[] = [];
  const unreachable: GatewayError[] = [];
  for (const worker of candidates(services, modelId)) {
    const client = services.host.client(worker.id);
    if (!client) continue;
    const out = await tokenizerCall(services, worker, client, ask);
    if (out.kind === 'answered') return reply.code(out.status).header(ROUTED_HEADER, worker.url).send(out.json);
    if (out.kind === 'passed') {
      // The engine's own refusal (or an answer we cannot read), as it wrote it.
      const type = out.answer.headers['content-type'];
      if (type !== undefined) reply.header('content-type', type);
      return reply.code(out.answer.status).header(ROUTED_HEADER, worker.url).send(out.answer.body);
    }
    if (out.kind === 'unfit') unfit.push(out.why);
    else if (unreachable.push(out.error) >= MAX_UNREACHABLE) break;
  }
  if (unreachable.length > 0) throw unreachable[0]!;
  if (unfit.length > 0) {
    throw new GatewayError('tokenizer_not_found', `no tokenizer for model \`${modelId}\` (${unfit.join('; ')}): ${FIX}`, { model: modelId });
  }
  throw new GatewayError('no_available_workers', `no worker of model \`${modelId}\` is up to ${kind}; retry`, { retryable: true });
}

/** The model's workers that are up and whose breaker is not open: routable ones first. */
function candidates(services: Services, modelId: string): Worker[] {
  const routable = services.router.eligible({ modelId });
  const first = new Set(routable.map((w) => w.id));
  const up = services.registry.all().filter((w) => {
    if (w.modelId !== modelId || first.has(w.id)) return false;
    const e = services.view.engine(w);
    return healthOf(e) === 'ready' && e.breaker !== 'open';
  });
  return [...routable, ...up];
}
