// The trainer's part of a gateway-driven distributed refit: size the group from the gateway's
// plan, open it as rank 0, ask the gateway for the refit, and broadcast every chunk while that
// request is outstanding. `runRefit` is that sequence over any way of reaching the gateway;
// `runDistributedRefit` runs it over HTTP (`/v1/rl/refits`), `nats-refit.ts` over NATS.
// It never talks to an engine directly; the gateway does that.

import { request } from 'undici';
import { openGroup, tensorHead, type GroupMaster } from '../../../sim/broadcast/master.ts';
import { decodeValues, tensorBytes } from '../../../sim/broadcast/dtype.ts';
import type { LoadedTensor } from '../../../sim/broadcast/types.ts';
import { GroupError } from '../../../sim/broadcast/wire.ts';
import type { Chunk } from './chunks.ts';
import { followRefitEvents } from './event-stream.ts';

/** The fields of a `GET /v1/rl/workers` row the trainer reads. */
export interface WorkerRow {
  id: string;
  url?: string;
  tp_size: number | null;
  [field: string]: unknown;
}

/** What a refit needs whatever carries it to the gateway. */
export interface RefitOptions {
  /** The new weight version (slime: an integer counter sent as a string). */
  version: string;
  chunks: Chunk[];
  /** Passed through to the gateway, which picks the targets with it. */
  selector?: string;
  /** Sent as `refit_id`: the gateway treats a request with a known id as that refit, never a second one. */
  refitId?: string;
  /** Default `weight_update_group` (SGLang's and TokenSpeed's default). */
  groupName?: string;
  /** Address the group listens on and advertises; default 127.0.0.1. */
  masterAddress?: string;
  /** How long the group waits for every engine rank to join; default 60 s. */
  rendezvousTimeoutMs?: number;
  /** How long one chunk's broadcast may take; default 600 s. */
  chunkTimeoutMs?: number;
  /** Once the gateway has answered, how long to let a still-running broadcast finish; default 2 s. */
  settleMs?: number;
  /**
   * Asks the gateway to read back the first tensor of the first and the last chunk from every
   * engine after the load (`verify_weights`, this many first values): an engine that answered a
   * chunk with 200 without loading it is caught. Off (0) by default.
   */
  verifyValues?: number;
  /**
   * Each event of this refit as it comes (docs/refit-events.md), for a progress view: over NATS
   * from `<root>.refit.<id>.events`, over HTTP from `GET /v1/rl/refits/{id}/events`. Needs
   * `refitId` (the events are followed before the refit is sent, by its id).
   */
  onEvent?: (event: unknown) => void;
}

/** The `verify_weights` entries for a refit: the values the engines must show once loaded. */
export function verifyWeights(chunks: Chunk[], version: string, values: number): Array<{ name: string; values: Array<number | null> }> {
  if (values <= 0 || chunks.length === 0) return [];
  const picks = chunks.length === 1 ? [chunks[0]!] : [chunks[0]!, chunks[chunks.length - 1]!];
  return picks.map((c) => {
    const spec = { name: c.names[0]!, dtype: c.dtypes[0]!, shape: c.shapes[0]! };
    return { name: spec.name, values: decodeValues(spec.dtype, tensorHead(spec.name, version, tensorBytes(spec)), values) };
  });
}

export interface DistributedRefitOptions extends RefitOptions {
  /** Gateway base URL, e.g. `http://127.0.0.1:30000`. */
  gateway: string;
  /** Sent as `authorization: Bearer <adminKey>` on every gateway call. */
  adminKey?: string;
  /**
   * Which listed rows the refit targets, in the order the gateway assigns ranks. Default: the
   * gateway's plan (`dry_run`), which counts exactly the engines that will take part.
   */
  pick?: (rows: WorkerRow[]) => WorkerRow[];
  /** Headers and body deadline of each gateway call; default 600 s (SMG's default control timeout). */
  httpTimeoutMs?: number;
}

/** Where the report came from: the HTTP answer, the NATS reply, the `report` event, `rl.refit.<id>.report`, or the refit's journal. */
export type ReportOrigin = 'http' | 'reply' | 'event' | 'report_subject' | 'journal';

