// The minimal data plane: SGLang-native /generate and OpenAI-shaped /v1/chat/completions and
// /v1/completions, routed among eligible engines of the request's model (a model-less request
// resolves to the single real model served). HTTP engines are relayed by
// http-relay.ts (bytes up untouched, so no `model` is ever added; answers written as they come).
// An engine that fails before its first response byte is retried once on another engine; one
// deadline (request-watch.ts) bounds the request, every attempt included.
// Token engines (gRPC, ZMQ) go through token-relay.ts (/generate) and openai-tokens.ts (OpenAI paths),
// with the same retry before their first event; an engine that cannot take a request (`text`
// without a tokenizer, a field its wire lacks) passes it to the other eligible engines.

import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpEngineClient } from '../engines/http.ts';
import { relayToHttpEngine, type AnswerTarget, type Sent } from '../relay/http-relay.ts';
import { RequestWatch } from '../relay/request-watch.ts';
import { GatewayError } from '../api/errors.ts';
import { acceptRawBodies, rawBody } from './raw-body.ts';
import { checkDataPlaneBody, type DataPlanePath } from '../relay/data-plane-input.ts';
import { routingPromptOf, type RoutingPrompt } from '../relay/routing-prompt.ts';
import type { RequestOutcome, RoutingInputs } from '../fleet/policies/policy.ts';
import type { PickOptions } from '../fleet/router.ts';
import type { RouteOptions, Services } from './services.ts';
import { tokenRelay, type TokenAttempt } from '../relay/token-relay.ts';
import { tokenRequestOf } from '../relay/token-sampling.ts';
import { openAiTokenRelay } from '../relay/openai-tokens.ts';
import { checkTokenLimits, tokenLimitsOf } from '../relay/token-limits.ts';
import { resolveModel } from './model-resolution.ts';
import { smallestContextLength } from '../fleet/context-length.ts';
import type { Worker } from '../fleet/worker.ts';
import type { TokenEngine } from '../engines/generation.ts';
import type { EngineClient } from '../engines/engine-client.ts';
import { formatVersionPolicy, parseVersionPolicy, policyFromHeader, type VersionPolicy } from '../fleet/version-policy.ts';
import { versionNumber } from '../fleet/versions.ts';
import { abortableBody, ON_STALE_HEADER, staleActionOf, type StaleAction } from '../relay/stale-guard.ts';
import { errorResponses } from '../api/error-responses.ts';
import {
  ChatRequest,
  CompletionRequest,
  EventStream,
  GenerateAnswer,
  GenerateRequest,
  OpenAiAnswer,
  StampHeaders,
  VersionPolicyHeaders,
} from '../api/generate-schema.ts';

function isTokenEngine(c: EngineClient): c is EngineClient & TokenEngine {
  return typeof (c as Partial<TokenEngine>).generate === 'function';
}

const HTTP_ONLY = new Set(['http']);
const SMG_POLICY_HEADER = 'x-smg-version-policy';
const RL_POLICY_HEADER = 'x-rl-version-policy';

export const generateRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  acceptRawBodies(app);
  for (const path of ['/generate', '/v1/chat/completions', '/v1/completions'] as const) {
    app.post(path, { schema: dataPlaneSchema(path) }, (req, reply) => relay(services, path, req.headers, req.body, reply, reply).then(() => reply));
  }
  app.put('/generate', { schema: dataPlaneSchema('/generate') }, (req, reply) =>
    relay(services, '/generate', req.headers, req.body, reply, reply).then(() => reply),
  );
};

const DATA_PLANE_DOCS = {
  '/generate': { summary: 'Generate (SGLang native)', body: GenerateRequest, answer: GenerateAnswer },
  '/v1/chat/completions': { summary: 'Chat completion (OpenAI)', body: ChatRequest, answer: OpenAiAnswer },
  '/v1/completions': { summary: 'Completion (OpenAI)', body: CompletionRequest, answer: OpenAiAnswer },
} as const;

function dataPlaneSchema(path: DataPlanePath) {
  const { summary, body, answer } = DATA_PLANE_DOCS[path];
  return {
    tags: ['generate'],
    summary,
    description:
      "Routed to one eligible engine of the request's model (HTTP, gRPC or ZMQ), retried once on another engine if the first fails before answering. An HTTP engine's answer, its status included, comes back as the engine wrote it.",
    headers: VersionPolicyHeaders,
    body,
    response: {
      200: {
        description: "The engine's answer; `stream: true` answers server-sent events.",
        headers: StampHeaders,
        content: { 'application/json': { schema: answer }, 'text/event-stream': { schema: EventStream } },
      },
      ...errorResponses(
        'invalid_request',
        'invalid_version_policy',
        'invalid_request_shape',
        'model_not_found',
        'payload_too_large',
        'no_available_workers',
        'upstream_unreachable',
        'logprobs_unavailable',
        'upstream_timeout',
      ),
    },
  };
}

