// From request fields to scheduler sequences: sampling_params validation (SGLang defaults:
// max_new_tokens 128, n 1), rid expansion for batches (`<rid>_<i>`), sampler seeds. Shared by
// /generate and the OpenAI routes; it never writes HTTP.

import { randomUUID } from 'node:crypto';
import { isInt } from '../core/reply.ts';
import { Sequence } from '../core/sequence.ts';
import { seedOf } from '../core/tokens.ts';
import type { SimEngine } from './engine.ts';
import { tokenAt } from './tokens.ts';

export interface Sampling {
  maxNewTokens: number;
  minNewTokens: number;
  stopTokenIds: Set<number> | null;
  stopStrings: string[] | null;
  n: number;
  temperature: number;
  noStopTrim: boolean;
  ignoreEos: boolean;
  samplingSeed: number;
}

export const DEFAULT_MAX_NEW_TOKENS = 128;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Validates one sampling_params object; returns the error message on failure. */
export function parseSampling(raw: unknown): Sampling | string {
  if (raw === undefined || raw === null) raw = {};
  if (!isObject(raw)) return 'sampling_params must be an object';
  const max = raw.max_new_tokens ?? DEFAULT_MAX_NEW_TOKENS;
  if (!isInt(max) || max < 0) return 'max_new_tokens must be a non-negative integer';
  const min = raw.min_new_tokens ?? 0;
  if (!isInt(min) || min < 0) return 'min_new_tokens must be a non-negative integer';
  const n = raw.n ?? 1;
  if (!isInt(n) || n < 1) return 'n must be a positive integer';
  const temperature = raw.temperature ?? 1.0;
  if (typeof temperature !== 'number' || temperature < 0) return 'temperature must be a non-negative number';
  let stopTokenIds: Set<number> | null = null;
  if (raw.stop_token_ids !== undefined && raw.stop_token_ids !== null) {
    if (!Array.isArray(raw.stop_token_ids) || !raw.stop_token_ids.every(isInt)) return 'stop_token_ids must be a list of integers';
    stopTokenIds = new Set(raw.stop_token_ids as number[]);
  }
  let stopStrings: string[] | null = null;
  const stop = raw.stop;
  if (typeof stop === 'string') stopStrings = [stop];
  else if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) stopStrings = stop.length ? (stop as string[]) : null;
  else if (stop !== undefined && stop !== null) return 'stop must be a string or a list of strings';
  const seed = raw.sampling_seed ?? 0;
  if (!isInt(seed)) return 'sampling_seed must be an integer';
  return {
    maxNewTokens: max,
    minNewTokens: min,
    stopTokenIds,
    stopStrings,
    n,
    temperature,
    noStopTrim: raw.no_stop_trim === true,
    ignoreEos: raw.ignore_eos === true,
    samplingSeed: seed,
  };
}

export function newRid(): string {
  return randomUUID().replace(/-/g, '');
}

/**
 * SGLang's `_normalize_rid`: one rid for one request; for a batch (or n > 1) a string rid
 * becomes `<rid>_<i>`, a list must match the number of children, none means fresh uuids.
 */
export function expandRids(rid: unknown, num: number, isSingle: boolean): string[] | string {
  if (rid === undefined || rid === null) return Array.from({ length: num }, newRid);
  if (typeof rid === 'string') return isSingle ? [rid] : Array.from({ length: num }, (_, i) => `${rid}_${i}`);
  if (Array.isArray(rid) && rid.every((r) => typeof r === 'string')) {
    if (rid.length !== num) return 'The specified rids length mismatch with the batch_size for batch processing.';
    return rid as string[];
  }
  return 'rid must be a string or a list of strings';
}

/**
 * Children in SGLang's order (prompt-major, then sample). Greedy sampling gives every sample the
 * same tokens; otherwise the sample index (and sampling_seed) varies the seed.
 */
export function makeSequences(engine: SimEngine, prompts: number[][], samplings: Sampling[], rids: string[], askedRank: unknown): Sequence[] | string {
  const out: Sequence[] = [];
  const n = samplings[0].n;
  for (let i = 0; i < prompts.length; i++) {
    const ids = prompts[i];
    if (ids.length > engine.opts.contextLength) {
      return `The input (${ids.length} tokens) is longer than the model's context length (${engine.opts.contextLength} tokens).`;
    }
    const sp = samplings[i];
    const promptHash = seedOf(ids, 0);
    for (let j = 0; j < n; j++) {
      const salt = sp.temperature === 0 ? 0 : (Math.imul(j, 0x9e3779b1) ^ sp.samplingSeed) >>> 0;
      out.push(
        new Sequence(
          {
            rid: rids[i * n + j],
            promptIds: ids,
            promptHash,
            seed: salt === 0 ? promptHash : seedOf(ids, salt),
            maxNewTokens: sp.maxNewTokens,
            minNewTokens: sp.minNewTokens,
            stopTokenIds: sp.stopTokenIds,
            stopStrings: sp.stopStrings,
            noStopTrim: sp.noStopTrim,
            ignoreEos: sp.ignoreEos,
            dpRank: engine.scheduler.rankFor(askedRank),
          },
          tokenAt,
        ),
      );
    }
  }
  const seen = new Set<string>();
  for (const s of out) {
    if (seen.has(s.rid) || engine.scheduler.isLive(s.rid)) return `Duplicate request ID: ${s.rid}`;
    seen.add(s.rid);
  }
  return out;
}
