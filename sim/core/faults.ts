// Fault rules as every simulator keeps them: the checks their parsers share, the `*` / `prefix/*`
// pattern rule, and the live table (first match wins; `times` counts down per matched call, then
// the rule disappears). Which keys a simulator accepts, and what a fault does when it fires, are
// that simulator's (route-faults.ts for HTTP routes); this file never performs a fault.

export class FaultError extends Error {
  override name = 'FaultError';
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A fault object or a list of them, each checked against the simulator's own keys. */
export function faultObjects(input: unknown, keys: ReadonlySet<string>): Array<Record<string, unknown>> {
  const list = Array.isArray(input) ? input : [input];
  return list.map((raw, i) => {
    if (!isObject(raw)) throw new FaultError(`fault ${i} must be an object`);
    for (const k of Object.keys(raw)) if (!keys.has(k)) throw new FaultError(`fault ${i}: unknown key ${k}`);
    return raw;
  });
}

export function checkNonNegInt(v: unknown, name: string, i: number): void {
  if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 0)) {
    throw new FaultError(`fault ${i}: ${name} must be a non-negative integer`);
  }
}

export function checkHttpStatus(v: unknown, name: string, i: number): void {
  if (v !== undefined && (!Number.isInteger(v) || (v as number) < 100 || (v as number) > 599)) {
    throw new FaultError(`fault ${i}: ${name} must be an HTTP status`);
  }
}

/** The keys every simulator's rules share: how long, how often, and whether to exit. */
export function checkCommon(f: { delayMs?: unknown; times?: unknown; exit?: unknown }, i: number): void {
  checkNonNegInt(f.delayMs, 'delayMs', i);
  checkNonNegInt(f.times, 'times', i);
  if (f.times === 0) throw new FaultError(`fault ${i}: times must be >= 1`);
  if (f.exit !== undefined && typeof f.exit !== 'boolean' && !Number.isInteger(f.exit)) {
    throw new FaultError(`fault ${i}: exit must be a boolean or an exit code`);
  }
}

/** A path as rules name it: no leading or trailing `/`. */
export function normaliseRoute(route: string): string {
  return route.trim().replace(/^\/+/, '').replace(/\/+$/, '');
}

/** `*` matches anything, `a/*` any value starting `a/`, anything else itself. */
export function patternMatches(pattern: string, value: string): boolean {
  if (pattern === '*' || pattern === value) return true;
  return pattern.endsWith('*') && value.startsWith(pattern.slice(0, -1));
}

/** A parsed rule: the fault as given plus what its simulator pre-built from it. */
export interface Rule<F extends { times?: number } = { times?: number }> {
  fault: F;
}

interface Entry<R> {
  rule: R;
  remaining: number | null;
}

/** The live rules, first match wins. */
export class FaultTable<R extends Rule> {
  private entries: Array<Entry<R>> = [];

  add(rules: R[]): void {
    for (const rule of rules) this.entries.push({ rule, remaining: rule.fault.times ?? null });
  }

  replace(rules: R[]): void {
    this.entries = [];
    this.add(rules);
  }

  clear(): void {
    this.entries = [];
  }

  list(): Array<R['fault'] & { remaining: number | null }> {
    return this.entries.map((e) => ({ ...e.rule.fault, remaining: e.remaining }));
  }

  /** The first rule whose fault `matches`, consuming one of its `times`. */
  take(matches: (fault: R['fault']) => boolean): R | null {
    if (this.entries.length === 0) return null;
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (!matches(e.rule.fault)) continue;
      if (e.remaining !== null && --e.remaining <= 0) this.entries.splice(i, 1);
      return e.rule;
    }
    return null;
  }
}
