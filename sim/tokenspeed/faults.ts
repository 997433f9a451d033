// Fault injection for both faces of the simulator: control-app routes (`route`: the shared route
// faults of sim/core/route-faults.ts, without `bodyBytes` and `runIfAbandoned`) and gRPC methods
// (`rpc`: delay, error status, canned unary answer, hang, exit, an engine-side abort
// mid-Generate). It owns the accepted keys and parsing; it never performs a fault itself.

import { status as GrpcStatus } from '@grpc/grpc-js';
import { checkCommon, checkHttpStatus, checkNonNegInt, FaultError, faultObjects, isObject, normaliseRoute, patternMatches } from '../core/faults.ts';
import { cannedAnswer, checkRouteFault, type CannedAnswer, type RouteFault } from '../core/route-faults.ts';

export interface Fault extends RouteFault {
  /** gRPC method name (`Generate`, `HealthCheck`, …) or `*`. */
  rpc?: string;
  /** RPC faults: end the call with this gRPC status (number or name such as `UNAVAILABLE`). */
  code?: number | string;
  message?: string;
  /** RPC faults on unary methods: answer this message instead of the real one. */
  response?: Record<string, unknown>;
  /** Generate only: abort every choice after this many tokens (engine-side abort). */
  abortAfterTokens?: number;
  /** HTTP-like status of that abort (400 → INVALID_ARGUMENT, 408/504 → DEADLINE_EXCEEDED, …). */
  abortStatus?: number;
}

export interface FaultRule {
  fault: Fault;
  /** Resolved gRPC status code of `code`, when given. */
  grpcCode: number | null;
  /** A route fault's canned answer, built once (null: the real handler answers). */
  canned: CannedAnswer | null;
}

const KEYS = new Set([
  'route',
  'rpc',
  'method',
  'delayMs',
  'times',
  'hang',
  'drop',
  'exit',
  'status',
  'body',
  'contentType',
  'headers',
  'claimSuccessWithoutApplying',
  'code',
  'message',
  'response',
  'abortAfterTokens',
  'abortStatus',
]);

export function grpcCodeOf(code: number | string): number | null {
  if (typeof code === 'number') return Number.isInteger(code) && code >= 0 && code <= 16 ? code : null;
  const v = (GrpcStatus as unknown as Record<string, number>)[code.trim().toUpperCase()];
  return typeof v === 'number' ? v : null;
}

/** Validates one fault object or a list of them. */
export function parseFaults(input: unknown): FaultRule[] {
  return faultObjects(input, KEYS).map((raw, i) => {
    const f = { ...raw } as Fault;
    if ((f.route === undefined) === (f.rpc === undefined)) throw new FaultError(`fault ${i}: give exactly one of route or rpc`);
    if (f.route !== undefined) {
      if (typeof f.route !== 'string' || f.route.trim() === '') throw new FaultError(`fault ${i}: route must be a non-empty string`);
      f.route = normaliseRoute(f.route);
    }
    if (f.rpc !== undefined && (typeof f.rpc !== 'string' || f.rpc.trim() === '')) throw new FaultError(`fault ${i}: rpc must be a non-empty string`);
    checkCommon(f, i);
    checkRouteFault(f, i);
    checkNonNegInt(f.abortAfterTokens, 'abortAfterTokens', i);
    checkHttpStatus(f.abortStatus, 'abortStatus', i);
    if (f.response !== undefined && !isObject(f.response)) throw new FaultError(`fault ${i}: response must be an object`);
    let grpcCode: number | null = null;
    if (f.code !== undefined) {
      grpcCode = typeof f.code === 'number' || typeof f.code === 'string' ? grpcCodeOf(f.code) : null;
      if (grpcCode === null) throw new FaultError(`fault ${i}: code must be a gRPC status number (0-16) or name`);
    }
    return { fault: f, grpcCode, canned: f.route === undefined ? null : cannedAnswer(f) };
  });
}

/** Matches rpc rules against one gRPC call. */
export function rpcMatch(rpc: string): (f: Fault) => boolean {
  return (f) => f.rpc !== undefined && patternMatches(f.rpc, rpc);
}
