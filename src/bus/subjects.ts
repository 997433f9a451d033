// The only place that writes NATS subject strings. Every subject hangs off a configurable root
// (default `rl`) so tests and deployments can share one server without colliding. Each token is
// validated: an id with `.`, `*`, `>` or whitespace would silently address other subjects.

const BAD_TOKEN = /[.*>\s]/;

export function validateToken(kind: string, token: string): string {
  if (token.length === 0 || BAD_TOKEN.test(token)) {
    throw new Error(`invalid ${kind} for a NATS subject token: ${JSON.stringify(token)}`);
  }
  return token;
}

export const DEFAULT_ROOT = 'rl';

export interface Subjects {
  readonly root: string;
  /** Single-engine command, request/reply with a deadline; answered by the owning replica. */
  engineCmd(workerId: string): string;
  /** Every transition of one engine actor (JSON EngineStateEvent). */
  engineState(workerId: string): string;
  /** Wildcard over every engine's state subject (operators, web page, other replicas). */
  allEngineStates(): string;
  /** Notices for an engine's owner from replicas that route to it (data-plane results, API writes). */
  engineNotice(workerId: string): string;
  allEngineNotices(): string;
  /** One fan-out command naming the targets a replica owns; answered per leg, then a sentinel. */
  replicaCmd(replicaId: string): string;
  /** Cancels a replica's outstanding work for one request id (the caller went away). */
  replicaCancel(replicaId: string): string;
  /** What a replica's engines answered to one request id (request/reply), for a caller that lost the replies. */
  replicaOutcomes(replicaId: string): string;
  /** Refit requests from trainers (request/reply; the reply is the refit report). */
  refitRequest(): string;
  /** The durable refit queue (JetStream work queue): one message per refit, its id as the msg id. */
  refitSubmit(): string;
  /** The one final report of a refit. */
  refitReport(refitId: string): string;
  /** Lifecycle of one refit: phase changes and the final report. */
  refitEvents(refitId: string): string;
  allRefitEvents(): string;
}

export function subjects(root: string = DEFAULT_ROOT): Subjects {
  for (const part of root.split('.')) validateToken('subject root', part);
  return {
    root,
    engineCmd: (id) => `${root}.engine.${validateToken('worker id', id)}.cmd`,
    engineState: (id) => `${root}.engine.${validateToken('worker id', id)}.state`,
    allEngineStates: () => `${root}.engine.*.state`,
    engineNotice: (id) => `${root}.engine.${validateToken('worker id', id)}.notice`,
    allEngineNotices: () => `${root}.engine.*.notice`,
    replicaCmd: (replica) => `${root}.replica.${validateToken('replica id', replica)}.cmd`,
    replicaCancel: (replica) => `${root}.replica.${validateToken('replica id', replica)}.cancel`,
    replicaOutcomes: (replica) => `${root}.replica.${validateToken('replica id', replica)}.outcomes`,
    refitRequest: () => `${root}.refit.request`,
    refitSubmit: () => `${root}.refit.submit`,
    refitReport: (id) => `${root}.refit.${validateToken('refit id', id)}.report`,
    refitEvents: (id) => `${root}.refit.${validateToken('refit id', id)}.events`,
    allRefitEvents: () => `${root}.refit.*.events`,
  };
}
