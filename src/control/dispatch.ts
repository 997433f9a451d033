// Sends control calls to the replicas that own the engines: one NATS request per single-engine
// call (`rl.engine.<id>.cmd`), and ONE request per owning replica for a fan-out
// (`rl.replica.<id>.cmd`), whose replies stream back one per leg. Bus failures become per-leg
// outcomes, so a dead replica reads like a dead engine to the caller, never like a 500; a bus that
// is down marks its outcomes `bus_unavailable`, so callers can tell "NATS is gone" from "the engine is".
// Both fail at once while NATS is disconnected (connection.ts refuses to queue them).

import { randomUUID } from 'node:crypto';
import { BusNoResponders, BusTimeout, BusUnavailable, type Bus } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { Registry } from '../fleet/registry.ts';
import type { LeaseFence } from '../fleet/lease-fence.ts';
import type { ControlCall, ControlOutcome, EngineCommand } from '../wire/control-call.ts';
import type { LegReply, ReplicaCommand, ShareOutcomes, ShareRef } from '../wire/replica-share.ts';

export interface Leg {
  workerId: string;
  call: ControlCall;
}

/** Packs legs into a ReplicaCommand, sharing identical call objects. */
export function packLegs(requestId: string, legs: Leg[], concurrency: number): ReplicaCommand {
  const calls: ControlCall[] = [];
  const index = new Map<ControlCall, number>();
  const packed = legs.map((leg) => {
    let i = index.get(leg.call);
    if (i === undefined) {
      i = calls.push(leg.call) - 1;
      index.set(leg.call, i);
    }
    return { workerId: leg.workerId, call: i };
  });
  return { requestId, calls, legs: packed, concurrency };
}

/** Slack for the bus hop on top of the engine call's own deadline. */
const BUS_MARGIN_MS = 2_000;

/**
 * This replica's own engines, called in-process: no bus round trip for a share this replica
 * owns, and a call already sent is not lost if the bus drops meanwhile.
 */
export interface LocalEngines {
  replicaId: string;
  runOne(workerId: string, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome>;
  runShare(cmd: ReplicaCommand, send: (reply: LegReply) => void, signal?: AbortSignal): Promise<void>;
}

/** How often a caller that lost its replies in an outage asks the owner for them. */
const SETTLE_POLL_MS = 200;
/** Pause before a leg refused by a replica that no longer owns its engine is sent again. */
const REROUTE_MS = 200;
/** How long an owner may stay off the bus after the caller is back before its legs are given up. */
const OWNER_RETURN_MS = 10_000;
/** How often a share's owner is checked for life while its replies are awaited. */
const OWNER_CHECK_MS = 500;

export class Dispatcher {
  constructor(
    private readonly deps: {
      bus: Bus;
      subjects: Subjects;
      registry: Registry;
      local?: LocalEngines;
      /**
       * Is this replica alive (its heartbeat fresh, ownership.ts)? A share sent to a replica that
       * dies is given up when its lease runs out, not at its calls' deadline (minutes for a load).
       */
      alive?: (replica: string) => Promise<boolean>;
      /** This replica's lease fence: while it is closed, its own engines are not called. */
      fence?: LeaseFence;
    },
  ) {}

  /** The outcome of a call to one of this replica's own engines while its fence is closed. */
  private fenced(url: string): ControlOutcome | undefined {
    const reason = this.deps.fence?.reason();
    if (reason == null) return undefined;
    return { kind: 'unreachable', code: 'bus_unavailable', fenced: true, latencyMs: 0, message: `upstream \`${url}\` not called: ${reason}` };
  }

