// The tokenizer bundle GetTokenizer streams: the tokenizer files in a zip archive (stored, not
// compressed, fixed timestamps, so the same files always give the same bytes and sha256), cut
// into chunks with the sha256 on the last one. It never reads the file system.

import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';

/** Upstream streams the archive in chunks of this size. */
export const CHUNK_BYTES = 64 * 1024;

// 1980-01-01 00:00 in MS-DOS format: the zip epoch, so archives do not change with the clock.
const DOS_DATE = (1 << 5) | 1;
const DOS_TIME = 0;
const UTF8_FLAG = 0x0800;

/** The fields an entry's local and central headers share, from "version needed" to the name's length. */
function writeEntryFields(header: Buffer, at: number, crc: number, size: number, nameLength: number): void {
  header.writeUInt16LE(20, at); // version needed: 2.0
  header.writeUInt16LE(UTF8_FLAG, at + 2);
  header.writeUInt16LE(0, at + 4); // method: stored
  header.writeUInt16LE(DOS_TIME, at + 6);
  header.writeUInt16LE(DOS_DATE, at + 8);
  header.writeUInt32LE(crc, at + 10);
  header.writeUInt32LE(size, at + 14); // compressed = uncompressed: stored
  header.writeUInt32LE(size, at + 18);
  header.writeUInt16LE(nameLength, at + 22);
}

export function zipStored(files: ReadonlyArray<{ name: string; content: Buffer }>): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const f of files) {
    const name = Buffer.from(f.name, 'utf8');
    const crc = crc32(f.content) >>> 0;
    // Fields not written stay 0: the local header's extra length; the central header's extra,
    // comment, disk, internal and external attributes.
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    writeEntryFields(local, 4, crc, f.content.length, name.length);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4); // version made by
    writeEntryFields(central, 6, crc, f.content.length, name.length);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, f.content);
    centrals.push(central, name);
    offset += local.length + name.length + f.content.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}

export interface BundleChunk {
  data: Buffer;
  /** Hex sha256 of the whole archive on the final chunk, '' before it. */
  sha256: string;
}

/** The archive in GetTokenizerChunk order. An empty archive still yields one (final) chunk. */
export function bundleChunks(archive: Buffer, chunkBytes = CHUNK_BYTES): BundleChunk[] {
  const sha256 = createHash('sha256').update(archive).digest('hex');
  const out: BundleChunk[] = [];
  for (let at = 0; at < archive.length; at += chunkBytes) {
    const end = Math.min(archive.length, at + chunkBytes);
    out.push({ data: archive.subarray(at, end), sha256: end === archive.length ? sha256 : '' });
  }
  if (out.length === 0) out.push({ data: Buffer.alloc(0), sha256 });
  return out;
}
