// One ZMQ socket set and the engines (DP ranks) dialled into it: binds
// the three sockets, runs each rank's handshake and registration, routes output batches to request
// sinks by rid, and decides liveness (sentinel, socket failure, silence, stuck send, undecodable
// outputs, disconnects). It knows rids and bytes, never TokenRequest shapes or HTTP.

import { lstat, mkdir, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Pull, Router } from 'zeromq';
import { zeromq } from '../libraries.ts';
import {
  bindable,
  decodeEngineReady,
  decodeReadyStatus,
  encodeInit,
  engineIdentity,
  laneAddresses,
  rankOf,
  type EngineReady,
  type LaneAddresses,
} from './handshake.ts';
import { Outbox } from './outbox.ts';
import { decodeOutput, encodeAbort, isDeadSentinel, REQ_ABORT, WireError, type RankLoad, type RequestOutput } from './wire.ts';

export interface LaneOptions {
  /** Overrides the FNV-derived handshake address (`tcp://` only; port 0 = any free port). */
  handshakeAddress?: string;
  /** Output silence with requests in flight before the lane is dead (SMG: 300 s). */
  silenceMs: number;
  /** A send blocked this long is fatal for every in-flight request (SMG: 10 s). */
  sendStuckMs: number;
  /** Consecutive undecodable outputs before the lane is dead (SMG: 3). */
  undecodableLimit: number;
}

/** Where one request's outputs go. Called synchronously from the output loop. */
export interface Sink {
  rank: number;
  onOutput(out: RequestOutput): void;
  /** The engine is gone; the sink is already unregistered. */
  onFail(message: string): void;
}

interface Rank {
  rank: number;
  identity: Buffer;
  phase: 'hello' | 'registered' | 'dead';
  ready: EngineReady | null;
  load: RankLoad | null;
  inflight: Set<string>;
  deadReason: string | null;
}

interface Waiter {
  rank: number | null;
  resolve: (r: { rank: number; ready: EngineReady }) => void;
  reject: (e: Error) => void;
}

const EMPTY_ABORT = encodeAbort([]);
/** Re-checks after a disconnect event: libzmq drops the peer's pipe a few ms after the event. */
const SWEEP_DELAYS_MS = [10, 50, 200, 1000, 5000];

export class Lane {
  private readonly planned: LaneAddresses;
  private bound: Promise<LaneAddresses> | null = null;
  private handshakeSock: Router | null = null;
  private inputSock: Router | null = null;
  private outputSock: Pull | null = null;
  private outbox: Outbox | null = null;
  private readonly ranks = new Map<number, Rank>();
  private readonly sinks = new Map<string, Sink>();
  private waiters: Waiter[] = [];
  private undecodable = 0;
  private lastActivity = Date.now();
  private watchdog: NodeJS.Timeout | null = null;
  private closed = false;
  /** Why the lane last failed, for probes and health answers. */
  lastError: string | null = null;

  constructor(
    baseUrl: string,
    private readonly opts: LaneOptions,
  ) {
    this.planned = laneAddresses(baseUrl, opts.handshakeAddress);
  }

  /** Binds the three sockets once and starts the loops; resolves with the bound addresses. */
  open(): Promise<LaneAddresses> {
    this.bound ??= this.bind().catch(async (e: unknown) => {
      this.bound = null; // a later discovery may retry (e.g. the port was busy)
      await this.closeSockets();
      throw e;
    });
    return this.bound;
  }

  private async bind(): Promise<LaneAddresses> {
    if (this.closed) throw new Error('ZMQ lane is closed');
    for (const path of this.planned.ipcPaths) await prepareIpcPath(path);
    // Never block inside libzmq: the outbox retries EAGAIN itself (see outbox.ts).
    const { Pull, Router } = zeromq();
    const input = new Router({ linger: 0, mandatory: true, handover: true, sendTimeout: 0 });
    const output = new Pull({ linger: 0, receiveHighWaterMark: 0 });
    const handshake = new Router({ linger: 0, handover: true });
    this.inputSock = input;
    this.outputSock = output;
    this.handshakeSock = handshake;
    // Data-plane sockets first, so every INIT names addresses that already exist.
    await input.bind(bindable(this.planned.input));
    await output.bind(bindable(this.planned.output));
    await handshake.bind(bindable(this.planned.handshake));
    const addresses: LaneAddresses = {
      handshake: handshake.lastEndpoint ?? this.planned.handshake,
      input: input.lastEndpoint ?? this.planned.input,
      output: output.lastEndpoint ?? this.planned.output,
      ipcPaths: this.planned.ipcPaths,
    };
    this.outbox = new Outbox(input, this.opts.sendStuckMs, (e) => this.laneDead(e.message));
    input.events.on('disconnect', () => this.sweep());
    output.events.on('disconnect', () => this.sweep());
    const init = encodeInit(addresses.input, addresses.output);
    void this.handshakeLoop(handshake, init);
    void this.registrationLoop(input);
    void this.outputLoop(output);
    return addresses;
  }

