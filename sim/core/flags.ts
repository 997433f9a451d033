// The flag syntax the simulator command lines share: `--flag value` and `--flag=value`, numbers
// that may be `inf`, JSON values. Each simulator keeps its own flag names, defaults and --help;
// this file never knows a flag name and never starts anything.

/**
 * Walks argv, handing each flag to `visit` with a `next()` that returns its value (the part after
 * `=`, else the following argument). `visit` throws on flags it does not know.
 */
export function readFlags(argv: readonly string[], visit: (flag: string, next: () => string) => void): void {
  for (let i = 0; i < argv.length; i++) {
    let flag = argv[i];
    let value: string | undefined;
    const eq = flag.indexOf('=');
    if (flag.startsWith('--') && eq > 0) {
      value = flag.slice(eq + 1);
      flag = flag.slice(0, eq);
    }
    const next = (): string => {
      if (value !== undefined) return value;
      const v = argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    visit(flag, next);
  }
}

/** A numeric flag value; `inf`/`infinity` (any case) is Infinity. */
export function flagNumber(flag: string, v: string): number {
  const s = v.trim().toLowerCase();
  if (s === 'inf' || s === 'infinity') return Infinity;
  const n = Number(s);
  if (s === '' || !Number.isFinite(n)) throw new Error(`${flag} needs a number, got "${v}"`);
  return n;
}

/** A JSON flag value, parsed. */
export function flagJson(flag: string, raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw new Error(`${flag} needs JSON, got ${raw}`);
  }
}
