// The replica's answering side of a fan-out: takes its share of legs from
// `rl.replica.<id>.cmd` (or in-process, from a dispatcher on this replica), runs them through the
// owning engine actors at most `concurrency` at a time, streams back one reply per leg as each
// finishes, then the sentinel, and keeps the replies a while for a caller that lost them.

import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { LegReply, ReplicaCommand } from '../control/dispatch.ts';
import type { Cancellations } from './cancellations.ts';
import { NotOwner, type EngineHost } from './engine-host.ts';
import { OutcomeLog } from './outcome-log.ts';

export function serveReplicaCommands(deps: { bus: Bus; subjects: Subjects; replicaId: string; host: EngineHost; cancels: Cancellations; log: OutcomeLog }): BusSubscription {
  const commands = deps.bus.respondStream(deps.subjects.replicaCmd(deps.replicaId), (data, send) =>
    deps.cancels.track((data as ReplicaCommand).requestId, (signal) => runLoggedShare(deps.host, deps.log, data as ReplicaCommand, send, signal)),
  );
  // A caller that lost the stream in a bus outage asks what its legs came to.
  const outcomes = deps.bus.respond(deps.subjects.replicaOutcomes(deps.replicaId), async (data) => {
    const id = (data as { requestId?: unknown } | null)?.requestId;
    return typeof id === 'string' ? deps.log.get(id) : null;
  });
  return {
    unsubscribe() {
      commands.unsubscribe();
      outcomes.unsubscribe();
    },
  };
}

/** Runs a share and keeps its replies in the log, whether or not they reach the caller. */
export async function runLoggedShare(host: EngineHost, log: OutcomeLog, cmd: ReplicaCommand, send: (reply: LegReply) => void, signal: AbortSignal): Promise<void> {
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

export async function runShare(host: EngineHost, cmd: ReplicaCommand, send: (reply: LegReply) => void, signal: AbortSignal): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < cmd.legs.length && !signal.aborted) {
      const { workerId, call: index } = cmd.legs[next++]!;
      const leg = { workerId, call: cmd.calls[index]! };
      // Each leg gets its own control timeout from the moment its lane takes it (spec §10.1
      // step 4: no overall deadline), so a leg held back by the concurrency cap keeps it whole.
      const call = { ...leg.call, deadline: Date.now() + leg.call.timeoutSecs * 1000 };
      let reply: LegReply;
      try {
        reply = { workerId: leg.workerId, outcome: await host.run(leg.workerId, call, signal) };
      } catch (err) {
        const code = err instanceof NotOwner ? ('not_owner' as const) : undefined;
        reply = { workerId: leg.workerId, outcome: { kind: 'unreachable', latencyMs: 0, message: (err as Error).message, ...(code && { code }) } };
      }
      send(reply);
    }
  };
  const lanes = Math.max(1, Math.min(cmd.concurrency, cmd.legs.length));
  await Promise.all(Array.from({ length: lanes }, lane));
}
