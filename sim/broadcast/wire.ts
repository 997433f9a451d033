// The broadcast group's wire: frame layout, the incremental frame reader, the group's error
// codes, and waiting for a socket's back-pressure to clear. It never decides group policy
// (who may join, when a broadcast is done): master.ts and member.ts do. Layout in README.md.

import type { Socket } from 'node:net';

export const PROTOCOL_VERSION = 1;

/** Frame types; the comment says who sends each. */
export const FrameType = {
  hello: 1, // member → master: {protocol, group, rank, world_size}
  formed: 2, // master → member: {world_size}; every rank has joined
  error: 3, // master → member: {code, message}; the master closes the connection after it
  tensor: 4, // master → member: {seq, name, bytes}, then exactly `bytes` raw bytes
  ack: 5, // member → master: {seq}; that tensor was received whole on this rank
} as const;
export type FrameTypeCode = (typeof FrameType)[keyof typeof FrameType];

export interface HelloBody {
  protocol: number;
  group: string;
  rank: number;
  world_size: number;
}
export interface FormedBody {
  world_size: number;
}
export interface ErrorBody {
  code: GroupErrorCode;
  message: string;
}
export interface TensorHeader {
  seq: number;
  name: string;
  bytes: number;
}
export interface AckBody {
  seq: number;
}

export type GroupErrorCode =
  | 'invalid_params' // a caller passed a bad worldSize / rank / gpus
  | 'group_mismatch' // hello names another group
  | 'world_size_mismatch' // hello names another world size
  | 'rank_taken' // rank already joined (or rank 0, the master's)
  | 'rank_out_of_range' // rank < 0 or rank ≥ world size
  | 'protocol_error' // a frame that makes no sense here
  | 'rendezvous_timeout' // not every rank joined in time
  | 'master_unreachable' // the member could not connect before its deadline
  | 'master_lost' // the master closed or dropped a member's connection
  | 'member_lost' // a member's connection closed after the group formed (names the rank)
  | 'receive_timeout' // a member's receive passed its deadline
  | 'broadcast_timeout' // the master stopped waiting for a broadcast
  | 'size_mismatch' // the bytes on the wire differ from the receiver's spec, or data ≠ spec
  | 'unknown_dtype'
  | 'invalid_shape'
  | 'rank_disagreement' // local ranks of one engine received different bytes
  | 'busy' // a second receive while one is running
  | 'group_closed'; // close() was called

/** Every failure of the group carries a stable code; `rank` names the member at fault. */
export class GroupError extends Error {
  override readonly name = 'GroupError';
  constructor(
    readonly code: GroupErrorCode,
    message: string,
    readonly rank?: number,
  ) {
    super(message);
  }
}

const HEADER_BYTES = 5; // type u8 + body length u32 BE
const MAX_BODY_BYTES = 1 << 20; // control bodies are tiny; a larger length means a desync

export function encodeFrame(type: FrameTypeCode, body: object): Buffer {
  const json = Buffer.from(JSON.stringify(body), 'utf8');
  const frame = Buffer.allocUnsafe(HEADER_BYTES + json.length);
  frame.writeUInt8(type, 0);
  frame.writeUInt32BE(json.length, 1);
  json.copy(frame, HEADER_BYTES);
  return frame;
}

export type WireEvent =
  | { kind: 'frame'; type: number; body: Record<string, unknown> }
  | { kind: 'data'; chunk: Buffer } // a slice of the current tensor's raw bytes (no copy)
  | { kind: 'data_end' }; // the current tensor's bytes are complete

/**
 * Pull parser over a byte stream: `feed` what the socket gave, `next` what can be parsed. Raw
 * tensor bytes come out as slices of the received chunks, never copied or joined, so a tensor
 * of any size streams through in socket-sized pieces; only control frames are concatenated.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private rawLeft = -1; // ≥ 0 while inside a tensor's raw bytes

  feed(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /** Bytes received but not yet handed out. */
  get pending(): number {
    return this.buffered;
  }

  /** The next event, or null when more bytes are needed. Throws GroupError on a bad frame. */
  next(): WireEvent | null {
    if (this.rawLeft === 0) {
      this.rawLeft = -1;
      return { kind: 'data_end' };
    }
    if (this.rawLeft > 0) {
      const head = this.chunks[0];
      if (head === undefined) return null;
      const n = Math.min(head.length, this.rawLeft);
      this.rawLeft -= n;
      return { kind: 'data', chunk: this.consume(n) };
    }
    if (this.buffered < HEADER_BYTES) return null;
    const header = this.peek(HEADER_BYTES);
    const type = header.readUInt8(0);
    const length = header.readUInt32BE(1);
    if (length > MAX_BODY_BYTES) throw new GroupError('protocol_error', `frame body of ${length} bytes`);
    if (this.buffered < HEADER_BYTES + length) return null;
    this.consume(HEADER_BYTES);
    let body: unknown;
    try {
      body = JSON.parse(this.consume(length).toString('utf8'));
    } catch {
      throw new GroupError('protocol_error', `frame type ${type}: body is not JSON`);
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new GroupError('protocol_error', `frame type ${type}: body is not an object`);
    }
    const record = body as Record<string, unknown>;
    if (type === FrameType.tensor) {
      const bytes = record.bytes;
      if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 0) {
        throw new GroupError('protocol_error', 'tensor frame without a valid byte count');
      }
      this.rawLeft = bytes;
    }
    return { kind: 'frame', type, body: record };
  }

  private peek(n: number): Buffer {
    const head = this.chunks[0]!;
    return head.length >= n ? head.subarray(0, n) : Buffer.concat(this.chunks, n);
  }

  /** Remove and return the first n buffered bytes (n ≤ buffered); a slice when it fits one chunk. */
  private consume(n: number): Buffer {
    this.buffered -= n;
    const head = this.chunks[0]!;
    if (head.length > n) {
      this.chunks[0] = head.subarray(n);
      return head.subarray(0, n);
    }
    if (head.length === n) {
      this.chunks.shift();
      return head;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.chunks[0]!;
      const take = Math.min(chunk.length, n - filled);
      chunk.copy(out, filled, 0, take);
      filled += take;
      if (take === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(take);
    }
    return out;
  }
}

/**
 * Resolves when `socket` has flushed its write queue ('drain'); rejects if it closes first.
 * Callers await this only after `write()` returned false, which is what keeps memory bounded.
 */
export function drained(socket: Socket, onClose: () => Error): Promise<void> {
  if (socket.destroyed) return Promise.reject(onClose());
  return new Promise((resolve, reject) => {
    const done = (err?: Error): void => {
      socket.off('drain', ok);
      socket.off('close', closed);
      if (err) reject(err);
      else resolve();
    };
    const ok = (): void => done();
    const closed = (): void => done(onClose());
    socket.on('drain', ok);
    socket.on('close', closed);
  });
}
