// The prefix cache of the realistic cost model, behaving as SGLang's RadixCache does with a page
// size: a radix tree over token ids whose edges are whole pages, so matches and inserts are
// truncated to page multiples; a match refreshes the access time of every node on its path and
// splits the node it ends inside; running requests hold lock refs on their matched path; eviction
// frees least recently used leaves that no lock holds, and only when the caller is short of KV.
// It counts tokens, not KV slots, and knows nothing of requests: the batch engine locks, inserts
// and evicts. It never schedules and never touches a wire.

/** What the cache tells an observer (the KV-event relay): whole pages, with the path before them. */
export interface CacheListener {
  /** `tokens` is the path from the root to the new node's end; the node is `tokens[from:]`. */
  stored?(tokens: readonly number[], from: number): void;
  /** The evicted node is `tokens[from:]`, `tokens` its path from the root. */
  removed?(tokens: readonly number[], from: number): void;
}

export class RadixNode {
  readonly children = new Map<string, RadixNode>();
  lockRef = 0;
  accessedAt = 0;
  /** Breaks ties between equal access times: the later access is the more recent. */
  accessOrder = 0;

  constructor(
    public key: number[],
    public parent: RadixNode | null,
  ) {}

  get isLeaf(): boolean {
    return this.children.size === 0;
  }
}

export interface CacheMatch {
  /** Matched tokens: a multiple of the page size. */
  length: number;
  /** The node the match ends at (the root when nothing matched): what a request locks. */
  node: RadixNode;
}

export interface CacheCounters {
  /** Tokens in the tree (locked and unlocked). */
  tokens: number;
  /** Tokens no lock holds: what eviction could free. */
  evictableTokens: number;
  evictions: number;
  evictedTokens: number;
}

export class RadixCache {
  private root = new RadixNode([], null);
  private size = 0;
  private protectedSize = 0;
  private order = 0;
  evictions = 0;
  evictedTokens = 0;

  constructor(
    readonly pageSize: number,
    private readonly now: () => number,
    private readonly listener: CacheListener = {},
  ) {
    if (!Number.isInteger(pageSize) || pageSize < 1) throw new Error('pageSize must be a positive integer');
  }

  get rootNode(): RadixNode {
    return this.root;
  }

  /** Tokens in the tree. */
  get tokens(): number {
    return this.size;
  }

  get evictableTokens(): number {
    return this.size - this.protectedSize;
  }

  counters(): CacheCounters {
    return { tokens: this.size, evictableTokens: this.evictableTokens, evictions: this.evictions, evictedTokens: this.evictedTokens };
  }

  /**
   * The longest cached prefix of `key`, page-aligned. Every node on the path is touched (access
   * time refreshed); a match that ends inside a node splits it there, so the match ends at a node.
   */
  match(key: readonly number[]): CacheMatch {
    const { aligned, stamp } = this.walkFrom(key);
    let node = this.root;
    let at = 0;
    while (at < aligned) {
      const child = node.children.get(this.edge(key, at));
      if (!child) break;
      this.touch(child, stamp);
      const n = this.common(child.key, key, at, aligned);
      if (n < child.key.length) {
        node = this.split(child, n);
        at += n;
        break;
      }
      node = child;
      at += n;
    }
    return { length: at, node };
  }

  /** A walk down `key` that refreshes access times: its page-aligned length and its stamp, the root touched. */
  private walkFrom(key: readonly number[]): { aligned: number; stamp: { at: number; order: number } } {
    const aligned = this.aligned(key.length);
    const stamp = this.stamp();
    this.touch(this.root, stamp);
    return { aligned, stamp };
  }

  /** The cached prefix length of `key`, page-aligned, changing nothing (no touch, no split). */
  peek(key: readonly number[]): number {
    const aligned = this.aligned(key.length);
    let node = this.root;
    let at = 0;
    while (at < aligned) {
      const child = node.children.get(this.edge(key, at));
      if (!child) break;
      const n = this.common(child.key, key, at, aligned);
      at += n;
      if (n < child.key.length) break;
      node = child;
    }
    return at;
  }

  /**
   * Inserts `key` truncated to whole pages; returns how many of those tokens were already in the
   * tree (the caller frees its own copy of them). New nodes start unlocked, hence evictable.
   */
  insert(key: readonly number[]): number {
    const { aligned, stamp } = this.walkFrom(key);
    let node = this.root;
    let at = 0;
    while (at < aligned) {
      const child = node.children.get(this.edge(key, at));
      if (!child) {
        const leaf = new RadixNode(key.slice(at, aligned), node);
        this.touch(leaf, stamp);
        node.children.set(this.edge(key, at), leaf);
        this.size += leaf.key.length;
        this.listener.stored?.(key.slice(0, aligned), at);
        return at;
      }
      this.touch(child, stamp);
      const n = this.common(child.key, key, at, aligned);
      node = n < child.key.length ? this.split(child, n) : child;
      at += n;
    }
    return at;
  }

