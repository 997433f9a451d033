// cache_aware's approximate tree: a radix tree of the prompts routed to each engine (its tenant),
// standing in for the engines' own prefix caches, which the gateway cannot see. It holds routed
// prompts only, as strings cut in units: one UTF-16 code unit for text, one page of 16 tokens
// (token-pages.ts) for token ids, so that only whole pages match, as in SGLang's radix cache.
//
// Each node records, per tenant, when the tenant last had a prompt routed through it. A tenant
// that holds a node holds every node above it, so eviction, per tenant and least recently used
// first, only ever takes a tenant off a node none of whose children it holds (its leaf), and
// SMG's `evict_tenant_by_size` bound holds after it: no tenant above `max` units. Time here is a
// counter, not a clock: LRU needs only the order of accesses. Pure: no I/O, no timers.

interface Node {
  /** The edge from the parent: a whole number of units. */
  edge: string;
  /** By the edge's first unit. */
  children: Map<string, Node>;
  /** Tenant → the access counter when a prompt last went through this node to it. */
  tenants: Map<string, number>;
  parent: Node | null;
}

export interface TreeMatch {
  /** Code units of the prompt matched, a whole number of units. */
  matched: number;
  /** The eligible tenant holding the longest match (the most recently used among several); undefined when nothing matched. */
  tenant: string | undefined;
}

export class PrefixTree {
  private readonly root: Node = { edge: '', children: new Map(), tenants: new Map(), parent: null };
  /** Per tenant, what it holds, in size units (characters, tokens). */
  private readonly sizes = new Map<string, number>();
  private clock = 0;

  /**
   * @param unit code units per unit of matching (1 for text, a page's worth for tokens); prompts
   *   handed in are a whole number of units long.
   * @param unitSize what one unit counts toward a tenant's size (1 character; 16 tokens).
   */
  constructor(
    private readonly unit = 1,
    private readonly unitSize = 1,
  ) {}

  /** What `tenant` holds, in characters or tokens. */
  sizeOf(tenant: string): number {
    return this.sizes.get(tenant) ?? 0;
  }

  /** The tenants holding anything. */
  tenants(): string[] {
    return [...this.sizes.keys()];
  }

  /** The longest prefix of `prompt` that an eligible tenant holds. */
  match(prompt: string, eligible: (tenant: string) => boolean): TreeMatch {
    const { unit } = this;
    let node = this.root;
    let at = 0;
    let tenant: string | undefined;
    while (at < prompt.length) {
      const child = node.children.get(prompt.slice(at, at + unit));
      if (!child) break;
      const holder = latestTenant(child, eligible);
      if (holder === undefined) break;
      const shared = this.shared(prompt, at, child.edge);
      at += shared;
      tenant = holder;
      if (shared < child.edge.length) break;
      node = child;
    }
    return { matched: at, tenant };
  }

  /**
   * How much of `prompt` each tenant holds: tenant → code units matched (whole units). One walk
   * down the prompt's path: a tenant holding a node holds every node above it, so its match ends
   * at the deepest node it holds.
   */
  matchAll(prompt: string): Map<string, number> {
    const out = new Map<string, number>();
    let node = this.root;
    let at = 0;
    while (at < prompt.length) {
      const child = node.children.get(prompt.slice(at, at + this.unit));
      if (!child) break;
      const shared = this.shared(prompt, at, child.edge);
      at += shared;
      for (const tenant of child.tenants.keys()) out.set(tenant, at);
      if (shared < child.edge.length) break;
      node = child;
    }
    return out;
  }

  /** Records `prompt` as routed to `tenant` now. */
  insert(prompt: string, tenant: string): void {
    const { unit } = this;
    const now = ++this.clock;
    let node = this.root;
    let at = 0;
    while (at < prompt.length) {
      const key = prompt.slice(at, at + unit);
      let child = node.children.get(key);
      if (!child) {
        const leaf: Node = { edge: prompt.slice(at), children: new Map(), tenants: new Map(), parent: node };
        node.children.set(key, leaf);
        this.hold(leaf, tenant, now);
        return;
      }
      const shared = this.shared(prompt, at, child.edge);
      if (shared < child.edge.length) {
        // The prompt leaves this edge part way: split it, the upper part held by all who held it.
        const upper: Node = { edge: child.edge.slice(0, shared), children: new Map(), tenants: new Map(child.tenants), parent: node };
        child.edge = child.edge.slice(shared);
        child.parent = upper;
        upper.children.set(child.edge.slice(0, unit), child);
        node.children.set(key, upper);
        child = upper;
      }
      this.hold(child, tenant, now);
      at += shared;
      node = child;
    }
  }