  // --- handshake -------------------------------------------------------------------------

  private async handshakeLoop(sock: Router, init: Buffer): Promise<void> {
    try {
      for await (const frames of sock) {
        if (frames.length !== 2) continue;
        const [identity, payload] = frames;
        const rank = rankOf(identity);
        if (rank === null) continue; // not an engine identity: ignore rather than guess
        let status: string | null;
        try {
          status = decodeReadyStatus(payload);
        } catch (e) {
          this.lastError = `rank ${rank}: ${(e as Error).message}`;
          this.rejectWaiters(rank, new Error(this.lastError));
          continue;
        }
        if (status === 'HELLO') {
          const prev = this.ranks.get(rank);
          // A HELLO from a registered rank is a restarted engine: its old requests are gone.
          if (prev && prev.phase === 'registered') this.rankDead(prev, 'engine restarted (new HELLO)');
          this.ranks.set(rank, { rank, identity: Buffer.from(identity), phase: 'hello', ready: null, load: null, inflight: new Set(), deadReason: null });
          await sock.send([identity, init]);
        }
        // READY may overlap HELLO and carries nothing the gateway needs: the input registration
        // is what makes a rank usable.
      }
    } catch (e) {
      if (!this.closed) this.laneDead(`handshake socket failed: ${(e as Error).message}`);
    }
  }

  private async registrationLoop(sock: Router): Promise<void> {
    try {
      for await (const frames of sock) {
        const rank = frames.length === 2 ? rankOf(frames[0]) : null;
        const r = rank === null ? undefined : this.ranks.get(rank);
        if (!r || r.phase !== 'hello') continue; // engines send nothing else on the input socket
        try {
          r.ready = decodeEngineReady(frames[1]);
        } catch (e) {
          this.lastError = `rank ${r.rank}: ${(e as Error).message}`;
          this.rejectWaiters(r.rank, new Error(this.lastError));
          continue;
        }
        r.phase = 'registered';
        this.outbox?.reset();
        const ready = r.ready;
        this.waiters = this.waiters.filter((w) => {
          if (w.rank !== null && w.rank !== r.rank) return true;
          w.resolve({ rank: r.rank, ready });
          return false;
        });
      }
    } catch (e) {
      if (!this.closed) this.laneDead(`input socket failed: ${(e as Error).message}`);
    }
  }

