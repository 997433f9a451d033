// The ZMQ lane's client, one per worker URL (`ipc://<path>` or
// `tcp://127.0.0.1:<port>`, optionally `@<rank>`): EngineClient (discovery from the handshake,
// local liveness) and TokenEngine (ADD/ABORT, rid-multiplexed outputs on a socket set the DP ranks
// share). It knows nothing of HTTP routes, NATS or labels; RL control goes over the control URL.

import type { EngineClient, EngineFacts } from './engine-client.ts';
import { GenerationError, type TokenEngine, type TokenEvent, type TokenRequest } from './generation.ts';
import { factsFromHandshake } from './zmq/facts.ts';
import type { LaneAddresses } from './zmq/handshake.ts';
import { DuplicateRid, Lane, type LaneOptions } from './zmq/lane.ts';
import { RequestStream } from './zmq/request-stream.ts';
import { encodeAdd, REQ_ADD } from './zmq/wire.ts';

export interface ZmqClientOptions {
  /** The model the worker serves (registration config: the wire never names it). */
  modelId?: string;
  /** `zmq_handshake_address`: a `tcp://` loopback address instead of the FNV-derived port. */
  handshakeAddress?: string;
  /** Output silence with requests in flight that declares the engine dead. Default 300 s. */
  silenceMs?: number;
  /** A send blocked this long fails every in-flight request. Default 10 s. */
  sendStuckMs?: number;
  /** Longest wait for a handshake in discover(), besides the caller's signal. Default 600 s. */
  connectTimeoutMs?: number;
}

const MAX_U32 = 0xffffffff;
/** Sampling fields the ADD payload sends as null (wire.ts): a request setting one is refused. */
const UNCARRIED = ['stop', 'logit_bias', 'structural_tag', 'custom_params'] as const;

/** Socket sets by base URL and handshake address, shared by the DP ranks' clients. */
const lanes = new Map<string, { lane: Lane; refs: number }>();
/** Lanes still letting go of their addresses; a new lane for the same key binds after them. */
const closing = new Map<string, Promise<void>>();

function acquire(key: string, make: () => Lane): Lane {
  const held = lanes.get(key);
  if (held) {
    held.refs++;
    return held.lane;
  }
  const lane = make();
  lanes.set(key, { lane, refs: 1 });
  return lane;
}

async function release(key: string, lane: Lane): Promise<void> {
  const held = lanes.get(key);
  if (!held || held.lane !== lane) return;
  if (--held.refs > 0) return;
  lanes.delete(key);
  const done = lane.close().finally(() => {
    if (closing.get(key) === done) closing.delete(key);
  });
  closing.set(key, done);
  await done;
}

export class ZmqEngineClient implements EngineClient, TokenEngine {
  readonly mode = 'zmq' as const;
  /** The DP rank this worker URL pins (`@<rank>`), or null: least-loaded rank per request. */
  readonly rank: number | null;
  private readonly lane: Lane;
  private readonly key: string;
  private readonly baseUrl: string;
  private released = false;

  constructor(
    readonly url: string,
    private readonly opts: ZmqClientOptions = {},
  ) {
    const m = /@(\d+)$/.exec(url);
    this.rank = m ? Number(m[1]) : null;
    if (this.rank !== null && this.rank > 0xffff) throw new Error(`DP rank ${this.rank} does not fit the 2-byte engine identity`);
    const baseUrl = m ? url.slice(0, m.index) : url;
    const laneOpts: LaneOptions = {
      handshakeAddress: opts.handshakeAddress,
      silenceMs: opts.silenceMs ?? 300_000,
      sendStuckMs: opts.sendStuckMs ?? 10_000,
      undecodableLimit: 3,
    };
    this.baseUrl = baseUrl;
    this.key = `${baseUrl}|${opts.handshakeAddress ?? ''}`;
    this.lane = acquire(this.key, () => new Lane(baseUrl, laneOpts));
  }

  /** Binds the socket set (idempotent). The handshake address is what the engine must dial. */
  async open(): Promise<LaneAddresses> {
    // A lane of the same engine still letting go of its addresses binds first, whatever its
    // handshake address was (the data-plane addresses come from the engine's URL alone).
    await Promise.all([...closing].filter(([key]) => key.startsWith(`${this.baseUrl}|`)).map(([, done]) => done));
    return this.lane.open();
  }

  /** Waits for the engine's handshake, then reports what it carried (no `rl.*` keys, ever). */
  async discover(signal: AbortSignal): Promise<EngineFacts> {
    const timeout = AbortSignal.timeout(this.opts.connectTimeoutMs ?? 600_000);
    await this.open();
    const { rank, ready } = await this.lane.waitRegistered(this.rank, AbortSignal.any([signal, timeout]));
    return factsFromHandshake(ready, rank, this.opts.modelId?.trim() || null);
  }

