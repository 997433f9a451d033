// What `release_memory_occupation` / `resume_memory_occupation` do to a simulated engine: the
// released tags, and a scheduler gate held shut while any tag is released. Shared by the SGLang
// and TokenSpeed simulators; it never answers a route and never schedules anything itself.

/** What a release or resume without `tags` covers. */
export const MEMORY_TAGS = ['weights', 'kv_cache', 'cuda_graph'] as const;

export class MemoryGate {
  readonly released = new Set<string>();
  private unlock: (() => void) | null = null;

  /** `lockGate` shuts the scheduler's admission gate and returns what reopens it. */
  constructor(private readonly lockGate: () => () => void) {}

  release(tags: readonly string[]): void {
    for (const t of tags) this.released.add(t);
    if (this.released.size > 0 && !this.unlock) this.unlock = this.lockGate();
  }

  resume(tags: readonly string[]): void {
    for (const t of tags) this.released.delete(t);
    if (this.released.size === 0 && this.unlock) {
      this.unlock();
      this.unlock = null;
    }
  }
}
