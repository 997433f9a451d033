// Fault injection by route: delay, canned status/body (on any path, SGLang route or not), hang,
// connection drop, process exit, and "claims success without applying" (spec/engines.md §6.5).
// It owns parsing, validation and matching of fault rules; it never performs the faults itself.

export interface Fault {
  /** Path without the leading '/', e.g. `pause_generation`; `*` = any; `prefix/*` = prefix match. */
  route: string;
  /** Only this method (case-insensitive); any when omitted. */
  method?: string;
  delayMs?: number;
  /** Answer this status instead of the real handler. */
  status?: number;
  /** Canned body: a string is sent as-is, anything else as JSON. */
  body?: unknown;
  /** Canned JSON body padded to exactly this many bytes (e.g. 2 MiB answers). */
  bodyBytes?: number;
  /** Content type of the canned body; null sends none. Default: JSON, or text/plain for strings. */
  contentType?: string | null;
  headers?: Record<string, string>;
  /** Applies to the next N matching calls, then disappears; every call when omitted. */
  times?: number;
  hang?: boolean;
  drop?: boolean;
  /** Exit the process (true = code 1, or the given code). */
  exit?: boolean | number;
  /** The route answers success but does not do the work (weights, version, group). */
  claimSuccessWithoutApplying?: boolean;
  /**
   * After its delay the call runs even if its caller went away meanwhile, as SGLang's handlers do
   * (a pause or a load the gateway gave up on still lands). By default an abandoned call is dropped.
   */
  runIfAbandoned?: boolean;
}

/** What the server does for one matched call, with the canned answer pre-built. */
export interface FaultAction {
  fault: Fault;
  canned: { status: number; headers: Record<string, string | number>; body: Buffer } | null;
}

export class FaultError extends Error {
  override name = 'FaultError';
}

const KEYS = new Set([
  'route', 'method', 'delayMs', 'status', 'body', 'bodyBytes', 'contentType', 'headers', 'times',
  'hang', 'drop', 'exit', 'claimSuccessWithoutApplying', 'runIfAbandoned',
]);

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nonNegInt(v: unknown, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new FaultError(`${name} must be a non-negative integer`);
  return v;
}

/** Validates one fault object or a list of them. */
export function parseFaults(input: unknown): Fault[] {
  const list = Array.isArray(input) ? input : [input];
  return list.map((raw, i) => {
    if (!isObject(raw)) throw new FaultError(`fault ${i} must be an object`);
    for (const k of Object.keys(raw)) if (!KEYS.has(k)) throw new FaultError(`fault ${i}: unknown key ${k}`);
    if (typeof raw.route !== 'string' || raw.route.trim() === '') throw new FaultError(`fault ${i}: route is required`);
    const f: Fault = { ...raw, route: normaliseRoute(raw.route) } as Fault;
    nonNegInt(f.delayMs, 'delayMs');
    nonNegInt(f.bodyBytes, 'bodyBytes');
    if (nonNegInt(f.times, 'times') === 0) throw new FaultError(`fault ${i}: times must be >= 1`);
    if (f.status !== undefined && (!Number.isInteger(f.status) || f.status < 100 || f.status > 599)) {
      throw new FaultError(`fault ${i}: status must be an HTTP status`);
    }
    if (f.method !== undefined && typeof f.method !== 'string') throw new FaultError(`fault ${i}: method must be a string`);
    if (f.contentType !== undefined && f.contentType !== null && typeof f.contentType !== 'string') {
      throw new FaultError(`fault ${i}: contentType must be a string or null`);
    }
    if (f.headers !== undefined && !isObject(f.headers)) throw new FaultError(`fault ${i}: headers must be an object`);
    if (f.runIfAbandoned !== undefined && typeof f.runIfAbandoned !== 'boolean') throw new FaultError(`fault ${i}: runIfAbandoned must be a boolean`);
    if (f.exit !== undefined && typeof f.exit !== 'boolean' && !Number.isInteger(f.exit)) {
      throw new FaultError(`fault ${i}: exit must be a boolean or an exit code`);
    }
    return f;
  });
}

export function normaliseRoute(route: string): string {
  return route.trim().replace(/^\/+/, '').replace(/\/+$/, '');
}

function buildCanned(f: Fault): FaultAction['canned'] {
  if (f.status === undefined && f.body === undefined && f.bodyBytes === undefined) return null;
  const status = f.status ?? 200;
  let body: Buffer;
  let type: string | null;
  if (f.bodyBytes !== undefined) {
    const head = `{"success":${status < 400},"data":"`;
    const pad = Math.max(0, f.bodyBytes - head.length - 2);
    body = Buffer.from(head + 'x'.repeat(pad) + '"}');
    type = 'application/json';
  } else if (typeof f.body === 'string') {
    body = Buffer.from(f.body);
    type = 'text/plain; charset=utf-8';
  } else {
    const value = f.body === undefined ? { success: status < 400, message: status < 400 ? 'ok' : 'injected fault' } : f.body;
    body = Buffer.from(JSON.stringify(value));
    type = 'application/json';
  }
  if (f.contentType !== undefined) type = f.contentType;
  const headers: Record<string, string | number> = { ...(f.headers ?? {}), 'content-length': body.length };
  if (type !== null) headers['content-type'] = type;
  return { status, headers, body };
}

interface Entry {
  action: FaultAction;
  remaining: number | null;
}

/** The live fault rules, first match wins. */
export class FaultTable {
  private entries: Entry[] = [];

  add(faults: Fault[]): void {
    for (const fault of faults) {
      this.entries.push({ action: { fault, canned: buildCanned(fault) }, remaining: fault.times ?? null });
    }
  }

  replace(faults: Fault[]): void {
    this.entries = [];
    this.add(faults);
  }

  clear(): void {
    this.entries = [];
  }

  list(): Array<Fault & { remaining: number | null }> {
    return this.entries.map((e) => ({ ...e.action.fault, remaining: e.remaining }));
  }

  /** The first rule matching this call, consuming one of its `times`. */
  take(method: string, route: string): FaultAction | null {
    if (this.entries.length === 0) return null;
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i];
      const f = e.action.fault;
      if (f.method !== undefined && f.method.toUpperCase() !== method) continue;
      if (!routeMatches(f.route, route)) continue;
      if (e.remaining !== null && --e.remaining <= 0) this.entries.splice(i, 1);
      return e.action;
    }
    return null;
  }
}

function routeMatches(pattern: string, route: string): boolean {
  if (pattern === '*' || pattern === route) return true;
  return pattern.endsWith('*') && route.startsWith(pattern.slice(0, -1));
}