/**
 * Serves one data-plane request: routing, retries, the deadline, stamping. `target` is where an
 * HTTP engine's answer is written; `reply` is fastify's, which the token relays build their answers
 * on: the hot path (hot-path.ts) has none, serves HTTP-engine fleets only, and so routes to HTTP
 * engines only. Every refusal is thrown as a GatewayError, answered by the caller's error path.
 */
export async function relay(
  services: Services,
  path: DataPlanePath,
  headers: IncomingHttpHeaders,
  rawRequestBody: unknown,
  target: AnswerTarget,
  reply: FastifyReply | undefined,
): Promise<void> {
  const timing = services.metrics.startRequest(path, target.raw);
  const body = rawBody(rawRequestBody);
  const parsed = checkDataPlaneBody(path, body);
  // slime's client sends `text` as one string (SMG's request type); SGLang's batch form is a
  // shape we do not take, on any engine path.
  if (path === '/generate' && Array.isArray(parsed.text)) {
    services.metrics.request(path, 422);
    throw new GatewayError('invalid_request_shape', '`text` must be one string: batched `text` lists are not accepted; send one prompt per request', {
      field: '/text',
    });
  }
  const rl = services.config.rl.enabled;
  const policy = rl ? requestPolicy(services.config.rl.versionPolicy, headers) : undefined;
  const onStale = rl ? staleActionOf(headers[ON_STALE_HEADER]) : undefined;
  let modelId: string;
  try {
    modelId = resolveModel(services, parsed.model);
  } catch (err) {
    services.metrics.request(path, 404);
    throw err;
  }

  // A batch of `input_ids` is one prompt per call on gRPC/ZMQ: it goes to HTTP engines only.
  const batch = path === '/generate' && isIdBatch(parsed.input_ids);
  const modes = batch || !reply ? HTTP_ONLY : undefined;
  // What the routing policy reads: the prompt (only if it reads one) and SMG's routing headers.
  // slime under consistent hashing sends its session id as the routing key: same key, same engine.
  const { router } = services;
  const prompt: RoutingPrompt = router.needsPrompt ? routingPromptOf(path, parsed) : {};
  const routed: RoutingInputs = {
    ...prompt,
    routingKey: headerValue(headers['x-smg-routing-key']),
    targetWorker: headerValue(headers['x-smg-target-worker']),
    implicitKey: headerValue(headers.authorization) ?? headerValue(headers['x-forwarded-for']) ?? headerValue(headers.cookie),
  };
  // Token limits past the context length are refused before any engine is called; the smallest
  // among the eligible engines, so the answer does not depend on which one routing picks.
  // One scan of the fleet serves both the check and the pick.
  const candidates = router.eligible({ modes, modelId, policy, counts: services.metrics });
  const limits = tokenLimitsOf(path, parsed);
  if (limits.length > 0) checkTokenLimits(limits, smallestContextLength(candidates));
  // The object the policy is told about when the request ends is the one it was picked with.
  const first = { modes, modelId, policy, ...routed };
  let worker = router.pick(first, candidates);
  // A token-engine-only fleet answers a batch with token-relay's own 400 (as SMG answers it).
  if (!worker && batch && services.router.eligible({ modelId }).some((w) => w.connectionMode !== 'http')) tokenRequestOf(parsed);
  if (!worker) {
    services.metrics.request(path, 503);
    // Engines were eligible, and the policy took none: the target worker names none of them.
    const why =
      candidates.length > 0 && routed.targetWorker !== undefined
        ? 'X-SMG-Target-Worker names no eligible engine'
        : 'every engine is paused, refitting, unreachable or breaker-open';
    throw new GatewayError('no_available_workers', `no available workers: ${why}; retry`, { retryable: true });
  }

  // One deadline for the whole request, every attempt included (SMG's request_timeout_secs).
  const timeoutSecs = services.config.requestTimeoutSecs;
  const watch = new RequestWatch(target.raw, timeoutSecs * 1000);
  const stream = parsed.stream === true;
  // Under max-staleness a /generate is bounded while it runs too (stale-guard.ts), by its rid.
  const bound = policy?.kind === 'max-staleness' && path === '/generate' && !batch ? abortableBody(parsed.rid, body) : undefined;
  const sentBody = bound?.body ?? body;

  const tried = new Set<string>();
  let unreachable: { worker: Worker; error: Error } | undefined;
  let unfit: GatewayError | undefined;
  // A retry goes by the prompt alone, as it always has: no key, no target, on another engine.
  let inputs: RoutingInputs = first;
  const retry: RoutingInputs = prompt;
  let unwatch: (() => void) | undefined;
  for (;;) {
    tried.add(worker.id);
    timing.attempt(worker);
    const client = services.host.client(worker.id);
    // The engine's version as the request goes to it: what it is admitted on.
    const admitted = rl ? services.view.engine(worker).version : undefined;
    unwatch?.();
    unwatch = bound ? boundInFlight(services, worker, admitted, client, watch, policy!, modelId, onStale ?? 'abort', bound.rid) : undefined;
    // What the engine's answer said, for the policy's bookkeeping and the routing figures (each relay fills it at the answer's end).
    const outcome: RequestOutcome = { answered: false };
    let sent: Sent | TokenAttempt;
    try {
      if (client && isTokenEngine(client) && reply) {
        const signals = watch.signals();
        sent =
          path === '/generate'
            ? await tokenRelay(services, worker, client, parsed, reply, signals, outcome)
            : await openAiTokenRelay(services, path, worker, client, parsed, reply, signals, outcome);
      } else if (client instanceof HttpEngineClient) {
        sent = await relayToHttpEngine(services, path, stream, sentBody, worker, client, target, watch, outcome, admitted);
      } else throw new GatewayError('no_available_workers', 'no available workers', { retryable: true });
    } catch (err) {
      unwatch?.();
      router.finished(worker.id, inputs, outcome);
      throw err;
    }
    if (sent.kind === 'answered') {
      finishOnClose(services, target.raw, worker.id, inputs, outcome, path === '/generate' ? { admitted, modelId } : undefined, unwatch);
      return;
    }
    unwatch?.();
    unwatch = undefined;
    router.finished(worker.id, inputs, outcome);
    if (sent.kind === 'deadline') {
      services.metrics.request(path, 504);
      throw new GatewayError('upstream_timeout', `request to \`${worker.url}\` timed out after ${timeoutSecs}s`, { worker_id: worker.id, url: worker.url });
    }
    if (watch.callerGone) throw new GatewayError('invalid_request', 'client went away');
    let next: Worker | undefined;
    if (sent.kind === 'unfit') {
      // This engine cannot take the request (`text` without a tokenizer, a field its wire lacks),
      // a fact about the engine, not a failure: every other eligible engine may still be tried.
      unfit ??= sent.error;
      const again: PickOptions = { modes, modelId, policy, exclude: tried, counts: services.metrics, ...retry };
      next = router.pick(again);
      inputs = again;
    } else {
      // Nothing reached the caller yet: one more engine may take it (issue 4 item 6), any wire.
      const again: PickOptions = { modes, modelId, policy, exclude: tried, counts: services.metrics, ...retry };
      next = unreachable ? undefined : router.pick(again);
      inputs = again;
      unreachable = { worker, error: sent.error };
      if (next)
        services.log.warn(
          { worker_id: worker.id, url: worker.url, next: next.url, err: sent.error.message },
          'data-plane upstream failed before the first byte; retrying once',
        );
    }
    if (!next) {
      if (unfit && !unreachable) throw unfit;
      services.metrics.request(path, 502);
      const { worker: failed, error } = unreachable!;
      throw new GatewayError('upstream_unreachable', `upstream \`${failed.url}\` unreachable: ${error.message}`, { worker_id: failed.id, url: failed.url });
    }
    worker = next;
  }
}