  /** Local liveness only (the wire has no health RPC): rejects when the engine is gone. */
  async probe(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const why = this.lane.unhealthy(this.rank);
    if (why) throw new Error(why);
  }

  /** The synthesized health answer (the lane has no health RPC). */
  health(): { healthy: boolean; message: string } {
    const why = this.lane.unhealthy(this.rank);
    return why ? { healthy: false, message: why === 'engine core dead' ? why : `engine core dead: ${why}` } : { healthy: true, message: 'ok' };
  }

  async close(): Promise<void> {
    if (this.released) return;
    this.released = true;
    await release(this.key, this.lane);
  }

  generate(req: TokenRequest, signal: AbortSignal): AsyncIterable<TokenEvent> {
    return { [Symbol.asyncIterator]: () => this.run(req, signal) };
  }

  private async *run(req: TokenRequest, signal: AbortSignal): AsyncGenerator<TokenEvent> {
    const invalid = checkRequest(req);
    if (invalid) throw new GenerationError('invalid_argument', invalid, true);
    signal.throwIfAborted();
    const n = req.sampling.n ?? 1;
    // n > 1 is the gateway's fan-out: rids `<rid>-<i>`, seed + i when a seed is set.
    const subs: TokenRequest[] =
      n === 1
        ? [{ ...req, sampling: { ...req.sampling, n: 1 } }]
        : Array.from({ length: n }, (_, i) => ({
            ...req,
            rid: `${req.rid}-${i}`,
            sampling: { ...req.sampling, n: 1, ...(req.sampling.sampling_seed !== undefined ? { sampling_seed: req.sampling.sampling_seed + i } : {}) },
          }));
    const stream = new RequestStream(
      subs.map((s) => s.rid),
      req.stream,
      req.returnLogprob,
    );
    const onAbort = (): void => {
      this.lane.abort(stream.pending());
      stream.fail(signal.reason ?? new DOMException('aborted', 'AbortError'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      for (let i = 0; i < subs.length; i++) {
        const rank = this.lane.pickRank(this.rank);
        if (rank === null) throw stream.unavailable(this.lane.unhealthy(this.rank) ?? 'engine unavailable');
        const index = i;
        try {
          await this.lane.submit(subs[i].rid, REQ_ADD, encodeAdd(subs[i]), {
            rank,
            onOutput: (out) => stream.push(index, out),
            onFail: (message) => stream.fail(stream.unavailable(message)),
          });
        } catch (e) {
          if (e instanceof DuplicateRid) throw new GenerationError('invalid_argument', e.message, true);
          throw stream.unavailable(`send to engine failed: ${(e as Error).message}`);
        }
        if (signal.aborted || stream.settled) break;
      }
      for (;;) {
        const r = await stream.next();
        if (r.done) return;
        yield r.value;
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      // Dropping the stream before its terminal output aborts the rest on the engine:
      // the ZMQ lane sends an ABORT frame for every request still pending.
      const left = stream.pending();
      if (left.length > 0) this.lane.abort(left);
    }
  }
}

/** What the wire cannot carry or the engine would refuse; null when the request is fine. */
function checkRequest(req: TokenRequest): string | null {
  if (typeof req.rid !== 'string' || req.rid.length === 0) return 'rid must be a non-empty string';
  if (!Array.isArray(req.inputIds) || req.inputIds.length === 0) return 'input_ids must be a non-empty list of token ids';
  for (const id of req.inputIds) if (!Number.isInteger(id) || id < 0 || id > MAX_U32) return 'input_ids must be unsigned 32-bit integers';
  if (req.topLogprobsNum > 1) return 'top_logprobs_num > 1 is not supported on the ZMQ lane (only the sampled token logprob)';
  const s = req.sampling;
  const n = s.n ?? 1;
  if (!Number.isInteger(n) || n < 1) return 'n must be a positive integer';
  for (const k of ['max_new_tokens', 'min_new_tokens', 'top_k', 'sampling_seed'] as const) {
    const v = s[k];
    if (v !== undefined && !Number.isSafeInteger(v)) return `${k} must be an integer`;
  }
  for (const k of ['temperature', 'top_p', 'min_p', 'frequency_penalty', 'presence_penalty', 'repetition_penalty'] as const) {
    const v = s[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isFinite(v))) return `${k} must be a finite number`;
  }
  if (s.stop_token_ids)
    for (const id of s.stop_token_ids) if (!Number.isInteger(id) || id < 0 || id > MAX_U32) return 'stop_token_ids must be unsigned 32-bit integers';
  // What encodeAdd would write as null: refused, never dropped (the gateway refuses them earlier).
  for (const k of UNCARRIED) if (s[k] !== undefined) return `${k} is not carried by the ZMQ lane`;
  return null;
}