export interface DistributedRefitResult {
  /** HTTP status of `POST /v1/rl/refits` (over NATS: the reply's, or 200/207 from the report). */
  status: number;
  /** The gateway's JSON answer (its text when not JSON). */
  report: unknown;
  from: ReportOrigin;
  /** Checksums of every tensor broadcast, chunk after chunk, in `names` order. */
  sent: LoadedTensor[];
  /** Chunks whose broadcast every engine rank acknowledged. */
  chunksSent: number;
  worldSize: number;
  masterPort: number;
  /** Why the broadcast stopped early; null when every chunk went through. */
  transferError: { code: string; message: string; rank?: number } | null;
}

export type TrainerErrorCode =
  /** The gateway answered, and refused: nothing was touched. */
  | 'workers_listing_failed'
  | 'plan_failed'
  | 'refit_refused'
  /** Nobody answered, or the answer never came: there is no report. */
  | 'no_gateway'
  | 'no_report';

/** The refit was refused, or its report could not be had; `error` is the gateway's error code when it gave one. */
export class TrainerError extends Error {
  override readonly name = 'TrainerError';
  constructor(
    readonly code: TrainerErrorCode,
    message: string,
    readonly status?: number,
    readonly error?: string,
  ) {
    super(message);
  }

  /** The gateway answered and refused the refit (or its plan): nothing was paused or loaded. */
  get refused(): boolean {
    return this.code === 'workers_listing_failed' || this.code === 'plan_failed' || this.code === 'refit_refused';
  }
}

/** The body of `POST /v1/rl/refits` / `rl.refit.request` the trainer sends. */
export type RefitBody = Record<string, unknown>;

/** The two calls of a refit, over whatever reaches the gateway. */
export interface GatewayCalls {
  /** The group's world size from the gateway's plan for `planBody` (`dry_run: true`). */
  worldSize(planBody: RefitBody): Promise<number>;
  /** Sends the refit; resolves once its report is in hand. */
  refit(body: RefitBody): Promise<{ status: number; report: unknown; from: ReportOrigin }>;
}

const DEFAULT_GROUP = 'weight_update_group';

/** One refit over `calls`: plan, group, refit request with every chunk broadcast meanwhile. */
export async function runRefit(opts: RefitOptions, calls: GatewayCalls): Promise<DistributedRefitResult> {
  const groupName = opts.groupName ?? DEFAULT_GROUP;
  const masterAddress = opts.masterAddress ?? '127.0.0.1';
  const source = (port: number, worldSize?: number) => ({
    kind: 'distributed',
    master_address: masterAddress,
    master_port: port,
    ...(worldSize === undefined ? {} : { world_size: worldSize }),
    group_name: groupName,
    backend: 'nccl',
    chunks: opts.chunks,
  });
  const checks = verifyWeights(opts.chunks, opts.version, opts.verifyValues ?? 0);
  const head = {
    ...(opts.refitId === undefined ? {} : { refit_id: opts.refitId }),
    weight_version: opts.version,
    ...(opts.selector === undefined ? {} : { selector: opts.selector }),
    ...(checks.length > 0 ? { verify_weights: checks } : {}),
  };
  // The gateway's own plan: only the engines that will take part (a dead one is skipped) count.
  const worldSize = await calls.worldSize({ ...head, dry_run: true, source: source(1) });
  const master = await openGroup({
    host: masterAddress,
    port: 0,
    worldSize,
    groupName,
    timeoutMs: opts.rendezvousTimeoutMs ?? 60_000,
  });

  const sent: LoadedTensor[] = [];
  let chunksSent = 0;
  const transfer = broadcastChunks(master, opts.chunks, opts.version, opts.chunkTimeoutMs ?? 600_000, (tensors) => {
    sent.push(...tensors);
    chunksSent++;
  });
  let settled = false;
  const outcome = transfer.then(
    () => {
      settled = true;
      return null;
    },
    (err: unknown) => {
      settled = true;
      return errorInfo(err);
    },
  );

  let answer: { status: number; report: unknown; from: ReportOrigin };
  try {
    answer = await calls.refit({ ...head, source: source(master.port, worldSize) });
  } catch (err) {
    master.close();
    await outcome;
    throw err;
  }
  // The engines' acks and the gateway's answer travel on different connections: give the last
  // acks a moment to land before closing the group (a finished transfer does not wait).
  if (!settled) await waitAtMost(outcome, opts.settleMs ?? 2_000);
  master.close();
  return {
    status: answer.status,
    report: answer.report,
    from: answer.from,
    sent,
    chunksSent,
    worldSize,
    masterPort: master.port,
    transferError: await outcome,
  };
}

