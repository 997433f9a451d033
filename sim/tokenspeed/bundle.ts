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

export function zipStored(files: ReadonlyArray<{ name: string; content: Buffer }>): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const f of files) {
    const name = Buffer.from(f.name, 'utf8');
    const crc = crc32(f.content) >>> 0;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(UTF8_FLAG, 6);
    local.writeUInt16LE(0, 8); // method: stored
    local.writeUInt16LE(DOS_TIME, 10);
    local.writeUInt16LE(DOS_DATE, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(f.content.length, 18);
    local.writeUInt32LE(f.content.length, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(UTF8_FLAG, 8);
    central.writeUInt16LE(0, 10);
    central.writeUInt16LE(DOS_TIME, 12);
    central.writeUInt16LE(DOS_DATE, 14);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(f.content.length, 20);
    central.writeUInt32LE(f.content.length, 24);
    central.writeUInt16LE(name.length, 28);
    // extra, comment, disk, internal and external attributes stay 0
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
