// Tensor sizes for the broadcast group: the byte width of every dtype the engines name
// and the size of one tensor from its spec. Pure; never touches a socket.
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

/**
 * The first `n` values of a tensor from its leading bytes (little-endian, as torch lays them out):
 * what reading a parameter back (`/get_weights_by_name`) shows, and what a trainer expects it to.
 * Values that are not finite come out as null, as JSON carries them.
 */
export function decodeValues(dtype: string, bytes: Buffer, n: number): Array<number | null> {
  const width = dtypeWidth(dtype);
  if (width === undefined) return [];
  const out: Array<number | null> = [];
  for (let i = 0; i < n && (i + 1) * width <= bytes.length; i++) {
    const off = i * width;
    let v: number;
    switch (dtype) {
      case 'float32':
        v = bytes.readFloatLE(off);
        break;
      case 'bfloat16': {
        const four = Buffer.alloc(4);
        four[2] = bytes[off]!;
        four[3] = bytes[off + 1]!;
        v = four.readFloatLE(0);
        break;
      }
      case 'float16':
        v = halfToNumber(bytes.readUInt16LE(off));
        break;
      case 'int64':
        v = Number(bytes.readBigInt64LE(off));
        break;
      case 'int32':
        v = bytes.readInt32LE(off);
        break;
      case 'int8':
        v = bytes.readInt8(off);
        break;
      case 'bool':
        v = bytes[off] ? 1 : 0;
        break;
      default:
        v = bytes[off]!; // uint8 and the float8 kinds: the raw byte
    }
    out.push(Number.isFinite(v) ? v : null);
  }
  return out;
}

function halfToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}
