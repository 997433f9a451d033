// The replica's answering side of a fan-out: takes its share of legs from
// `rl.replica.<id>.cmd`, runs them through the owning engine actors at most `concurrency` at a
// time, and streams back one reply per leg as each finishes, then the sentinel.

import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { LegReply, ReplicaCommand } from '../control/dispatch.ts';
import type { Cancellations } from './cancellations.ts';
import type { EngineHost } from './engine-host.ts';

export function serveReplicaCommands(deps: { bus: Bus; subjects: Subjects; replicaId: string; host: EngineHost; cancels: Cancellations }): BusSubscription {
  return deps.bus.respondStream(deps.subjects.replicaCmd(deps.replicaId), (data, send) =>
    deps.cancels.track((data as ReplicaCommand).requestId, (signal) => runShare(deps.host, data as ReplicaCommand, send, signal)),
  );
}

async function runShare(host: EngineHost, cmd: ReplicaCommand, send: (reply: LegReply) => void, signal: AbortSignal): Promise<void> {
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
        reply = { workerId: leg.workerId, outcome: { kind: 'unreachable', latencyMs: 0, message: (err as Error).message } };
      }
      send(reply);
    }
  };
  const lanes = Math.max(1, Math.min(cmd.concurrency, cmd.legs.length));
  await Promise.all(Array.from({ length: lanes }, lane));
}
