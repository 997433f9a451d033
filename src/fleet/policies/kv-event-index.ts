// What cache_aware asks of the engines' own KV events when it has them: an index, fed from the
// engines' KV-cache events (block stored, block removed; TokenSpeed's SubscribeKvEvents), of which
// engine holds which blocks of which prompts. The policy only reads it; how blocks are hashed and
// events applied is the index's business, so the hash matches whatever the engines report. Types
// only.

export interface KvOverlap {
  /** Worker id → how many of the request's leading full blocks it holds (0 or absent: none). */
  scores: ReadonlyMap<string, number>;
  /** Worker id → every block it holds: the smaller wins a tie. */
  blocks: ReadonlyMap<string, number>;
}

export interface KvEventIndex {
  /** Blocks held in all by the model's engines: 0 while nothing is known (startup, a reconnect), when the approximate tree routes instead. */
  size(modelId: string | undefined): number;
  /** The request's overlap with each engine of the model. */
  overlap(modelId: string | undefined, tokens: readonly number[]): KvOverlap;
}
