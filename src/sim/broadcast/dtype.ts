// Tensor sizes for the broadcast group: the byte width of every dtype the engines name
// (spec/engines.md §6.6) and the size of one tensor from its spec. Pure; never touches a socket.
// Dtype names are torch's without the `torch.` prefix; anything else is unknown and rejected.

import type { Dtype, TensorSpec } from './types.ts';
import { GroupError } from './wire.ts';

export const DTYPE_WIDTH: Readonly<Record<Dtype, number>> = {
  float32: 4,
  bfloat16: 2,
  float16: 2,
  int64: 8,
  int32: 4,
  uint8: 1,
  int8: 1,
  bool: 1,
  float8_e4m3fn: 1,
  float8_e5m2: 1,
};

/** Byte width of `dtype`, or undefined when the group does not know it. */
export function dtypeWidth(dtype: string): number | undefined {
  return Object.hasOwn(DTYPE_WIDTH, dtype) ? DTYPE_WIDTH[dtype as Dtype] : undefined;
}

/**
 * Bytes of one tensor: product(shape) × dtype width (an empty shape is a scalar, one element).
 * Throws `unknown_dtype` or `invalid_shape` before a single byte moves, so a bad spec never
 * desynchronises a stream.
 */
export function tensorBytes(spec: TensorSpec): number {
  const width = dtypeWidth(spec.dtype);
  if (width === undefined) {
    throw new GroupError('unknown_dtype', `tensor ${spec.name}: unknown dtype ${JSON.stringify(spec.dtype)}`);
  }
  if (!Array.isArray(spec.shape)) {
    throw new GroupError('invalid_shape', `tensor ${spec.name}: shape must be an array of integers`);
  }
  let elements = 1;
  for (const dim of spec.shape) {
    if (!Number.isSafeInteger(dim) || dim < 0) {
      throw new GroupError('invalid_shape', `tensor ${spec.name}: bad dimension ${JSON.stringify(dim)}`);
    }
    elements *= dim;
  }
  const bytes = elements * width;
  if (!Number.isSafeInteger(bytes)) {
    throw new GroupError('invalid_shape', `tensor ${spec.name}: ${bytes} bytes is too large`);
  }
  return bytes;
}