  /** A running request holds `node` and every node above it: none of them can be evicted. */
  lock(node: RadixNode): void {
    for (let n: RadixNode | null = node; n && n !== this.root; n = n.parent) {
      if (n.lockRef === 0) this.protectedSize += n.key.length;
      n.lockRef++;
    }
  }

  unlock(node: RadixNode): void {
    for (let n: RadixNode | null = node; n && n !== this.root; n = n.parent) {
      if (n.lockRef <= 0) throw new Error('radix cache: unlock without a lock');
      n.lockRef--;
      if (n.lockRef === 0) this.protectedSize -= n.key.length;
    }
  }

  /**
   * Frees at least `tokens` tokens (whole nodes) from unlocked leaves, least recently used first;
   * a parent left childless and unlocked becomes a candidate in turn. Returns the tokens freed
   * (less than asked when every remaining node is locked).
   */
  evict(tokens: number): number {
    const heap = new LeafHeap();
    for (const leaf of this.leaves()) if (leaf.lockRef === 0) heap.push(leaf);
    let freed = 0;
    while (freed < tokens) {
      const leaf = heap.pop();
      if (!leaf) break;
      const path = this.pathTo(leaf);
      const from = path.length - leaf.key.length;
      const parent = leaf.parent!;
      parent.children.delete(this.edge(leaf.key, 0));
      leaf.parent = null;
      this.size -= leaf.key.length;
      freed += leaf.key.length;
      this.evictions++;
      this.evictedTokens += leaf.key.length;
      this.listener.removed?.(path, from);
      if (parent !== this.root && parent.isLeaf && parent.lockRef === 0) heap.push(parent);
    }
    return freed;
  }

  /** Drops the whole tree (a flush). Refused while any lock is held: a running request uses it. */
  reset(): void {
    if (this.protectedSize > 0) throw new Error('radix cache: reset while requests hold it');
    this.root = new RadixNode([], null);
    this.size = 0;
  }

  /** Token ids from the root to the end of `node`. */
  pathTo(node: RadixNode): number[] {
    const parts: number[][] = [];
    for (let n: RadixNode | null = node; n && n !== this.root; n = n.parent) parts.push(n.key);
    return parts.reverse().flat();
  }

  private *leaves(): Generator<RadixNode> {
    const stack = [...this.root.children.values()];
    while (stack.length > 0) {
      const n = stack.pop()!;
      if (n.isLeaf) yield n;
      else stack.push(...n.children.values());
    }
  }

  private aligned(length: number): number {
    return Math.floor(length / this.pageSize) * this.pageSize;
  }

  /** A child's edge label: its first page. */
  private edge(key: readonly number[], at: number): string {
    return key.slice(at, at + this.pageSize).join(',');
  }

  /** Tokens of `nodeKey` equal to `key[at:end]`, counted in whole pages. */
  private common(nodeKey: readonly number[], key: readonly number[], at: number, end: number): number {
    const limit = Math.min(nodeKey.length, end - at);
    let i = 0;
    while (i < limit && nodeKey[i] === key[at + i]) i++;
    return this.aligned(i);
  }

  /** Cuts `child` after `n` tokens; returns the new upper node (it inherits the locks). */
  private split(child: RadixNode, n: number): RadixNode {
    const parent = child.parent!;
    const upper = new RadixNode(child.key.slice(0, n), parent);
    upper.lockRef = child.lockRef;
    upper.accessedAt = child.accessedAt;
    upper.accessOrder = child.accessOrder;
    parent.children.set(this.edge(child.key, 0), upper);
    child.key = child.key.slice(n);
    child.parent = upper;
    upper.children.set(this.edge(child.key, 0), child);
    return upper;
  }

  private stamp(): { at: number; order: number } {
    return { at: this.now(), order: ++this.order };
  }

  private touch(node: RadixNode, stamp: { at: number; order: number }): void {
    node.accessedAt = stamp.at;
    node.accessOrder = stamp.order;
  }
}

/** Leaves by last access, oldest on top. */
class LeafHeap {
  private readonly items: RadixNode[] = [];

  push(n: RadixNode): void {
    const a = this.items;
    a.push(n);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!older(a[i], a[p])) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }

  pop(): RadixNode | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0];
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && older(a[l], a[m])) m = l;
        if (r < a.length && older(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}

function older(a: RadixNode, b: RadixNode): boolean {
  return a.accessedAt !== b.accessedAt ? a.accessedAt < b.accessedAt : a.accessOrder < b.accessOrder;
}