  /**
   * SMG's `evict_tenant_by_size`: every tenant holding more than `max` loses its least recently
   * used leaves, one at a time (a parent left without the tenant's children becomes its leaf),
   * until it holds `max` or less. Nodes no tenant holds are dropped.
   */
  evictTenantBySize(max: number): void {
    const heap = new LeafHeap();
    const stack = [...this.root.children.values()];
    while (stack.length > 0) {
      const node = stack.pop()!;
      for (const child of node.children.values()) stack.push(child);
      for (const [tenant, at] of node.tenants) if (this.sizeOf(tenant) > max && isLeafOf(node, tenant)) heap.push({ at, tenant, node });
    }
    for (let e = heap.pop(); e !== undefined; e = heap.pop()) {
      const { tenant, node } = e;
      if (this.sizeOf(tenant) <= max || !node.tenants.has(tenant) || !isLeafOf(node, tenant)) continue;
      this.release(node, tenant);
      const parent = node.parent;
      if (parent && parent !== this.root && parent.tenants.has(tenant) && isLeafOf(parent, tenant)) {
        heap.push({ at: parent.tenants.get(tenant)!, tenant, node: parent });
      }
    }
  }

  /** Forgets everything routed to `tenant` (its engine is gone, or its cache was emptied). */
  removeTenant(tenant: string): void {
    if (!this.sizes.has(tenant)) return;
    // Children before parents, so a node emptied of its last child can go too.
    const order: Node[] = [];
    const stack = [...this.root.children.values()];
    while (stack.length > 0) {
      const node = stack.pop()!;
      if (!node.tenants.has(tenant)) continue;
      order.push(node);
      for (const child of node.children.values()) stack.push(child);
    }
    for (let i = order.length - 1; i >= 0; i--) this.release(order[i]!, tenant);
    this.sizes.delete(tenant);
  }

  /** Code units `prompt` from `at` shares with `edge`, rounded down to whole units. */
  private shared(prompt: string, at: number, edge: string): number {
    const n = Math.min(edge.length, prompt.length - at);
    let i = 0;
    while (i < n && prompt.charCodeAt(at + i) === edge.charCodeAt(i)) i++;
    return i - (i % this.unit);
  }

  private hold(node: Node, tenant: string, now: number): void {
    if (!node.tenants.has(tenant)) this.sizes.set(tenant, this.sizeOf(tenant) + (node.edge.length / this.unit) * this.unitSize);
    node.tenants.set(tenant, now);
  }

  private release(node: Node, tenant: string): void {
    node.tenants.delete(tenant);
    const left = this.sizeOf(tenant) - (node.edge.length / this.unit) * this.unitSize;
    if (left > 0) this.sizes.set(tenant, left);
    else this.sizes.delete(tenant);
    if (node.tenants.size === 0 && node.children.size === 0 && node.parent) node.parent.children.delete(node.edge.slice(0, this.unit));
  }
}

/** The tenant of `node` that `eligible` admits and that used it last. */
function latestTenant(node: Node, eligible: (tenant: string) => boolean): string | undefined {
  let best: string | undefined;
  let bestAt = -1;
  for (const [tenant, at] of node.tenants) {
    if (at > bestAt && eligible(tenant)) {
      best = tenant;
      bestAt = at;
    }
  }
  return best;
}

function isLeafOf(node: Node, tenant: string): boolean {
  for (const child of node.children.values()) if (child.tenants.has(tenant)) return false;
  return true;
}

interface LeafEntry {
  at: number;
  tenant: string;
  node: Node;
}

/** A binary min-heap of leaves by last access. */
class LeafHeap {
  private readonly items: LeafEntry[] = [];

  push(e: LeafEntry): void {
    const a = this.items;
    a.push(e);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]!.at <= e.at) break;
      a[i] = a[p]!;
      i = p;
    }
    a[i] = e;
  }

  pop(): LeafEntry | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= a.length) break;
      const c = l + 1 < a.length && a[l + 1]!.at < a[l]!.at ? l + 1 : l;
      if (a[c]!.at >= last.at) break;
      a[i] = a[c]!;
      i = c;
    }
    a[i] = last;
    return top;
  }
}
