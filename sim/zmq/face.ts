// The ZMQ face of a simulated TokenSpeed engine, in place of the gRPC servicer: ADD frames become
// Sequences of the shared TsEngine (sim/tokenspeed), ABORTs abort them, each scheduler step's
// progress goes out as one BatchTokenIDOutSlim batch; plus lane faults and records of what came
// in. Scheduling, pause modes and the control app are the TsEngine's, never this file's.

import { crc32 } from 'node:zlib';
import { abortFinish, Sequence } from '../core/sequence.ts';
import { seedOf } from '../core/tokens.ts';
import { MAX_TOTAL_TOKENS, type TsEngine } from '../tokenspeed/engine.ts';
import { choiceSeed, logprobAt, tokenAt } from '../tokenspeed/sampler.ts';
import { STANDING, type SimFault } from './faults.ts';
import type { Link } from './link.ts';
import { BadFrame, decodeAbort, decodeAdd, encodeBatch, refusal, REQ_ABORT, REQ_ADD, type AddRequest, type OutRow } from './wire.ts';

/** Tokens per KV page (`prefix_granularity`) and the pages the simulated pool holds. */
export const PAGE_SIZE = 64;
export const KV_TOTAL_PAGES = Math.ceil(MAX_TOTAL_TOKENS / PAGE_SIZE);
/** TokenSpeed's default when a request sends no max_new_tokens. */
const DEFAULT_MAX_NEW_TOKENS = 128;
const RECORD_LIMIT = 10_000;

/** An ADD as the engine decoded it, for tests that check what crossed the wire. */
export interface AddRecord extends AddRequest {
  seq: number;
  time: string;
  refused: string | null;
}

interface Live {
  seq: Sequence;
  req: AddRequest;
  /** Tokens already pushed to the gateway. */
  sent: number;
}