  /** Resolves once `rank` (or, for null, any rank) is registered; rejects on `signal`. */
  async waitRegistered(rank: number | null, signal: AbortSignal): Promise<{ rank: number; ready: EngineReady }> {
    await this.open();
    const now = this.registered(rank);
    if (now) return { rank: now.rank, ready: now.ready! };
    signal.throwIfAborted();
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        rank,
        resolve: (v) => {
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        reject: (e) => {
          signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      const onAbort = (): void => {
        this.waiters = this.waiters.filter((x) => x !== w);
        reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(w);
    });
  }

  private rejectWaiters(rank: number | null, e: Error): void {
    this.waiters = this.waiters.filter((w) => {
      if (rank !== null && w.rank !== null && w.rank !== rank) return true;
      w.reject(e);
      return false;
    });
  }

  /** The registered rank `rank`, or for null the lowest registered rank. */
  registered(rank: number | null): Rank | null {
    if (rank !== null) {
      const r = this.ranks.get(rank);
      return r && r.phase === 'registered' ? r : null;
    }
    let best: Rank | null = null;
    for (const r of this.ranks.values()) if (r.phase === 'registered' && (!best || r.rank < best.rank)) best = r;
    return best;
  }

  /** A pinned rank if registered; else the least-loaded registered rank (own in-flight as floor). */
  pickRank(pinned: number | null): number | null {
    if (pinned !== null) return this.registered(pinned)?.rank ?? null;
    let best: Rank | null = null;
    let bestScore = Infinity;
    for (const r of this.ranks.values()) {
      if (r.phase !== 'registered') continue;
      const reported = r.load ? r.load.running + r.load.waiting : 0;
      const score = Math.max(r.inflight.size, reported);
      if (score < bestScore) {
        best = r;
        bestScore = score;
      }
    }
    return best?.rank ?? null;
  }

  /** Why `rank` (or the lane) cannot serve, or null when it can. */
  unhealthy(rank: number | null): string | null {
    if (this.registered(rank)) return null;
    const r = rank === null ? null : this.ranks.get(rank);
    return r?.deadReason ?? this.lastError ?? (rank === null ? 'no engine has completed the handshake' : `engine rank ${rank} has not completed the handshake`);
  }

  // --- data plane ------------------------------------------------------------------------

  /** Registers `sink` under `rid` and sends `[identity, type, payload]` to its rank. */
  async submit(rid: string, type: Buffer, payload: Buffer, sink: Sink): Promise<void> {
    const r = this.registered(sink.rank);
    if (!r || !this.outbox) throw new Error(this.unhealthy(sink.rank) ?? 'engine unavailable');
    if (this.sinks.has(rid)) throw new DuplicateRid(rid);
    if (this.sinks.size === 0) this.lastActivity = Date.now(); // silence counts from this dispatch
    this.sinks.set(rid, sink);
    r.inflight.add(rid);
    this.armWatchdog();
    try {
      await this.outbox.send([r.identity, type, payload], { alive: () => r.phase === 'registered' });
    } catch (e) {
      this.forget(rid);
      if ((e as { code?: string }).code === 'EHOSTUNREACH') this.rankDead(r, 'engine disconnected');
      throw e;
    }
  }

  /** Forgets `rids` and sends one ABORT per rank for those still in flight. */
  abort(rids: readonly string[]): void {
    const byRank = new Map<number, string[]>();
    for (const rid of rids) {
      const sink = this.sinks.get(rid);
      if (!sink) continue;
      this.forget(rid);
      const list = byRank.get(sink.rank) ?? [];
      list.push(rid);
      byRank.set(sink.rank, list);
    }
    for (const [rank, list] of byRank) {
      const r = this.ranks.get(rank);
      if (r && r.phase === 'registered' && this.outbox) {
        this.outbox.send([r.identity, REQ_ABORT, encodeAbort(list)], { alive: () => r.phase === 'registered' }).catch(() => {});
      }
    }
  }

  private forget(rid: string): void {
    const sink = this.sinks.get(rid);
    if (!sink) return;
    this.sinks.delete(rid);
    this.ranks.get(sink.rank)?.inflight.delete(rid);
  }

  get inFlight(): number {
    return this.sinks.size;
  }

  private async outputLoop(sock: Pull): Promise<void> {
    try {
      for await (const frames of sock) {
        this.lastActivity = Date.now();
        if (isDeadSentinel(frames)) {
          this.laneDead('engine core dead');
          continue;
        }
        let batch;
        try {
          if (frames.length === 0) throw new WireError('empty output message');
          batch = decodeOutput(frames[0]);
        } catch (e) {
          this.lastError = (e as Error).message;
          if (++this.undecodable >= this.opts.undecodableLimit) this.laneDead(`${this.undecodable} consecutive undecodable outputs (${this.lastError})`);
          continue;
        }
        this.undecodable = 0;
        const r = this.ranks.get(batch.engineIndex);
        if (r && batch.load) r.load = batch.load;
        for (const out of batch.outputs) {
          const sink = this.sinks.get(out.rid);
          if (!sink) continue; // finished, aborted or never ours: dropped
          if (out.finished !== '') this.forget(out.rid);
          sink.onOutput(out);
        }
      }
    } catch (e) {
      if (!this.closed) this.laneDead(`output socket failed: ${(e as Error).message}`);
    }
  }

  // --- liveness --------------------------------------------------------------------------

  private armWatchdog(): void {
    if (this.watchdog) return;
    const every = Math.max(10, Math.min(1000, Math.floor(this.opts.silenceMs / 4)));
    this.watchdog = setInterval(() => {
      if (this.sinks.size === 0) {
        clearInterval(this.watchdog!);
        this.watchdog = null;
        return;
      }
      const quiet = Date.now() - this.lastActivity;
      if (quiet > this.opts.silenceMs) this.laneDead(`no output for ${quiet} ms with ${this.sinks.size} requests in flight`);
    }, every);
    this.watchdog.unref();
  }

  /** After a disconnect: a rank whose identity no longer routes (EHOSTUNREACH) is gone. */
  private sweep(): void {
    for (const delay of SWEEP_DELAYS_MS) {
      setTimeout(() => {
        if (this.closed || !this.outbox) return;
        for (const r of this.ranks.values()) {
          if (r.phase !== 'registered') continue;
          // An empty ABORT list is a no-op for the engine: a reachability check, not a command.
          this.outbox.send([r.identity, REQ_ABORT, EMPTY_ABORT], { probe: true }).catch((e: { code?: string }) => {
            if (e.code === 'EHOSTUNREACH' && r.phase === 'registered') this.rankDead(r, 'engine disconnected');
          });
        }
      }, delay).unref();
    }
  }

  private rankDead(r: Rank, reason: string): void {
    r.phase = 'dead';
    r.deadReason = reason;
    r.load = null;
    this.lastError = reason;
    for (const rid of [...r.inflight]) {
      const sink = this.sinks.get(rid);
      this.forget(rid);
      sink?.onFail(reason);
    }
  }

  /** Every rank is dead and every in-flight request fails; a new HELLO can revive a rank. */
  private laneDead(reason: string): void {
    this.lastError = reason;
    for (const r of this.ranks.values()) if (r.phase !== 'dead') this.rankDead(r, reason);
    for (const [rid, sink] of [...this.sinks]) {
      this.forget(rid);
      sink.onFail(reason);
    }
  }

  /** Resolves once libzmq has let go of the addresses (ipc files unlinked, ports free). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.watchdog) clearInterval(this.watchdog);
    this.laneDead('ZMQ client closed');
    this.rejectWaiters(null, new Error('ZMQ client closed'));
    this.outbox?.close(new Error('ZMQ client closed'));
    await this.closeSockets();
  }

  private closeSockets(): Promise<void> {
    const ends: Promise<void>[] = [];
    for (const s of [this.handshakeSock, this.inputSock, this.outputSock]) {
      if (!s || s.closed) continue;
      // The observer ends after the listener closed (and unlinked its ipc file): a lane bound to
      // the same addresses next must not race the old one's unlink.
      ends.push(
        new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 1000);
          t.unref();
          s.events.on('end', () => {
            clearTimeout(t);
            resolve();
          });
        }),
      );
      s.close();
    }
    this.handshakeSock = this.inputSock = null;
    this.outputSock = null;
    return Promise.all(ends).then(() => undefined);
  }
}

export class DuplicateRid extends Error {
  override readonly name = 'DuplicateRid';
  constructor(readonly rid: string) {
    super(`request id \`${rid}\` is already in flight on this engine`);
  }
}

/**
 * The socket directory must be ours (unauthenticated sockets): created 0700 when
 * missing, refused when owned by another uid. A socket file left by a dead gateway is unlinked;
 * anything else at the path is refused.
 */
async function prepareIpcPath(path: string): Promise<void> {
  const dir = dirname(path);
  const st = await lstat(dir).catch(() => null);
  if (!st) await mkdir(dir, { recursive: true, mode: 0o700 });
  else if (!st.isDirectory()) throw new Error(`ipc socket dir ${dir} is not a directory`);
  else if (typeof process.getuid === 'function' && st.uid !== process.getuid()) {
    throw new Error(`ipc socket dir ${dir} is owned by uid ${st.uid}, not ${process.getuid()}; refusing to bind unauthenticated sockets there`);
  }
  const f = await lstat(path).catch(() => null);
  if (!f) return;
  if (!f.isSocket()) throw new Error(`ipc socket path ${path} exists and is not a socket; refusing to unlink it`);
  await unlink(path);
}
