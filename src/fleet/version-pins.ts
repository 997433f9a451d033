// One version per GRPO group: the n samples of a prompt share an advantage baseline, so a group
// whose engines are mid-refit must not mix versions. The first sample of a group (the same prompt,
// or, where routing reads no prompt, the same routing key, within a window of the first) pins the
// version of the engine that took it; its siblings go only to engines of that version while one is
// eligible. When none is (every engine of that version is refitting, or done), the sibling goes
// where it can and the split is counted: refusing it would stall the trainer for a whole wave.
// Clocked by the caller; no timers.

/** Siblings arrive together (a trainer submits a group at once): a pin holds this long after the first sample. */
export const PIN_WINDOW_MS = 60_000;
/** Groups remembered at most, oldest out first. */
const MAX_PINS = 100_000;

export interface PinnedRequest {
  /** `X-SMG-Routing-Key`, if the request has one. */
  routingKey?: string;
  /** The prompt as token ids or text, if routing read it. */
  tokens?: readonly number[];
  text?: string;
}

/**
 * The key of a request's group: its prompt (GRPO siblings share it whole; slime gives each
 * sample its own routing key), else its routing key; undefined when it has neither.
 */
export function groupKey(r: PinnedRequest): string | undefined {
  if (r.tokens && r.tokens.length > 0) return `t:${hashTokens(r.tokens)}:${r.tokens.length}`;
  if (r.text !== undefined && r.text !== '') return `s:${hashText(r.text)}:${r.text.length}`;
  if (r.routingKey !== undefined) return `k:${r.routingKey}`;
  return undefined;
}

/** FNV-1a over the ids (32 bits, twice with two seeds: 64 bits of key for a map of 100,000). */
function hashTokens(ids: readonly number[]): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ ids.length;
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i]! | 0;
    a = Math.imul(a ^ v, 0x01000193);
    b = Math.imul(b ^ (v >>> 7), 0x01000193) ^ i;
  }
  return `${(a >>> 0).toString(36)}${(b >>> 0).toString(36)}`;
}

function hashText(s: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ (c >>> 3), 0x01000193) ^ i;
  }
  return `${(a >>> 0).toString(36)}${(b >>> 0).toString(36)}`;
}

export class VersionPins {
  /** Group key → the version its first sample was served on, and when the pin was last used. */
  private readonly pins = new Map<string, { version: string; at: number }>();

  constructor(private readonly clock: () => number) {}

  /** The version the group is pinned to, if a sibling came within the window. */
  pinned(key: string): string | undefined {
    const p = this.pins.get(key);
    if (!p) return undefined;
    if (this.clock() - p.at > PIN_WINDOW_MS) {
      this.pins.delete(key);
      return undefined;
    }
    return p.version;
  }

  /** A sample of the group went to an engine of `version`: the group's first (in its window) pins it. */
  served(key: string, version: string): void {
    if (this.pinned(key) !== undefined) return;
    this.pins.set(key, { version, at: this.clock() });
    if (this.pins.size > MAX_PINS) this.pins.delete(this.pins.keys().next().value!);
  }

  /**
   * Of `candidates`, those of the group's version; all of them when the group has no pin, or
   * when none is of its version (a split, reported through `split`).
   */
  narrow<C>(key: string | undefined, candidates: C[], versionOf: (c: C) => string | undefined, split: () => void): C[] {
    if (key === undefined || candidates.length === 0) return candidates;
    const v = this.pinned(key);
    if (v === undefined) return candidates;
    const same = candidates.filter((c) => versionOf(c) === v);
    if (same.length === 0) {
      split();
      return candidates;
    }
    return same.length === candidates.length ? candidates : same;
  }

  get size(): number {
    return this.pins.size;
  }
}
