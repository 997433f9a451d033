// `GET /loads` and its deprecated alias `GET /get_loads`: every registered worker's load as SMG
// reports it, read from the engines at the time of the call. An HTTP engine is asked its
// `/v1/loads?include=core` once per engine (DP ranks share it); a worker of another wire, or an
// engine that does not answer, has load -1 and no details. It changes nothing and never retries.

import type { FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { RouteOptions } from './services.ts';
import { GatewayError } from '../api/errors.ts';
import { errorResponses } from '../api/error-responses.ts';
import { ADMIN_SECURITY } from '../api/openapi.ts';
import { undici } from '../engines/libraries.ts';
import { bearerMatches } from './admin-auth.ts';
import type { Worker } from '../fleet/worker.ts';

/** One engine's `/v1/loads` may take this long before its workers count as unavailable. */
const LOAD_TIMEOUT_MS = 5_000;

/** SMG's per-rank snapshot (`SchedulerLoadSnapshot`): these fields, 0 where the engine left one out. */
const RANK_FIELDS = [
  'num_running_reqs',
  'num_waiting_reqs',
  'num_total_reqs',
  'num_used_tokens',
  'max_total_num_tokens',
  'token_usage',
  'gen_throughput',
  'cache_hit_rate',
  'utilization',
  'max_running_requests',
] as const;

type RankLoad = { dp_rank: number } & Record<(typeof RANK_FIELDS)[number], number>;

interface LoadDetails {
  timestamp: string;
  dp_rank_count: number;
  loads: RankLoad[];
}

interface WorkerLoad {
  worker: string;
  load: number;
  details?: LoadDetails;
}

const RankSnapshot = Type.Object(
  { dp_rank: Type.Integer(), ...Object.fromEntries(RANK_FIELDS.map((k) => [k, Type.Number()])) },
  { additionalProperties: true },
);
const LoadsAnswer = Type.Object(
  {
    workers: Type.Array(
      Type.Object(
        {
          worker: Type.String({ description: 'The registry URL (DP ranks carry `@<rank>`).' }),
          load: Type.Integer({
            description: 'Tokens in use (the sum of `num_used_tokens`), or -1 when the load could not be read (not an HTTP engine, no answer).',
          }),
          details: Type.Optional(
            Type.Object(
              { timestamp: Type.String(), dp_rank_count: Type.Integer(), loads: Type.Array(RankSnapshot) },
              {
                additionalProperties: true,
                description: "The engine's `/v1/loads` answer, ranks in SMG's snapshot fields (this worker's rank only, for a DP rank).",
              },
            ),
          ),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);

export const loadRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { registry, config } = services;
  const answer = async () => ({ workers: await workerLoads(registry.all()) });
  const schema = (deprecated: boolean) => ({
    tags: ['workers'],
    summary: deprecated ? 'Worker loads (deprecated alias of /loads)' : 'Worker loads',
    description: deprecated
      ? 'The same answer as `GET /loads`. With `--admin-key` set it needs the admin bearer, as SMG guards it.'
      : "Every registered worker's load, read from its engine now: tokens in use and the engine's per-rank snapshot.",
    ...(deprecated ? { deprecated: true, security: ADMIN_SECURITY } : {}),
    response: { 200: LoadsAnswer, ...(deprecated ? errorResponses('unauthorized') : errorResponses()) },
  });
  app.get('/loads', { schema: schema(false) }, answer);
  app.get('/get_loads', { schema: schema(true) }, async (req) => {
    // SMG serves /get_loads among its admin routes; the public /loads needs no key.
    if (config.adminKey && !bearerMatches(req.headers.authorization, config.adminKey)) {
      throw new GatewayError('unauthorized', 'missing or wrong admin bearer token');
    }
    return answer();
  });
};

/** Every worker's load, in registry URL order; one engine call per HTTP engine, all at once. */
async function workerLoads(workers: Worker[]): Promise<WorkerLoad[]> {
  const byEngine = new Map<string, Promise<EngineLoads | null>>();
  for (const w of workers) {
    if (w.connectionMode === 'http' && !byEngine.has(w.baseUrl)) byEngine.set(w.baseUrl, engineLoads(w));
  }
  const sorted = [...workers].sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
  return Promise.all(
    sorted.map(async (w): Promise<WorkerLoad> => {
      const engine = w.connectionMode === 'http' ? await byEngine.get(w.baseUrl)! : null;
      const loads = engine?.loads.filter((r) => w.dpRank === null || r.dp_rank === w.dpRank) ?? [];
      if (!engine || loads.length === 0) return { worker: w.url, load: -1 };
      const load = loads.reduce((n, r) => n + r.num_used_tokens, 0);
      return { worker: w.url, load, details: { timestamp: engine.timestamp, dp_rank_count: engine.dpRankCount, loads } };
    }),
  );
}

interface EngineLoads {
  timestamp: string;
  dpRankCount: number;
  loads: RankLoad[];
}

/** One engine's `/v1/loads?include=core`, or null when it cannot be read. */
async function engineLoads(w: Worker): Promise<EngineLoads | null> {
  try {
    const res = await undici().request(`${w.baseUrl}/v1/loads?include=core`, {
      method: 'GET',
      headers: w.apiKey ? { authorization: `Bearer ${w.apiKey}` } : {},
      signal: AbortSignal.timeout(LOAD_TIMEOUT_MS),
    });
    if (res.statusCode < 200 || res.statusCode >= 300) {
      await res.body.dump();
      return null;
    }
    const body = (await res.body.json()) as { timestamp?: unknown; dp_rank_count?: unknown; loads?: unknown };
    if (!Array.isArray(body?.loads)) return null;
    const loads = body.loads.filter((r): r is Record<string, unknown> => typeof r === 'object' && r !== null).map(rankLoad);
    return {
      timestamp: typeof body.timestamp === 'string' ? body.timestamp : '',
      dpRankCount: Number.isInteger(body.dp_rank_count) ? (body.dp_rank_count as number) : loads.length,
      loads,
    };
  } catch {
    return null;
  }
}

function rankLoad(r: Record<string, unknown>): RankLoad {
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  const out = { dp_rank: Number.isInteger(r.dp_rank) ? (r.dp_rank as number) : 0 } as RankLoad;
  for (const k of RANK_FIELDS) out[k] = num(r[k]);
  return out;
}
