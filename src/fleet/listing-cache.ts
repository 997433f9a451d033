// Each listed engine's JSON, kept while what it was made from stays the same: a listing of a
// large fleet serialises only the rows that changed since the last one (at 10,000 engines the
// whole answer is about 10 MB). It owns the strings and the sweep of rows no longer listed; what
// a row is made from, and how it is built, is its caller's.

interface Entry {
  deps: readonly unknown[];
  json: string;
  pass: number;
}

export class ListingCache {
  private readonly entries = new Map<string, Entry>();
  private pass = 0;
  private touched = 0;

  /** Starts a listing: rows not asked for again before the next `end()` are forgotten then. */
  begin(): void {
    this.pass++;
    this.touched = 0;
  }

  /**
   * The row's JSON: the cached one while every dependency is the same (`===`, in order), else
   * `build()`'s value serialised. A row's registry facts count as one dependency when they are one
   * immutable object (a registry write replaces the object).
   */
  json(id: string, deps: readonly unknown[], build: () => unknown): string {
    const e = this.entries.get(id);
    const first = e?.pass !== this.pass;
    if (first) this.touched++;
    if (e && sameDeps(e.deps, deps)) {
      e.pass = this.pass;
      return e.json;
    }
    const json = JSON.stringify(build());
    this.entries.set(id, { deps, json, pass: this.pass });
    return json;
  }

  /** Ends a listing: the rows of engines that left are dropped. */
  end(): void {
    if (this.touched === this.entries.size) return;
    for (const [id, e] of this.entries) if (e.pass !== this.pass) this.entries.delete(id);
  }

  /** Rows held (for tests and the memory figures). */
  get size(): number {
    return this.entries.size;
  }
}

function sameDeps(a: readonly unknown[], b: readonly unknown[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