/** A header's value when it is one non-empty string. */
function headerValue(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

/** Tells the router the request ended when its answer is done or cut off (a stream outlives the handler). */
function finishOnClose(
  services: Services,
  res: AnswerTarget['raw'],
  workerId: string,
  inputs: RoutingInputs,
  outcome: RequestOutcome,
  /** A /generate's admission (RL on): its off-policy lag is observed when it is answered. */
  lag: { admitted: string | undefined; modelId: string } | undefined,
  unwatch: (() => void) | undefined,
): void {
  const done = () => {
    unwatch?.();
    services.router.finished(workerId, inputs, outcome);
    if (lag && outcome.answered) observeLag(services, lag.admitted, lag.modelId);
  };
  if (res.closed) done();
  else res.once('close', done);
}

/** `input_ids` as a list of lists: SGLang's batch form. */
function isIdBatch(ids: unknown): boolean {
  return Array.isArray(ids) && ids.length > 0 && Array.isArray(ids[0]);
}

/**
 * The version policy of one request (RL on): each policy header present must parse
 * (else 400 `invalid_version_policy`, before routing); `x-rl-version-policy` wins over
 * `x-smg-version-policy` when both are valid; neither → the configured default.
 */
function requestPolicy(configured: string, headers: IncomingHttpHeaders): VersionPolicy {
  const smg = headerPolicy(headers[SMG_POLICY_HEADER]);
  const ours = headerPolicy(headers[RL_POLICY_HEADER]);
  return ours ?? smg ?? defaultPolicy(configured);
}

function headerPolicy(value: string | string[] | undefined): VersionPolicy | undefined {
  if (value === undefined) return undefined;
  // A repeated header is one value to SMG's parser too: it cannot parse as a single policy.
  const text = Array.isArray(value) ? value.join(', ') : value;
  return policyFromHeader(utf8HeaderValue(text));
}

// Node hands header values over as latin1 (one char per byte): re-read non-ASCII ones as UTF-8.
const UTF8 = new TextDecoder('utf-8', { fatal: true });
function utf8HeaderValue(text: string): string {
  if (!/[^\x00-\x7f]/.test(text)) return text;
  try {
    return UTF8.decode(Buffer.from(text, 'latin1'));
  } catch {
    throw new GatewayError('invalid_version_policy', 'header value is not UTF-8');
  }
}

// The configured default was validated at startup (gateway/config.ts); parse it once.
let configuredPolicy: { text: string; policy: VersionPolicy } | undefined;
function defaultPolicy(text: string): VersionPolicy {
  if (configuredPolicy?.text !== text) configuredPolicy = { text, policy: parseVersionPolicy(text.trim()) };
  return configuredPolicy.policy;
}

/**
 * Watches one attempt against its staleness bound: the engine's version now is what it was
 * admitted on. Gone stale, a `mark` request goes on (its buffered answer says `x-rl-stale:
 * marked`); an `abort` one is cut off: a token engine's generation is cancelled (the answer ends as
 * an abort partial saying why), an HTTP engine is sent `abort_request` for the request's rid and
 * its own abort answer comes back. Unversioned engines are not watched.
 */
function boundInFlight(
  services: Services,
  worker: Worker,
  admitted: string | undefined,
  client: ReturnType<Services['host']['client']>,
  watch: RequestWatch,
  policy: VersionPolicy,
  modelId: string,
  action: StaleAction,
  rid: string,
): (() => void) | undefined {
  if (admitted === undefined) return undefined;
  return services.stale.watch({
    modelId,
    admitted,
    policy,
    action,
    onStale: (fleetMax) => {
      const why = `admitted on version ${admitted}, the fleet is on ${fleetMax}, past ${formatVersionPolicy(policy)}`;
      services.log.info({ worker_id: worker.id, rid, admitted, fleet_version: fleetMax, action }, 'request in flight past its staleness bound');
      watch.goneStale(action, why);
      if (action === 'abort' && client instanceof HttpEngineClient) {
        void client.pool
          .request({
            path: '/abort_request',
            method: 'POST',
            headers: { 'content-type': 'application/json', ...(worker.apiKey ? { authorization: `Bearer ${worker.apiKey}` } : {}) },
            body: JSON.stringify({ rid }),
          })
          .then((r) => r.body.dump())
          .catch((err: Error) => services.log.warn({ worker_id: worker.id, rid, err: err.message }, 'could not ask the engine to abort a stale request'));
      }
    },
  });
}

/**
 * The off-policy lag of one answered /generate: the model's fleet maximum when it ended minus the
 * version its engine held when it was sent there (numeric versions only). The common answer, a
 * fleet still on the admitted version, is a lag of 0 without parsing either.
 */
function observeLag(services: Services, admitted: string | undefined, modelId: string): void {
  if (admitted === undefined) return;
  const max = services.router.fleetMaxOf(modelId);
  if (max === undefined) return;
  if (max === admitted) {
    if (versionNumber(admitted) !== null) services.metrics.rolloutLag(0);
    return;
  }
  const a = versionNumber(admitted);
  const m = versionNumber(max);
  if (a !== null && m !== null) services.metrics.rolloutLag(m > a ? Number(m - a) : 0);
}
