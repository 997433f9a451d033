// A fan-out's share for one owning replica, as it crosses the bus: the command on
// `<root>.replica.<id>.cmd`, the reply streamed back per leg, the outcomes a caller asks for on
// `<root>.replica.<id>.outcomes` after an outage cut the stream, and the cancel on
// `<root>.replica.<id>.cancel`. Shapes only: src/control/ sends, checks and answers them.

import type { ControlCall, ControlOutcome } from './control-call.ts';

/**
 * What a replica receives: its share of a fan-out. Each distinct call travels once (a fan-out
 * body goes over the bus once per replica, not once per engine); legs point at it by index.
 */
export interface ReplicaCommand {
  requestId: string;
  calls: ControlCall[];
  legs: Array<{ workerId: string; call: number }>;
  concurrency: number;
}

/** One leg's answer. Over the bus, replies finished in the same turn travel as one JSON array. */
export interface LegReply {
  workerId: string;
  outcome: ControlOutcome;
}

/** Names a share: the body of `<root>.replica.<id>.cancel` and `<root>.replica.<id>.outcomes`. */
export interface ShareRef {
  requestId: string;
}

/** The answer of `<root>.replica.<id>.outcomes`; null for a request the owner never saw. */
export type ShareOutcomes = { replies: LegReply[]; done: boolean } | null;
