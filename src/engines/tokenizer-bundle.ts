// The engine's GetTokenizer bundle, in memory: the streamed chunks joined and checked against the
// sha256 the final chunk carries, then the zip archive read (stored or deflated entries) into
// name → bytes. It never touches the file system or the network, and never tokenizes anything.

import { createHash } from 'node:crypto';
import { inflateRawSync } from 'node:zlib';

export interface BundleChunk {
  data: Uint8Array;
  /** Hex sha256 of the whole archive; set on the final chunk only. */
  sha256: string;
}

export class BundleError extends Error {
  override readonly name = 'BundleError';
}

/** Joins the chunks in order; the archive must hash to the sha256 the stream announced. */
export function assembleBundle(chunks: readonly BundleChunk[]): { archive: Buffer; sha256: string } {
  const announced = [...chunks]
    .reverse()
    .find((c) => c.sha256)
    ?.sha256.toLowerCase();
  if (!announced) throw new BundleError('the tokenizer bundle carried no sha256');
  const archive = Buffer.concat(chunks.map((c) => Buffer.from(c.data.buffer, c.data.byteOffset, c.data.byteLength)));
  const actual = createHash('sha256').update(archive).digest('hex');
  if (actual !== announced) throw new BundleError(`the tokenizer bundle is corrupt: sha256 ${actual}, the engine announced ${announced}`);
  return { archive, sha256: actual };
}

const EOCD_SIG = 0x06054b50;
const CENTRAL_SIG = 0x02014b50;
const LOCAL_SIG = 0x04034b50;
const STORED = 0;
const DEFLATED = 8;
/** Refuse absurd entries rather than inflate them into memory (a tokenizer.json is tens of MB at most). */
const MAX_ENTRY_BYTES = 512 * 1024 * 1024;

/** Every file entry of a zip archive (directories skipped), by its path inside the archive. */
export function unzip(archive: Buffer): Map<string, Buffer> {
  const eocd = findEndOfCentralDirectory(archive);
  const count = archive.readUInt16LE(eocd + 10);
  const cdSize = archive.readUInt32LE(eocd + 12);
  const cdOffset = archive.readUInt32LE(eocd + 16);
  if (cdOffset === 0xffffffff || count === 0xffff) throw new BundleError('zip64 tokenizer bundles are not supported');
  if (cdOffset + cdSize > archive.length) throw new BundleError('truncated zip: central directory out of range');
  const files = new Map<string, Buffer>();
  let at = cdOffset;
  for (let i = 0; i < count; i++) {
    if (at + 46 > archive.length || archive.readUInt32LE(at) !== CENTRAL_SIG) throw new BundleError(`bad zip central entry ${i}`);
    const flags = archive.readUInt16LE(at + 8);
    const method = archive.readUInt16LE(at + 10);
    const compressed = archive.readUInt32LE(at + 20);
    const size = archive.readUInt32LE(at + 24);
    const nameLen = archive.readUInt16LE(at + 28);
    const extraLen = archive.readUInt16LE(at + 30);
    const commentLen = archive.readUInt16LE(at + 32);
    const localOffset = archive.readUInt32LE(at + 42);
    const name = archive.toString(flags & 0x0800 ? 'utf8' : 'latin1', at + 46, at + 46 + nameLen);
    at += 46 + nameLen + extraLen + commentLen;
    if (name.endsWith('/')) continue;
    if (flags & 0x0001) throw new BundleError(`zip entry ${name} is encrypted`);
    if (size > MAX_ENTRY_BYTES) throw new BundleError(`zip entry ${name} is too large (${size} bytes)`);
    // Sizes come from the central directory: local headers may defer them to a data descriptor.
    if (localOffset + 30 > archive.length || archive.readUInt32LE(localOffset) !== LOCAL_SIG) throw new BundleError(`bad zip local header for ${name}`);
    const start = localOffset + 30 + archive.readUInt16LE(localOffset + 26) + archive.readUInt16LE(localOffset + 28);
    if (start + compressed > archive.length) throw new BundleError(`truncated zip entry ${name}`);
    const raw = archive.subarray(start, start + compressed);
    let content: Buffer;
    if (method === STORED) content = Buffer.from(raw);
    else if (method === DEFLATED) content = inflateRawSync(raw, { maxOutputLength: MAX_ENTRY_BYTES });
    else throw new BundleError(`zip entry ${name} uses compression method ${method}; only stored and deflate are read`);
    if (content.length !== size) throw new BundleError(`zip entry ${name}: ${content.length} bytes, header says ${size}`);
    files.set(name, content);
  }
  return files;
}

function findEndOfCentralDirectory(archive: Buffer): number {
  // The record is 22 bytes plus a comment of at most 64 KiB, at the very end.
  const floor = Math.max(0, archive.length - 22 - 0xffff);
  for (let at = archive.length - 22; at >= floor; at--) {
    if (archive.readUInt32LE(at) === EOCD_SIG) return at;
  }
  throw new BundleError('not a zip archive (no end-of-central-directory record)');
}

/** The tokenizer files of a bundle: `tokenizer.json` (required) and `tokenizer_config.json`, at the shallowest level. */
export function tokenizerEntries(files: ReadonlyMap<string, Buffer>): { tokenizerJson: Buffer; tokenizerConfig: Buffer | undefined } {
  const pick = (base: string): Buffer | undefined => {
    let best: { depth: number; content: Buffer } | undefined;
    for (const [name, content] of files) {
      const parts = name.split('/');
      if (parts.at(-1) !== base || parts.includes('..')) continue;
      if (!best || parts.length < best.depth) best = { depth: parts.length, content };
    }
    return best?.content;
  };
  const tokenizerJson = pick('tokenizer.json');
  if (!tokenizerJson) throw new BundleError(`the tokenizer bundle has no tokenizer.json (files: ${[...files.keys()].join(', ') || 'none'})`);
  return { tokenizerJson, tokenizerConfig: pick('tokenizer_config.json') };
}