/** One refit through the gateway's HTTP API (`/v1/rl/refits`). */
export async function runDistributedRefit(opts: DistributedRefitOptions): Promise<DistributedRefitResult> {
  const gateway = opts.gateway.replace(/\/+$/, '');
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.adminKey) headers.authorization = `Bearer ${opts.adminKey}`;
  const httpTimeoutMs = opts.httpTimeoutMs ?? 600_000;
  const call = async (method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    const res = await request(`${gateway}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      headersTimeout: httpTimeoutMs,
      bodyTimeout: httpTimeoutMs,
    });
    const text = await res.body.text();
    let json: unknown = text;
    try {
      json = JSON.parse(text);
    } catch {
      /* keep the text */
    }
    return { status: res.statusCode, json };
  };
  const errorOf = (json: unknown): string | undefined => {
    const e = (json as { error?: unknown } | null)?.error;
    return typeof e === 'string' ? e : undefined;
  };

  return runRefit(opts, {
    async worldSize(planBody) {
      if (opts.pick) {
        const listing = await call('GET', '/v1/rl/workers');
        const rows = (listing.json as { workers?: unknown } | null)?.workers;
        if (listing.status !== 200 || !Array.isArray(rows)) {
          throw new TrainerError(
            'workers_listing_failed',
            `GET /v1/rl/workers answered ${listing.status}: ${JSON.stringify(listing.json).slice(0, 300)}`,
            listing.status,
            errorOf(listing.json),
          );
        }
        // The NCCL group is the trainer plus every engine GPU: world_size = 1 + Σ gpus; a row
        // without tp_size is one GPU.
        return 1 + opts.pick(rows as WorkerRow[]).reduce((sum, row) => sum + (row.tp_size ?? 1), 0);
      }
      const plan = await call('POST', '/v1/rl/refits', planBody);
      const ws = (plan.json as { world_size?: unknown } | null)?.world_size;
      if (plan.status !== 200 || typeof ws !== 'number') {
        throw new TrainerError(
          'plan_failed',
          `the refit plan (dry_run) answered ${plan.status}: ${JSON.stringify(plan.json).slice(0, 300)}`,
          plan.status,
          errorOf(plan.json),
        );
      }
      return ws;
    },
    async refit(body) {
      // The refit's events, followed while its POST is outstanding (the route answers once the
      // refit is queued), and given a moment after the answer to deliver their last ones.
      const id = body.refit_id;
      const stop = new AbortController();
      const following =
        opts.onEvent && typeof id === 'string'
          ? followRefitEvents({
              gateway,
              refitId: id,
              headers: opts.adminKey ? { authorization: headers.authorization! } : {},
              onEvent: opts.onEvent,
              signal: stop.signal,
            })
          : undefined;
      try {
        const answer = await call('POST', '/v1/rl/refits', body);
        if (following && answer.status < 300) await waitAtMost(following, opts.settleMs ?? 2_000);
        return { status: answer.status, report: answer.json, from: 'http' };
      } finally {
        stop.abort();
        await following;
      }
    },
  });
}

async function broadcastChunks(master: GroupMaster, chunks: Chunk[], version: string, timeoutMs: number, onChunk: (t: LoadedTensor[]) => void): Promise<void> {
  await master.ready;
  for (const chunk of chunks) {
    const tensors = chunk.names.map((name, i) => ({ name, dtype: chunk.dtypes[i]!, shape: chunk.shapes[i]! }));
    onChunk(await master.broadcast(tensors, { version, timeoutMs }));
  }
}

function errorInfo(err: unknown): { code: string; message: string; rank?: number } {
  if (err instanceof GroupError) return { code: err.code, message: err.message, ...(err.rank === undefined ? {} : { rank: err.rank }) };
  return { code: 'internal_error', message: err instanceof Error ? err.message : String(err) };
}

async function waitAtMost(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