  async one(workerId: string, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    const worker = this.deps.registry.get(workerId);
    const url = worker?.url ?? workerId;
    if (this.isLocal(worker?.owner)) {
      // Ownership is only as sure as the bus: without it, another replica may have taken over.
      // The fence says so first (it is closed while the bus is down): a refusal the caller may send again.
      const fenced = this.fenced(url);
      if (fenced) return fenced;
      if (!this.deps.bus.connected) return busFailure(new BusUnavailable(this.deps.subjects.engineCmd(workerId)), url, call);
      try {
        return await this.deps.local!.runOne(workerId, call, signal);
      } catch (err) {
        return { kind: 'unreachable', latencyMs: 0, message: (err as Error).message };
      }
    }
    const timeoutMs = Math.max(1, call.deadline - Date.now()) + BUS_MARGIN_MS;
    const requestId = randomUUID();
    const stopCancel = this.cancelOnAbort(signal, worker?.owner, requestId);
    try {
      const pending = this.deps.bus.request<ControlOutcome>(this.deps.subjects.engineCmd(workerId), { call, requestId } satisfies EngineCommand, timeoutMs);
      return signal ? await abortable(pending, signal) : await pending;
    } catch (err) {
      return busFailure(err, url, call);
    } finally {
      stopCancel();
    }
  }

  /**
   * Runs every leg on its owner replica, at most `concurrency` at a time per replica, and calls
   * `onLeg` as each answers. Resolves when every leg has an outcome (bus failures included).
   */
  async many(legs: Leg[], opts: { concurrency: number; onLeg: (reply: LegReply) => void; signal?: AbortSignal }): Promise<void> {
    // A replica that no longer owns an engine (its lease was moving), or no replica at all (the
    // owner died and its lease has not moved yet), made no call: the leg goes again to whoever
    // owns the engine now, while its deadline allows.
    let pending = legs;
    for (;;) {
      // Looked up only for a leg that was refused (rare): a fan-out builds no index per round.
      let byWorker: Map<string, Leg> | undefined;
      const round = pending;
      const refused: Leg[] = [];
      await this.route(pending, {
        ...opts,
        onLeg: (reply) => {
          const o = reply.outcome;
          const notMade = o.kind === 'unreachable' && (o.code === 'not_owner' || o.code === 'no_owner');
          if (!notMade) return opts.onLeg(reply);
          byWorker ??= new Map(round.map((l) => [l.workerId, l]));
          const leg = byWorker.get(reply.workerId);
          if (leg && !opts.signal?.aborted && leg.call.deadline - Date.now() > REROUTE_MS) refused.push(leg);
          else opts.onLeg(reply);
        },
      });
      if (refused.length === 0) return;
      await new Promise((r) => setTimeout(r, REROUTE_MS));
      pending = refused;
    }
  }

  private async route(legs: Leg[], opts: { concurrency: number; onLeg: (reply: LegReply) => void; signal?: AbortSignal }): Promise<void> {
    const byOwner = new Map<string, Leg[]>();
    for (const leg of legs) {
      const owner = this.deps.registry.get(leg.workerId)?.owner;
      if (!owner) {
        const known = this.deps.registry.get(leg.workerId) !== undefined;
        const message = known ? `worker \`${leg.workerId}\` has no owning replica yet (its lease is being claimed)` : `worker \`${leg.workerId}\` was removed`;
        opts.onLeg({ workerId: leg.workerId, outcome: { kind: 'unreachable', latencyMs: 0, message, ...(known ? { code: 'no_owner' as const } : {}) } });
        continue;
      }
      const share = byOwner.get(owner);
      if (share) share.push(leg);
      else byOwner.set(owner, [leg]);
    }
    await Promise.all([...byOwner].map(([owner, share]) => (this.isLocal(owner) ? this.toLocal(owner, share, opts) : this.toReplica(owner, share, opts))));
  }

  private isLocal(owner: string | undefined): boolean {
    return owner !== undefined && this.deps.local !== undefined && owner === this.deps.local.replicaId;
  }