/** FNV-1a (32-bit) of the weight version: mixed into the sampler seed, so a refit changes tokens. */
function versionSalt(version: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < version.length; i++) h = Math.imul(h ^ version.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

export class ZmqFace {
  readonly adds: AddRecord[] = [];
  /** Rids named by the gateway's ABORT frames (its empty reachability checks are not recorded). */
  readonly gatewayAborts: string[] = [];
  malformed = 0;
  lastMalformed: string | null = null;
  droppedAdds = 0;
  dead = false;
  private standing: SimFault[] = [];
  private raggedLeft = 0;
  private addSeq = 0;
  private readonly live = new Map<string, Live>();
  /** Requests with progress not yet pushed; flushed once per scheduler step. */
  private readonly dirty = new Set<Live>();
  private refused: OutRow[] = [];
  private flushing: NodeJS.Immediate | null = null;

  constructor(
    private readonly engine: TsEngine,
    private readonly link: Link,
    private readonly rank: number,
    private readonly exit: (code: number) => void,
  ) {}

  /** Every request frame after registration: `[request_type, payload, aux...]`. */
  onRequest(frames: Buffer[]): void {
    if (this.dead) return;
    if (frames.length < 2 || frames[0].length !== 1) return this.bad(`request has ${frames.length} frames or a bad type frame`);
    try {
      if (frames[0][0] === REQ_ADD) this.add(decodeAdd(frames[1]));
      else if (frames[0][0] === REQ_ABORT) this.abortFromGateway(decodeAbort(frames[1]));
      else this.bad(`unknown request type 0x${frames[0][0].toString(16)}`);
    } catch (e) {
      if (!(e instanceof BadFrame)) throw e;
      this.bad(e.message); // TokenSpeed logs and drops a frame it cannot decode
    }
  }

  private bad(message: string): void {
    this.malformed++;
    this.lastMalformed = message;
  }

  private add(req: AddRequest): void {
    if (this.has('drop_adds')) {
      this.droppedAdds++;
      return;
    }
    if (this.live.has(req.rid) || this.engine.scheduler.isLive(req.rid)) return this.bad(`duplicate rid ${req.rid}`);
    const why = this.engine.shuttingDown ? 'engine is shutting down' : refusal(req, this.engine.opts.contextLength);
    this.adds.push({ ...req, seq: ++this.addSeq, time: new Date().toISOString(), refused: why });
    if (this.adds.length > RECORD_LIMIT) this.adds.splice(0, this.adds.length - RECORD_LIMIT);
    if (why) {
      // A refused request still ends on the wire: one terminal abort output (validation_error).
      this.refused.push({
        rid: req.rid,
        outputIds: [],
        finished: 'abort',
        promptTokens: req.inputIds.length,
        completionTokens: 0,
        cachedTokens: 0,
        logprobs: [],
      });
      return this.schedule();
    }
    const s = req.sampling;
    const greedy = s.topK === 1;
    // resolve_seed: a missing seed is the CRC-32 of the rid.
    const seed = s.seed ?? crc32(Buffer.from(req.rid, 'utf8')) >>> 0;
    const room = this.engine.opts.contextLength - req.inputIds.length;
    const seq = new Sequence(
      {
        rid: req.rid,
        promptIds: req.inputIds,
        promptHash: seedOf(req.inputIds, 0),
        seed: (choiceSeed(req.inputIds, 0, BigInt(seed), greedy) ^ versionSalt(this.engine.weightVersion)) >>> 0,
        maxNewTokens: Math.max(0, Math.min(s.maxNewTokens ?? DEFAULT_MAX_NEW_TOKENS, room)),
        minNewTokens: s.minNewTokens,
        stopTokenIds: s.stopTokenIds ? new Set(s.stopTokenIds) : null,
        stopStrings: null, // string stops never cross this wire
        noStopTrim: false,
        ignoreEos: s.ignoreEos,
        dpRank: 0,
      },
      tokenAt,
    );
    const entry: Live = { seq, req, sent: 0 };
    this.live.set(req.rid, entry);
    seq.onUpdate = () => {
      this.dirty.add(entry);
      this.schedule();
    };
    this.engine.scheduler.submit([seq]);
  }

  private abortFromGateway(rids: string[]): void {
    if (rids.length === 0) return; // the gateway's reachability check: a no-op
    for (const rid of rids) this.gatewayAborts.push(rid);
    if (this.gatewayAborts.length > RECORD_LIMIT) this.gatewayAborts.splice(0, this.gatewayAborts.length - RECORD_LIMIT);
    const set = new Set(rids);
    this.engine.scheduler.abortWhere((rid) => set.has(rid), abortFinish('Aborted by the frontend'));
  }

  /** One batch per scheduler step: progress reported in the same tick goes out together. */
  private schedule(): void {
    this.flushing ??= setImmediate(() => {
      this.flushing = null;
      this.flush();
    });
  }

  private flush(): void {
    if (this.dead || this.has('stall')) return; // stalled: progress waits, the wire stays silent
    const rows = this.refused;
    this.refused = [];
    for (const entry of this.dirty) {
      const { seq, req } = entry;
      const f = seq.finish;
      if (!f && !req.stream) continue; // non-streamed requests report once, at the end
      if (!f && seq.outputIds.length === entry.sent) continue;
      const from = entry.sent;
      entry.sent = seq.outputIds.length;
      const ids = seq.outputIds.slice(from);
      rows.push({
        rid: seq.rid,
        outputIds: ids,
        finished: f ? f.type : '',
        promptTokens: seq.params.promptIds.length,
        completionTokens: seq.outputIds.length,
        cachedTokens: seq.cachedTokens,
        logprobs: req.returnLogprob ? ids.map((_, i) => logprobAt(seq.params.seed, from + i)) : [],
      });
      if (f) this.live.delete(seq.rid);
    }
    this.dirty.clear();
    if (rows.length === 0) return;
    const ragged = this.raggedLeft > 0;
    if (ragged && --this.raggedLeft === 0) this.standing = this.standing.filter((x) => x.kind !== 'ragged');
    const r = this.engine.scheduler.countsByRank()[0] ?? { running: 0, waiting: 0, tokens: 0 };
    this.link.push([
      encodeBatch(
        rows,
        this.rank,
        { running: r.running, waiting: r.waiting, kvActivePages: Math.ceil(r.tokens / PAGE_SIZE), kvTotalPages: KV_TOTAL_PAGES },
        ragged,
      ),
    ]);
  }

  private has(kind: SimFault['kind']): boolean {
    return this.standing.some((f) => f.kind === kind);
  }

  /** Performs a one-shot fault now, or keeps a standing one until cleared. */
  applyFault(f: SimFault): void {
    if (STANDING.has(f.kind)) this.standing.push(f);
    switch (f.kind) {
      case 'ragged':
        this.raggedLeft += f.times ?? 1;
        break;
      case 'garbage':
        for (let i = 0; i < (f.count ?? 1); i++) this.link.push([Buffer.from([0xc1, 0xff, 0x00])]);
        break;
      case 'dead':
        this.link.die();
        this.dead = true;
        break;
      case 'engine_abort': {
        const finish = abortFinish('Aborted by the engine');
        this.engine.scheduler.abortWhere((rid) => f.rid === undefined || rid === f.rid, finish);
        break;
      }
      case 'exit':
        this.exit(f.code ?? 1);
        break;
      case 'stall':
      case 'drop_adds':
        break;
    }
  }

  faults(): SimFault[] {
    return [...this.standing];
  }

  clearFaults(): void {
    this.standing = [];
    this.raggedLeft = 0;
    this.schedule(); // progress held by a stall goes out now
  }

  state(): Record<string, unknown> {
    return {
      rank: this.rank,
      link: this.link.phase,
      linkAddresses: this.link.addresses,
      linkError: this.link.error,
      dead: this.dead,
      live: this.live.size,
      addsSeen: this.addSeq,
      gatewayAborts: this.gatewayAborts.length,
      malformed: this.malformed,
      lastMalformed: this.lastMalformed,
      droppedAdds: this.droppedAdds,
      faults: this.faults(),
    };
  }

  close(): void {
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = null;
  }
}
