// A synthetic model's parameter list, cut into the chunks a trainer sends one
// `update_weights_from_distributed` call at a time. Pure: it never
// produces tensor bytes; the broadcast group generates those from each name and the version.

export interface Chunk {
  names: string[];
  /** torch dtype names without the `torch.` prefix, one per name. */
  dtypes: string[];
  shapes: number[][];
}

export interface MakeChunksOptions {
  /** Number of parameters in the model. */
  params: number;
  /** Parameters per chunk (SMG's reference trainer uses 64). */
  perChunk: number;
  /** Shape of every parameter; default [256, 256]. */
  shape?: number[];
  /** Default `bfloat16`. */
  dtype?: string;
}

export const DEFAULT_SHAPE: readonly number[] = [256, 256];
export const DEFAULT_DTYPE = 'bfloat16';

/** `params` parameters named `model.layers.<i>.mlp.weight`, `perChunk` to a chunk, in order. */
export function makeChunks(opts: MakeChunksOptions): Chunk[] {
  const { params, perChunk } = opts;
  if (!Number.isSafeInteger(params) || params < 0) throw new RangeError(`params must be an integer ≥ 0, got ${params}`);
  if (!Number.isSafeInteger(perChunk) || perChunk < 1) {
    throw new RangeError(`perChunk must be an integer ≥ 1, got ${perChunk}`);
  }
  const shape = opts.shape ?? DEFAULT_SHAPE;
  const dtype = opts.dtype ?? DEFAULT_DTYPE;
  const chunks: Chunk[] = [];
  for (let start = 0; start < params; start += perChunk) {
    const n = Math.min(perChunk, params - start);
    chunks.push({
      names: Array.from({ length: n }, (_, j) => `model.layers.${start + j}.mlp.weight`),
      dtypes: Array.from({ length: n }, () => dtype),
      shapes: Array.from({ length: n }, () => [...shape]), // copies: a caller may mutate one
    });
  }
  return chunks;
}

/**
 * How many parameters of `shape` and `dtype` hold `bytes` bytes, rounded up to whole parameters
 * (so a model of that many parameters moves at least `bytes`). `bytesPerParam` is one
 * parameter's size (the broadcast group's width of `dtype` × the elements of `shape`).
 */
export function paramsForBytes(bytes: number, bytesPerParam: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw new RangeError(`bytes must be an integer ≥ 1, got ${bytes}`);
  if (!Number.isSafeInteger(bytesPerParam) || bytesPerParam < 1) {
    throw new RangeError(`a parameter must be at least 1 byte, got ${bytesPerParam}`);
  }
  return Math.ceil(bytes / bytesPerParam);
}
