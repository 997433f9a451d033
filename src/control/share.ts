// The replica's answering side of a fan-out: takes its share of legs from
// `rl.replica.<id>.cmd` (or in-process, from a dispatcher on this replica), runs them on the
// engines' command lanes at most `concurrency` at a time (legs taken at once share a deadline),
// streams back one reply per leg as each finishes, then the sentinel, and keeps the replies a
// while for a caller that lost them.

import { GatewayError } from '../api/errors.ts';
import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import { ShareDeadline } from '../engines/control-call.ts';
import type { Cancellations } from '../fleet/cancellations.ts';
import { NotOwner, type EngineHost } from '../fleet/engine-host.ts';
import { OutcomeLog } from './outcome-log.ts';
import { replicaCommandOf } from './command-payload.ts';
import type { ControlCall, ControlOutcome } from '../wire/control-call.ts';
import type { LegReply, ReplicaCommand } from '../wire/replica-share.ts';

export function serveReplicaCommands(deps: {
  bus: Bus;
  subjects: Subjects;
  replicaId: string;
  host: EngineHost;
  cancels: Cancellations;
  log: OutcomeLog;
}): BusSubscription {
  const commands = deps.bus.respondStream(deps.subjects.replicaCmd(deps.replicaId), async (data, send) => {
    const cmd = replicaCommandOf(data); // a payload of another shape is a request error, nothing run
    return deps.cancels.track(cmd.requestId, (signal) => runLoggedShare(deps.host, deps.log, cmd, send, signal));
  });
  // A caller that lost the stream in a bus outage asks what its legs came to.
  const outcomes = deps.bus.respond(deps.subjects.replicaOutcomes(deps.replicaId), async (data) => {
    const id = (data as { requestId?: unknown } | null)?.requestId;
    if (typeof id !== 'string') throw new GatewayError('invalid_request', 'rl.replica.<id>.outcomes payload must be {requestId: string}');
    return deps.log.get(id);
  });
  return {
    unsubscribe() {
      commands.unsubscribe();
      outcomes.unsubscribe();
    },
  };
}

/** Runs a share and keeps its replies in the log, whether or not they reach the caller. */
export async function runLoggedShare(
  host: EngineHost,
  log: OutcomeLog,
  cmd: ReplicaCommand,
  send: (reply: LegReply) => void,
  signal: AbortSignal,
): Promise<void> {
  log.begin(cmd.requestId);
  try {
    await runShare(
      host,
      cmd,
      (reply) => {
        log.record(cmd.requestId, reply);
        send(reply);
      },
      signal,
    );
  } finally {
    log.end(cmd.requestId);
  }
}

export async function runShare(host: EngineHost, cmd: ReplicaCommand, send: (reply: LegReply) => void, signal?: AbortSignal): Promise<void> {
  let next = 0;
  const startedAt = Date.now();
  // Legs taken at once share one deadline timer and one call object (by call, as calls may
  // differ in timeout).
  const shared = new Map<ControlCall, { deadline: ShareDeadline; call: ControlCall }>();
  // Legs taken later (behind the concurrency cap) keep a timeout of their own, and watch the
  // caller's signal through one gathering signal, not one listener each.
  let late: ShareDeadline | undefined;
  const lane = async () => {
    while (next < cmd.legs.length && !signal?.aborted) {
      const { workerId, call: index } = cmd.legs[next++]!;
      const base = cmd.calls[index]!;
      // Each leg gets its own control timeout from the moment its lane takes it (as SMG: no
      // overall deadline), so a leg held back by the concurrency cap keeps it whole.
      // Legs taken within a moment of the share's start use the share's deadline for that call.
      const now = Date.now();
      let legSignal: AbortSignal | undefined;
      let call: ControlCall;
      if (now - startedAt <= SAME_DEADLINE_MS) {
        let s = shared.get(base);
        if (!s) {
          const deadline = new ShareDeadline(startedAt + base.timeoutSecs * 1000, signal);
          shared.set(base, (s = { deadline, call: { ...base, deadline: deadline.at } }));
        }
        call = s.call;
        legSignal = s.deadline.signal;
      } else {
        call = { ...base, deadline: now + base.timeoutSecs * 1000 };
        if (signal) legSignal = (late ??= new ShareDeadline(Infinity, signal)).signal;
      }
      let outcome: ControlOutcome;
      try {
        outcome = await host.run(workerId, call, legSignal);
      } catch (err) {
        const code = err instanceof NotOwner ? ('not_owner' as const) : undefined;
        outcome = { kind: 'unreachable', latencyMs: 0, message: (err as Error).message, ...(code && { code }) };
      }
      send({ workerId, outcome });
    }
  };
  const lanes = Math.max(1, Math.min(cmd.concurrency, cmd.legs.length));
  try {
    await Promise.all(Array.from({ length: lanes }, lane));
  } finally {
    for (const s of shared.values()) s.deadline.dispose();
    late?.dispose();
  }
}

/** Legs a lane takes this soon after the share started keep the share's deadline (a few ms less budget). */
const SAME_DEADLINE_MS = 20;
