// Fault injection for both faces of the simulator: control-app routes (`route`: delay, canned
// status/body, hang, drop, exit, "claims success without applying") and gRPC methods (`rpc`:
// delay, error status, canned unary answer, hang, exit, an engine-side abort mid-Generate). It
// owns parsing, validation and matching of rules; it never performs a fault itself.

import { status as GrpcStatus } from '@grpc/grpc-js';

export interface Fault {
  /** Control-app path without the leading '/', `*` = any, `prefix/*` = prefix. */
  route?: string;
  /** gRPC method name (`Generate`, `HealthCheck`, …) or `*`. */
  rpc?: string;
  /** HTTP method, route faults only; any when omitted. */
  method?: string;
  delayMs?: number;
  /** Applies to the next N matching calls, then disappears; every call when omitted. */
  times?: number;
  hang?: boolean;
  /** Route faults: destroy the socket without answering. */
  drop?: boolean;
  /** Exit the process (true = code 1, or the given code). */
  exit?: boolean | number;
  /** Route faults: canned answer. A string body is sent as text, anything else as JSON. */
  status?: number;
  body?: unknown;
  contentType?: string | null;
  headers?: Record<string, string>;
  /** Route faults: the handler answers success without doing the work (weights, group, version). */
  claimSuccessWithoutApplying?: boolean;
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
}

export class FaultError extends Error {
  override name = 'FaultError';
}

const KEYS = new Set([
  'route', 'rpc', 'method', 'delayMs', 'times', 'hang', 'drop', 'exit', 'status', 'body', 'contentType', 'headers',
  'claimSuccessWithoutApplying', 'code', 'message', 'response', 'abortAfterTokens', 'abortStatus',
]);

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nonNegInt(v: unknown, name: string, i: number): void {
  if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 0)) {
    throw new FaultError(`fault ${i}: ${name} must be a non-negative integer`);
  }
}

export function grpcCodeOf(code: number | string): number | null {
  if (typeof code === 'number') return Number.isInteger(code) && code >= 0 && code <= 16 ? code : null;
  const v = (GrpcStatus as unknown as Record<string, number>)[code.trim().toUpperCase()];
  return typeof v === 'number' ? v : null;
}

export function normaliseRoute(route: string): string {
  return route.trim().replace(/^\/+/, '').replace(/\/+$/, '');
}

/** Validates one fault object or a list of them. */
export function parseFaults(input: unknown): FaultRule[] {
  const list = Array.isArray(input) ? input : [input];
  return list.map((raw, i) => {
    if (!isObject(raw)) throw new FaultError(`fault ${i} must be an object`);
    for (const k of Object.keys(raw)) if (!KEYS.has(k)) throw new FaultError(`fault ${i}: unknown key ${k}`);
    const f = { ...raw } as Fault;
    if ((f.route === undefined) === (f.rpc === undefined)) throw new FaultError(`fault ${i}: give exactly one of route or rpc`);
    if (f.route !== undefined) {
      if (typeof f.route !== 'string' || f.route.trim() === '') throw new FaultError(`fault ${i}: route must be a non-empty string`);
      f.route = normaliseRoute(f.route);
    }
    if (f.rpc !== undefined && (typeof f.rpc !== 'string' || f.rpc.trim() === '')) throw new FaultError(`fault ${i}: rpc must be a non-empty string`);
    nonNegInt(f.delayMs, 'delayMs', i);
    nonNegInt(f.times, 'times', i);
    nonNegInt(f.abortAfterTokens, 'abortAfterTokens', i);
    if (f.times === 0) throw new FaultError(`fault ${i}: times must be >= 1`);
    for (const k of ['status', 'abortStatus'] as const) {
      const v = f[k];
      if (v !== undefined && (!Number.isInteger(v) || v < 100 || v > 599)) throw new FaultError(`fault ${i}: ${k} must be an HTTP status`);
    }
    if (f.method !== undefined && typeof f.method !== 'string') throw new FaultError(`fault ${i}: method must be a string`);
    if (f.headers !== undefined && !isObject(f.headers)) throw new FaultError(`fault ${i}: headers must be an object`);
    if (f.response !== undefined && !isObject(f.response)) throw new FaultError(`fault ${i}: response must be an object`);
    if (f.exit !== undefined && typeof f.exit !== 'boolean' && !Number.isInteger(f.exit)) {
      throw new FaultError(`fault ${i}: exit must be a boolean or an exit code`);
    }
    let grpcCode: number | null = null;
    if (f.code !== undefined) {
      grpcCode = typeof f.code === 'number' || typeof f.code === 'string' ? grpcCodeOf(f.code) : null;
      if (grpcCode === null) throw new FaultError(`fault ${i}: code must be a gRPC status number (0-16) or name`);
    }
    return { fault: f, grpcCode };
  });
}

interface Entry {
  rule: FaultRule;
  remaining: number | null;
}

function matches(pattern: string, value: string): boolean {
  if (pattern === '*' || pattern === value) return true;
  return pattern.endsWith('*') && value.startsWith(pattern.slice(0, -1));
}

/** The live rules, first match wins; `times` counts down per matched call. */
export class FaultTable {
  private entries: Entry[] = [];

  add(rules: FaultRule[]): void {
    for (const rule of rules) this.entries.push({ rule, remaining: rule.fault.times ?? null });
  }

  replace(rules: FaultRule[]): void {
    this.entries = [];
    this.add(rules);
  }

  clear(): void {
    this.entries = [];
  }

  list(): Array<Fault & { remaining: number | null }> {
    return this.entries.map((e) => ({ ...e.rule.fault, remaining: e.remaining }));
  }

  /** The first route rule matching an HTTP call to the control app. */
  takeRoute(method: string, route: string): FaultRule | null {
    return this.take((f) => f.route !== undefined && (f.method === undefined || f.method.toUpperCase() === method) && matches(f.route, route));
  }

  /** The first rpc rule matching a gRPC call. */
  takeRpc(rpc: string): FaultRule | null {
    return this.take((f) => f.rpc !== undefined && matches(f.rpc, rpc));
  }

  private take(pred: (f: Fault) => boolean): FaultRule | null {
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (!pred(e.rule.fault)) continue;
      if (e.remaining !== null && --e.remaining <= 0) this.entries.splice(i, 1);
      return e.rule;
    }
    return null;
  }
}
