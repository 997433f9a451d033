// Faults the ZMQ simulator can be told to show, each one a liveness rule or an engine behaviour of
// TokenSpeed's ZMQ lane: silence with requests in flight, the ENGINE_CORE_DEAD sentinel,
// undecodable or ragged outputs, ignored ADDs, an engine-side abort, a crash. This file parses and
// validates them; server.ts performs them.

export type SimFault =
  /** Nothing steps and nothing is pushed while set (requests stay in flight). Kept until cleared. */
  | { kind: 'stall' }
  /** ADD frames are read and ignored. Kept until cleared. */
  | { kind: 'drop_adds' }
  /** The next `times` (default 1) batches carry one extra finish reason. */
  | { kind: 'ragged'; times?: number }
  /** Pushes `count` (default 1) frames that are not msgpack, now. */
  | { kind: 'garbage'; count?: number }
  /** Pushes ENGINE_CORE_DEAD now and then ignores every frame (the process stays up). */
  | { kind: 'dead' }
  /** Aborts `rid` (default: every live request) engine-side, now. */
  | { kind: 'engine_abort'; rid?: string }
  /** Exits the process now with `code` (default 1), no cleanup: a crash. */
  | { kind: 'exit'; code?: number };

export const FAULT_KINDS = ['stall', 'drop_adds', 'ragged', 'garbage', 'dead', 'engine_abort', 'exit'] as const;
/** Kinds that stay in the fault list until cleared; the others act once. */
export const STANDING: ReadonlySet<string> = new Set(['stall', 'drop_adds', 'ragged']);

function count(v: unknown, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || (v as number) < 0) throw new Error(`fault ${name} must be a non-negative integer`);
  return v as number;
}

function one(v: unknown): SimFault {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('a fault is a JSON object with a `kind`');
  const f = v as Record<string, unknown>;
  switch (f.kind) {
    case 'stall':
      return { kind: 'stall' };
    case 'drop_adds':
      return { kind: 'drop_adds' };
    case 'dead':
      return { kind: 'dead' };
    case 'ragged':
      return { kind: 'ragged', times: count(f.times, 'times') };
    case 'garbage':
      return { kind: 'garbage', count: count(f.count, 'count') };
    case 'exit':
      return { kind: 'exit', code: count(f.code, 'code') };
    case 'engine_abort': {
      if (f.rid !== undefined && typeof f.rid !== 'string') throw new Error('fault rid must be a string');
      return { kind: 'engine_abort', rid: f.rid as string | undefined };
    }
    default:
      throw new Error(`unknown fault kind ${JSON.stringify(f.kind)} (known: ${FAULT_KINDS.join(', ')})`);
  }
}

/** A fault object or a list of them; throws on anything else. */
export function parseFaults(v: unknown): SimFault[] {
  return Array.isArray(v) ? v.map(one) : [one(v)];
}
