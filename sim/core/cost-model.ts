// Which cost model an engine runs and its figures: `fixed` (every request paced at --token-rate,
// the default) or `realistic` (continuous batching whose step time follows from its batch, a
// bounded KV pool and a radix prefix cache). It owns the flag names, defaults, checks and --help
// lines the SGLang and TokenSpeed simulators share, and the step-time formula; it never schedules.

import { flagNumber } from './flags.ts';

export type CostModelKind = 'fixed' | 'realistic';

/** The options as a simulator's options object carries them (all optional). */
export interface CostModelOptions {
  costModel?: CostModelKind;
  prefillTokensPerS?: number;
  decodeStepMs?: number;
  decodeMsPerRequest?: number;
  /** KV pool per DP rank, in tokens. */
  kvCacheTokens?: number;
  pageSize?: number;
  /** Prefill tokens one step may compute (SGLang's `--chunked-prefill-size`). */
  chunkedPrefillSize?: number;
  /** Seeds the output-length draw (SGLang's `--random-seed`). */
  randomSeed?: number;
  outputLenMedian?: number;
  outputLenSigma?: number;
}

export interface CostModel {
  kind: CostModelKind;
  prefillTokensPerS: number;
  decodeStepMs: number;
  decodeMsPerRequest: number;
  kvCacheTokens: number;
  pageSize: number;
  chunkedPrefillSize: number;
  randomSeed: number;
  outputLenMedian: number;
  outputLenSigma: number;
}

// SMG's mock_worker "realistic" engine (its linear timing model, KV pool and block size), and
// SGLang's chunked-prefill default. The output-length figures are the simulator's own.
export const COST_MODEL_DEFAULTS: Readonly<CostModel> = {
  kind: 'fixed',
  prefillTokensPerS: 8000,
  decodeStepMs: 6,
  decodeMsPerRequest: 0.35,
  kvCacheTokens: 524_288,
  pageSize: 16,
  chunkedPrefillSize: 8192,
  randomSeed: 0,
  outputLenMedian: 64,
  outputLenSigma: 1,
};

function positive(v: number, name: string): number {
  if (!(v > 0) || !Number.isFinite(v)) throw new Error(`${name} must be a positive number`);
  return v;
}

function nonNegative(v: number, name: string): number {
  if (!(v >= 0) || !Number.isFinite(v)) throw new Error(`${name} must be a number >= 0`);
  return v;
}

