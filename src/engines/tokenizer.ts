// An engine's tokenizer for the gateway: `@huggingface/tokenizers` (HF's tokenizer.json format,
// pure JS) loaded from a directory (`--tokenizer-path`) or from the bytes of an engine's
// GetTokenizer bundle, cached per directory and per bundle sha256 so one is parsed once. It
// never tokenizes by hand and never fetches anything itself: engine clients hand it the bytes.

import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { hfTokenizers } from './libraries.ts';
import { assembleBundle, tokenizerEntries, unzip, type BundleChunk } from './tokenizer-bundle.ts';

export interface DecodeOptions {
  /** SGLang's `skip_special_tokens` (default true there; the caller passes what the request says). */
  skipSpecialTokens: boolean;
}

export class Tokenizer {
  private readonly hf: HfTokenizer;

  /** `source` says where it came from (a path or `bundle:<sha256>`), for messages only. */
  /** tokenizer_config.json as shipped (chat_template, bos/eos tokens, ...); {} when absent. */
  readonly config: Record<string, unknown>;

  constructor(
    tokenizerJson: object,
    tokenizerConfig: object | undefined,
    readonly source: string,
  ) {
    this.config = (tokenizerConfig ?? {}) as Record<string, unknown>;
    this.hf = new (hfTokenizers().Tokenizer)(tokenizerJson, this.config);
  }

  /**
   * SGLang's `tokenizer.encode(text)`: special tokens added as the tokenizer's post-processor says,
   * unless `addSpecialTokens` is false (the tokenize route's default, as SMG's).
   */
  encode(text: string, opts: { addSpecialTokens?: boolean } = {}): number[] {
    return this.hf.encode(text, opts.addSpecialTokens === false ? { add_special_tokens: false } : undefined).ids;
  }

  decode(ids: readonly number[], opts: DecodeOptions): string {
    if (ids.length === 0) return '';
    return this.hf.decode(ids as number[], { skip_special_tokens: opts.skipSpecialTokens });
  }
}

/** No tokenizer could be had for an engine; the message says why. */
export class TokenizerUnavailable extends Error {
  override readonly name = 'TokenizerUnavailable';
}

/** What an engine client offers when it can hand over its own tokenizer (gRPC's GetTokenizer). */
export interface TokenizerSource {
  tokenizer(signal: AbortSignal): Promise<Tokenizer>;
}

export function isTokenizerSource(c: unknown): c is TokenizerSource {
  return typeof (c as Partial<TokenizerSource> | null)?.tokenizer === 'function';
}

function parseJson(bytes: Buffer, what: string): object {
  try {
    const v = JSON.parse(bytes.toString('utf8')) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    // reported below
  }
  throw new TokenizerUnavailable(`${what} is not a JSON object`);
}

function build(json: Buffer, config: Buffer | undefined, source: string): Tokenizer {
  const tokenizerJson = parseJson(json, `${source}: tokenizer.json`);
  const tokenizerConfig = config ? parseJson(config, `${source}: tokenizer_config.json`) : undefined;
  try {
    return new Tokenizer(tokenizerJson, tokenizerConfig, source);
  } catch (err) {
    throw new TokenizerUnavailable(`${source}: the tokenizer cannot be loaded: ${(err as Error).message}`);
  }
}

// Parsed tokenizers are large (a vocabulary of 100k+ entries): one per directory, one per bundle.
const byPath = new Map<string, Promise<Tokenizer>>();
const bySha = new Map<string, Tokenizer>();

/** A tokenizer directory (tokenizer.json, tokenizer_config.json when present), or a tokenizer.json file. */
export function loadTokenizerPath(path: string): Promise<Tokenizer> {
  const abs = resolve(path);
  let p = byPath.get(abs);
  if (!p) {
    p = readTokenizerPath(abs);
    byPath.set(abs, p);
    // A failed load (missing file, bad JSON) is retried next time: the operator may fix it.
    p.catch(() => byPath.delete(abs));
  }
  return p;
}

async function readTokenizerPath(abs: string): Promise<Tokenizer> {
  const isFile = abs.endsWith('.json');
  const dir = isFile ? resolve(abs, '..') : abs;
  const jsonPath = isFile ? abs : join(dir, 'tokenizer.json');
  let json: Buffer;
  try {
    json = await readFile(jsonPath);
  } catch (err) {
    throw new TokenizerUnavailable(`--tokenizer-path ${abs}: cannot read ${jsonPath}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const config = await readFile(join(dir, 'tokenizer_config.json')).catch(() => undefined);
  return build(json, config, abs);
}

/** The tokenizer in an engine's GetTokenizer stream (sha256-checked, unzipped in memory). */
export function tokenizerFromBundle(chunks: readonly BundleChunk[]): Tokenizer {
  let archive: Buffer;
  let sha256: string;
  try {
    ({ archive, sha256 } = assembleBundle(chunks));
  } catch (err) {
    throw new TokenizerUnavailable((err as Error).message);
  }
  const cached = bySha.get(sha256);
  if (cached) return cached;
  let entries: ReturnType<typeof tokenizerEntries>;
  try {
    entries = tokenizerEntries(unzip(archive));
  } catch (err) {
    throw new TokenizerUnavailable((err as Error).message);
  }
  const t = build(entries.tokenizerJson, entries.tokenizerConfig, `bundle:${sha256}`);
  bySha.set(sha256, t);
  return t;
}