  /** This replica's share, in-process: same lanes, deadlines and cancellation as over the bus. */
  private async toLocal(owner: string, legs: Leg[], opts: { concurrency: number; onLeg: (reply: LegReply) => void; signal?: AbortSignal }) {
    if (!this.deps.bus.connected) {
      const err = new BusUnavailable(this.deps.subjects.replicaCmd(owner));
      for (const leg of legs)
        opts.onLeg({ workerId: leg.workerId, outcome: busFailure(err, this.deps.registry.get(leg.workerId)?.url ?? leg.workerId, leg.call) });
      return;
    }
    if (this.deps.fence?.reason() != null) {
      for (const leg of legs) opts.onLeg({ workerId: leg.workerId, outcome: this.fenced(this.deps.registry.get(leg.workerId)?.url ?? leg.workerId)! });
      return;
    }
    // Named for no one (no outcome log, no cancel subject in-process): a counter will do. The
    // legs watch the caller's signal through the share's deadline signals (share.ts), so it
    // keeps a listener or two whatever the number of legs.
    const command = packLegs(`local-${++this.localShares}`, legs, opts.concurrency);
    await this.deps.local!.runShare(command, opts.onLeg, opts.signal);
  }

  private localShares = 0;

  private async toReplica(owner: string, legs: Leg[], opts: { concurrency: number; onLeg: (reply: LegReply) => void; signal?: AbortSignal }) {
    const answered = new Set<string>();
    const latest = Math.max(...legs.map((l) => l.call.deadline));
    // Legs queue behind each other at the replica, so the stream may run as long as its slowest
    // batch; each leg still carries (and enforces) its own deadline.
    const rounds = Math.ceil(legs.length / Math.max(1, opts.concurrency));
    const timeoutMs = Math.max(1, latest - Date.now()) * Math.max(1, rounds) + BUS_MARGIN_MS;
    const command = packLegs(randomUUID(), legs, opts.concurrency);
    const stopCancel = this.cancelOnAbort(opts.signal, owner, command.requestId);
    const sentAt = Date.now();
    const ownerGone = this.watchOwner(owner);
    const signal = opts.signal ? AbortSignal.any([opts.signal, ownerGone.signal]) : ownerGone.signal;
    try {
      const stream = this.deps.bus.requestStream(this.deps.subjects.replicaCmd(owner), command, {
        timeoutMs,
        // A caller that went away, or an owner that died: the wait and its reply route end now.
        signal,
        onMessage: (data) => {
          const reply = data as LegReply;
          if (answered.has(reply.workerId)) return;
          answered.add(reply.workerId);
          opts.onLeg(reply);
        },
      });
      await stream;
    } catch (err) {
      // The connection dropped under a share that was sent: its calls may well have run. Once the
      // bus is back, the owner says what they came to (its outcome log).
      if (err instanceof BusUnavailable && err.inFlight && !opts.signal?.aborted) {
        await this.settleFromOwner(owner, command.requestId, legs, answered, latest, opts);
      }
      const lost = ownerGone.signal.aborted && !opts.signal?.aborted;
      for (const leg of legs) {
        if (answered.has(leg.workerId)) continue;
        const url = this.deps.registry.get(leg.workerId)?.url ?? leg.workerId;
        opts.onLeg({ workerId: leg.workerId, outcome: lost ? ownerLost(url, owner, Date.now() - sentAt) : busFailure(err, url, leg.call) });
      }
    } finally {
      ownerGone.stop();
      stopCancel();
    }
  }

  /** Aborts its signal once `owner` is judged dead (its lease ran out); stop() ends the watch. */
  private watchOwner(owner: string): { signal: AbortSignal; stop: () => void } {
    const gone = new AbortController();
    const alive = this.deps.alive;
    if (!alive) return { signal: gone.signal, stop: () => {} };
    let checking = false;
    const timer = setInterval(() => {
      if (checking || gone.signal.aborted) return;
      checking = true;
      alive(owner)
        .then((yes) => {
          if (!yes) gone.abort();
        })
        .catch(() => {})
        .finally(() => (checking = false));
    }, OWNER_CHECK_MS);
    timer.unref();
    return { signal: gone.signal, stop: () => clearInterval(timer) };
  }