function positiveInteger(v: number, name: string): number {
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer`);
  return v;
}

export function resolveCostModel(o: CostModelOptions): CostModel {
  const d = COST_MODEL_DEFAULTS;
  const kind = o.costModel ?? d.kind;
  if (kind !== 'fixed' && kind !== 'realistic') throw new Error('cost model is fixed or realistic');
  const pageSize = positiveInteger(o.pageSize ?? d.pageSize, '--page-size');
  const kvCacheTokens = positiveInteger(o.kvCacheTokens ?? d.kvCacheTokens, '--kv-cache-tokens');
  // Two pages at least: one request's prompt page and its first decode page.
  if (kvCacheTokens < 2 * pageSize) throw new Error('--kv-cache-tokens must hold two pages at least');
  const seed = o.randomSeed ?? d.randomSeed;
  if (!Number.isInteger(seed)) throw new Error('--random-seed must be an integer');
  return {
    kind,
    prefillTokensPerS: positive(o.prefillTokensPerS ?? d.prefillTokensPerS, '--prefill-tokens-per-s'),
    decodeStepMs: nonNegative(o.decodeStepMs ?? d.decodeStepMs, '--decode-step-ms'),
    decodeMsPerRequest: nonNegative(o.decodeMsPerRequest ?? d.decodeMsPerRequest, '--decode-ms-per-request'),
    // The pool holds whole pages, as a paged allocator does.
    kvCacheTokens: Math.floor(kvCacheTokens / pageSize) * pageSize,
    pageSize,
    chunkedPrefillSize: positiveInteger(o.chunkedPrefillSize ?? d.chunkedPrefillSize, '--chunked-prefill-size'),
    randomSeed: seed,
    outputLenMedian: positive(o.outputLenMedian ?? d.outputLenMedian, '--output-len-median'),
    outputLenSigma: nonNegative(o.outputLenSigma ?? d.outputLenSigma, '--output-len-sigma'),
  };
}

const COST_FLAGS = new Set([
  '--cost-model',
  '--prefill-tokens-per-s',
  '--decode-step-ms',
  '--decode-ms-per-request',
  '--kv-cache-tokens',
  '--page-size',
  '--chunked-prefill-size',
  '--random-seed',
  '--output-len-median',
  '--output-len-sigma',
]);

/** Reads one cost-model flag into `into.cost`; false when `flag` is none of them. */
export function readCostFlag(flag: string, next: () => string, into: { cost?: CostModelOptions }): boolean {
  if (!COST_FLAGS.has(flag)) return false;
  const o = (into.cost ??= {});
  switch (flag) {
    case '--cost-model': {
      const v = next();
      if (v !== 'fixed' && v !== 'realistic') throw new Error('--cost-model is fixed or realistic');
      o.costModel = v;
      return true;
    }
    case '--prefill-tokens-per-s':
      o.prefillTokensPerS = flagNumber(flag, next());
      return true;
    case '--decode-step-ms':
      o.decodeStepMs = flagNumber(flag, next());
      return true;
    case '--decode-ms-per-request':
      o.decodeMsPerRequest = flagNumber(flag, next());
      return true;
    case '--kv-cache-tokens':
      o.kvCacheTokens = flagNumber(flag, next());
      return true;
    case '--page-size':
      o.pageSize = flagNumber(flag, next());
      return true;
    case '--chunked-prefill-size':
      o.chunkedPrefillSize = flagNumber(flag, next());
      return true;
    case '--random-seed':
      o.randomSeed = flagNumber(flag, next());
      return true;
    case '--output-len-median':
      o.outputLenMedian = flagNumber(flag, next());
      return true;
    case '--output-len-sigma':
      o.outputLenSigma = flagNumber(flag, next());
      return true;
    default:
      return false;
  }
}

/** The --help lines of the flags above, aligned at `column`. */
export function costModelHelp(column: number): string {
  const d = COST_MODEL_DEFAULTS;
  const rows: Array<[string, string]> = [
    ['--cost-model fixed|realistic', 'fixed: --token-rate per request; realistic: batched steps, KV pool,'],
    ['', 'radix prefix cache (default fixed; see docs/cost-model.md)'],
    ['--prefill-tokens-per-s <r>', `realistic: prefill rate (default ${d.prefillTokensPerS})`],
    ['--decode-step-ms <ms>', `realistic: fixed cost of a decoding step (default ${d.decodeStepMs})`],
    ['--decode-ms-per-request <ms>', `realistic: step cost per decoding request (default ${d.decodeMsPerRequest})`],
    ['--kv-cache-tokens <n>', `realistic: KV pool per DP rank, in tokens (default ${d.kvCacheTokens})`],
    ['--page-size <n>', `realistic: KV page and cache-match granularity (default ${d.pageSize})`],
    ['--chunked-prefill-size <n>', `realistic: prefill tokens per step (default ${d.chunkedPrefillSize})`],
    ['--random-seed <n>', `realistic: seeds the output lengths (default ${d.randomSeed})`],
    ['--output-len-median <n>', `realistic: median output length without ignore_eos (default ${d.outputLenMedian})`],
    ['--output-len-sigma <s>', `realistic: lognormal sigma of that length (default ${d.outputLenSigma})`],
  ];
  return rows.map(([f, text]) => `  ${f.padEnd(column - 2)}${text}\n`).join('');
}

/**
 * How long one step takes: its prefill tokens at the prefill rate, plus, when it decodes any
 * request, the fixed decode cost and the per-request one (SMG's linear model: a step that only
 * prefills pays no decode time).
 */
export function stepMs(m: Pick<CostModel, 'prefillTokensPerS' | 'decodeStepMs' | 'decodeMsPerRequest'>, prefillTokens: number, decoding: number): number {
  const prefill = (prefillTokens / m.prefillTokensPerS) * 1000;
  return decoding > 0 ? prefill + m.decodeStepMs + m.decodeMsPerRequest * decoding : prefill;
}
