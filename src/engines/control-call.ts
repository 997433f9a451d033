// One control-plane call to one engine, around its wire shape (src/wire/control-call.ts): the
// body's base64, the deadline a share of legs runs under, the check of a call that crossed the
// bus, and the resume an owner sends by itself. Executing a call lives in control-client.ts.

import { GatewayError } from '../api/errors.ts';
import type { ControlCall, EngineCommand } from '../wire/control-call.ts';
import { validateEnginePath } from './engine-path.ts';

export const BODY_CAP = 1024 * 1024;

export function encodeBody(body: Uint8Array | null | undefined): string | undefined {
  if (!body || body.length === 0) return undefined;
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('base64');
}

/** The last body decoded: every leg of a fan-out carries the same one, decoded once. */
let lastBody: { text: string; bytes: Buffer } | undefined;

/** The call's body as bytes. Callers only read them (the buffer may be shared between legs). */
export function decodeBody(body: string | undefined): Buffer | null {
  if (!body) return null;
  if (lastBody?.text === body) return lastBody.bytes;
  const bytes = Buffer.from(body, 'base64');
  lastBody = { text: body, bytes };
  return bytes;
}

/**
 * Something that must hear a signal's abort: an object (EventTarget's listener-object form), so a
 * leg registers itself without a closure of its own.
 */
export interface AbortWatcher {
  handleEvent(): void;
}

/**
 * A signal that aborts at one deadline for a whole share of legs (or at none: `Infinity`), or
 * when the share is cancelled: one timer for the share instead of one per leg. A call whose own deadline is this
 * one needs no timer of its own (control-client.ts). Legs watch it through `watchAbort`: a set
 * entry each, where EventTarget's addEventListener walks every listener already there (a share
 * of n legs would cost O(n²)).
 */
export class ShareDeadline {
  private readonly ctrl = new AbortController();
  private readonly timer: NodeJS.Timeout | undefined;
  private readonly forward: () => void;
  /** Who hears the abort; each leg removes itself when it is over. */
  readonly watchers = new Set<AbortWatcher>();

  constructor(
    readonly at: number,
    private readonly parent: AbortSignal | undefined,
  ) {
    // Without a deadline (Infinity) it only gathers the legs' watchers under one parent listener.
    this.timer = Number.isFinite(at) ? setTimeout(() => this.abort(DEADLINE), Math.max(0, at - Date.now())) : undefined;
    this.forward = () => this.abort(parent?.reason);
    shareDeadlines.set(this.ctrl.signal, this);
    if (parent?.aborted) this.abort(parent.reason);
    else parent?.addEventListener('abort', this.forward, { once: true });
  }

  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.parent?.removeEventListener('abort', this.forward);
  }

  private abort(reason: unknown): void {
    if (this.ctrl.signal.aborted) return;
    this.ctrl.abort(reason);
    for (const w of [...this.watchers]) w.handleEvent();
    this.watchers.clear();
  }
}

/** The reason a ShareDeadline's signal gives when its deadline passed (not a cancel). */
export const DEADLINE = Object.freeze({ deadline: true });

const shareDeadlines = new WeakMap<AbortSignal, ShareDeadline>();

/** The deadline `signal` enforces by itself, if it is a ShareDeadline's. */
export function deadlineOf(signal: AbortSignal | undefined): number | undefined {
  return signal ? shareDeadlines.get(signal)?.at : undefined;
}

/** Calls `w.handleEvent()` once when `signal` aborts (the caller checks `signal.aborted` first). */
export function watchAbort(signal: AbortSignal, w: AbortWatcher): void {
  const share = shareDeadlines.get(signal);
  if (share) share.watchers.add(w);
  else signal.addEventListener('abort', w, { once: true });
}

/** Undoes `watchAbort`. */
export function unwatchAbort(signal: AbortSignal, w: AbortWatcher): void {
  const share = shareDeadlines.get(signal);
  if (share) share.watchers.delete(w);
  else signal.removeEventListener('abort', w);
}

// A command subject is open to anyone on the bus: a payload of another shape than the gateway
// sends is a request error naming what is wrong, never an internal error or a half-run call.
const METHODS = new Set(['GET', 'HEAD', 'POST']);

/** The `{call, requestId}` of `rl.engine.<id>.cmd`, checked. */
export function engineCommandOf(data: unknown): EngineCommand {
  const v = objectOf(data, 'rl.engine.<id>.cmd payload');
  const requestId = v.requestId;
  if (requestId !== undefined && typeof requestId !== 'string') throw refuse('`requestId` must be a string');
  return { call: controlCallOf(v.call, '`call`'), requestId };
}

/** A call as it crossed the bus, checked field by field; throws `invalid_request` naming the field. */
export function controlCallOf(data: unknown, what: string): ControlCall {
  const c = objectOf(data, what);
  if (typeof c.method !== 'string' || !METHODS.has(c.method)) throw refuse(`${what}.method must be GET, HEAD or POST`);
  if (typeof c.path !== 'string') throw refuse(`${what}.path must be a string`);
  // Anyone on the bus can send this: the route rules of the HTTP door hold here too.
  try {
    validateEnginePath(c.path);
  } catch (err) {
    throw refuse(`${what}.path: ${(err as Error).message}`);
  }
  if (typeof c.query !== 'string') throw refuse(`${what}.query must be a string`);
  if (c.body !== undefined && typeof c.body !== 'string') throw refuse(`${what}.body must be base64 text`);
  if (c.contentType !== undefined && typeof c.contentType !== 'string') throw refuse(`${what}.contentType must be a string`);
  if (c.trace !== undefined && (typeof c.trace !== 'object' || c.trace === null || Object.values(c.trace).some((x) => typeof x !== 'string'))) {
    throw refuse(`${what}.trace must map header names to strings`);
  }
  if (typeof c.deadline !== 'number' || !Number.isFinite(c.deadline)) throw refuse(`${what}.deadline must be a time in epoch ms`);
  if (typeof c.timeoutSecs !== 'number' || !(c.timeoutSecs > 0)) throw refuse(`${what}.timeoutSecs must be a positive number`);
  if (c.refitId !== undefined && typeof c.refitId !== 'string') throw refuse(`${what}.refitId must be a string`);
  return c as unknown as ControlCall;
}

function objectOf(data: unknown, what: string): Record<string, unknown> {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw refuse(`${what} must be a JSON object`);
  return data as Record<string, unknown>;
}

function refuse(message: string): GatewayError {
  return new GatewayError('invalid_request', message);
}

const EMPTY_JSON_BODY = Buffer.from('{}').toString('base64');

/** `POST continue_generation {}`: the resume an owner sends by itself (a resume owed, a late pause undone). */
export function continueGenerationCall(requestId: string, timeoutSecs: number): ControlCall {
  return {
    method: 'POST',
    path: 'continue_generation',
    query: '',
    body: EMPTY_JSON_BODY,
    contentType: 'application/json',
    trace: { 'x-request-id': requestId },
    deadline: Date.now() + timeoutSecs * 1000,
    timeoutSecs,
  };
}
