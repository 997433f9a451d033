// A small msgpack encoder for the payloads the gateway sends on the ZMQ lane. It exists because
// the TokenSpeed wire types its fields: a float field must be a float64 even when its value is
// 1.0 (a general encoder would write the integer 1), and integers take msgspec's shortest forms.
// It writes values only; what a payload contains is wire.ts's and handshake.ts's business.

export class MsgpackWriter {
  private buf: Buffer;
  private pos = 0;

  constructor(initial = 256) {
    this.buf = Buffer.allocUnsafe(Math.max(16, initial));
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  nil(): void {
    this.room(1);
    this.buf[this.pos++] = 0xc0;
  }

  bool(v: boolean): void {
    this.room(1);
    this.buf[this.pos++] = v ? 0xc3 : 0xc2;
  }

  /** Shortest msgpack integer form; throws on a non-integer (a caller bug, not engine input). */
  int(v: number): void {
    if (!Number.isSafeInteger(v)) throw new TypeError(`msgpack int needs a safe integer, got ${v}`);
    this.room(9);
    const b = this.buf;
    if (v >= 0) {
      if (v < 0x80) b[this.pos++] = v;
      else if (v <= 0xff) {
        b[this.pos++] = 0xcc;
        b[this.pos++] = v;
      } else if (v <= 0xffff) {
        b[this.pos++] = 0xcd;
        b.writeUInt16BE(v, this.pos);
        this.pos += 2;
      } else if (v <= 0xffffffff) {
        b[this.pos++] = 0xce;
        b.writeUInt32BE(v, this.pos);
        this.pos += 4;
      } else {
        b[this.pos++] = 0xcf;
        b.writeBigUInt64BE(BigInt(v), this.pos);
        this.pos += 8;
      }
    } else if (v >= -32) b[this.pos++] = v & 0xff;
    else if (v >= -0x80) {
      b[this.pos++] = 0xd0;
      b.writeInt8(v, this.pos);
      this.pos += 1;
    } else if (v >= -0x8000) {
      b[this.pos++] = 0xd1;
      b.writeInt16BE(v, this.pos);
      this.pos += 2;
    } else if (v >= -0x80000000) {
      b[this.pos++] = 0xd2;
      b.writeInt32BE(v, this.pos);
      this.pos += 4;
    } else {
      b[this.pos++] = 0xd3;
      b.writeBigInt64BE(BigInt(v), this.pos);
      this.pos += 8;
    }
  }

  f64(v: number): void {
    this.room(9);
    this.buf[this.pos++] = 0xcb;
    this.buf.writeDoubleBE(v, this.pos);
    this.pos += 8;
  }

  str(s: string): void {
    const len = Buffer.byteLength(s, 'utf8');
    this.room(5 + len);
    const b = this.buf;
    if (len < 32) b[this.pos++] = 0xa0 | len;
    else if (len <= 0xff) {
      b[this.pos++] = 0xd9;
      b[this.pos++] = len;
    } else if (len <= 0xffff) {
      b[this.pos++] = 0xda;
      b.writeUInt16BE(len, this.pos);
      this.pos += 2;
    } else {
      b[this.pos++] = 0xdb;
      b.writeUInt32BE(len, this.pos);
      this.pos += 4;
    }
    this.pos += b.write(s, this.pos, len, 'utf8');
  }

  arrayHeader(n: number): void {
    this.room(5);
    const b = this.buf;
    if (n < 16) b[this.pos++] = 0x90 | n;
    else if (n <= 0xffff) {
      b[this.pos++] = 0xdc;
      b.writeUInt16BE(n, this.pos);
      this.pos += 2;
    } else {
      b[this.pos++] = 0xdd;
      b.writeUInt32BE(n, this.pos);
      this.pos += 4;
    }
  }

  mapHeader(n: number): void {
    this.room(5);
    const b = this.buf;
    if (n < 16) b[this.pos++] = 0x80 | n;
    else if (n <= 0xffff) {
      b[this.pos++] = 0xde;
      b.writeUInt16BE(n, this.pos);
      this.pos += 2;
    } else {
      b[this.pos++] = 0xdf;
      b.writeUInt32BE(n, this.pos);
      this.pos += 4;
    }
  }

  /** The bytes written so far (a view of this writer's buffer; do not write after calling). */
  done(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}