  /** Waits for the bus, then asks the owner for the replies of `requestId` until every leg has one or the deadline passes. */
  private async settleFromOwner(
    owner: string,
    requestId: string,
    legs: Leg[],
    answered: Set<string>,
    deadline: number,
    opts: { onLeg: (reply: LegReply) => void; signal?: AbortSignal },
  ) {
    const until = deadline + BUS_MARGIN_MS;
    // The owner comes back to the bus on its own schedule: no responder is not yet a verdict.
    let silentSince: number | undefined;
    while (Date.now() < until && !opts.signal?.aborted && answered.size < legs.length) {
      if (this.deps.bus.connected) {
        try {
          const got = await this.deps.bus.request<ShareOutcomes>(this.deps.subjects.replicaOutcomes(owner), { requestId } satisfies ShareRef, BUS_MARGIN_MS);
          for (const reply of got?.replies ?? []) {
            if (answered.has(reply.workerId)) continue;
            answered.add(reply.workerId);
            opts.onLeg(reply);
          }
          // The owner never saw the request, or finished it without these legs: nothing more comes.
          if (!got || got.done) return;
          silentSince = undefined;
        } catch (err) {
          if (err instanceof BusNoResponders) {
            silentSince ??= Date.now();
            if (Date.now() - silentSince > OWNER_RETURN_MS) return; // the owner is gone too
          }
        }
      }
      await new Promise((r) => setTimeout(r, SETTLE_POLL_MS));
    }
  }

  /** A caller that goes away cancels what the owning replica still runs for it. */
  private cancelOnAbort(signal: AbortSignal | undefined, owner: string | undefined, requestId: string): () => void {
    if (!signal || !owner) return () => {};
    const onAbort = () => {
      try {
        this.deps.bus.publish(this.deps.subjects.replicaCancel(owner), { requestId } satisfies ShareRef);
      } catch {
        // the bus is closing: the legs end at their own deadlines
      }
    };
    signal.addEventListener('abort', onAbort, { once: true });
    return () => signal.removeEventListener('abort', onAbort);
  }
}

function busFailure(err: unknown, url: string, call: ControlCall): ControlOutcome {
  if (err instanceof BusUnavailable) {
    // Not in flight: it never left this replica, so it may be sent again (as a fenced call may).
    if (!err.inFlight)
      return { kind: 'unreachable', code: 'bus_unavailable', fenced: true, latencyMs: 0, message: `upstream \`${url}\` not called: ${err.message}` };
    return {
      kind: 'unreachable',
      code: 'bus_unavailable',
      latencyMs: 0,
      message: `upstream \`${url}\` its reply was lost, and the call may have run: ${err.message}`,
    };
  }
  if (err instanceof BusTimeout) {
    return { kind: 'timeout', latencyMs: 0, message: `upstream \`${url}\` timed out after ${call.timeoutSecs}s` };
  }
  if (err instanceof BusNoResponders) {
    return { kind: 'unreachable', code: 'no_owner', latencyMs: 0, message: `upstream \`${url}\` unreachable: no gateway replica hosts this engine` };
  }
  if (err instanceof DOMException && err.name === 'AbortError') {
    return { kind: 'unreachable', latencyMs: 0, message: `upstream \`${url}\` call cancelled: the client went away` };
  }
  return { kind: 'unreachable', latencyMs: 0, message: `upstream \`${url}\` unreachable: ${(err as Error)?.message ?? String(err)}` };
}

function ownerLost(url: string, owner: string, latencyMs: number): ControlOutcome {
  return {
    kind: 'unreachable',
    code: 'owner_lost',
    latencyMs,
    message: `upstream \`${url}\`: gateway replica \`${owner}\`, which ran this call, died before answering; the call may have run`,
  };
}

function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new DOMException('aborted', 'AbortError'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new DOMException('aborted', 'AbortError'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
