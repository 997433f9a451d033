// The one place where bus payloads become bytes and back: JSON text in UTF-8. An empty payload is
// reserved as the end-of-stream sentinel of a multi-reply request, so no value ever encodes to
// zero bytes (undefined is sent as `null`). Never touches subjects, headers or connections.

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** The end-of-stream marker of `requestStream`: a message with no bytes at all. */
export const SENTINEL: Uint8Array = new Uint8Array(0);

/** A payload that is not valid UTF-8 JSON. Carries the subject when the caller knows it. */
export class PayloadDecodeError extends Error {
  override readonly name = 'PayloadDecodeError';
  readonly code = 'bus_bad_payload';
  constructor(
    readonly size: number,
    options?: ErrorOptions,
  ) {
    super(`bus payload of ${size} bytes is not valid JSON`, options);
  }
}

/** Value → JSON bytes. Never returns an empty array: `undefined` travels as `null`. */
export function encode(value: unknown): Uint8Array {
  const text = JSON.stringify(value);
  // JSON.stringify answers undefined for undefined, functions and symbols: send `null` instead
  // of nothing, because nothing is the sentinel.
  return encoder.encode(text === undefined ? 'null' : text);
}

/** JSON bytes → value. The sentinel (empty payload) decodes to `undefined`. */
export function decode(data: Uint8Array): unknown {
  if (data.length === 0) return undefined;
  try {
    return JSON.parse(decoder.decode(data));
  } catch (err) {
    throw new PayloadDecodeError(data.length, { cause: err });
  }
}

/** True for the empty payload that ends a multi-reply stream. */
export function isSentinel(data: Uint8Array): boolean {
  return data.length === 0;
}
