// The engine side of the ZMQ lane's bytes, TokenSpeed dialect: the
// handshake maps it sends and reads, the positional ADD/ABORT payloads it decodes (checked the way
// msgspec would), and the BatchTokenIDOutSlim batches it pushes. Written apart from the gateway's
// src/engines/zmq on purpose: a wire bug must not hide by standing on both sides. No sockets here.

import { Packr } from 'msgpackr';

export const REQ_ADD = 0x00;
export const REQ_ABORT = 0x01;
export const ENGINE_CORE_DEAD = Buffer.from('ENGINE_CORE_DEAD', 'latin1');
const ADD_TAG = 'TokenizedGenerateReqInput';
const OUTPUT_TAG = 'BatchTokenIDOutSlim';
/** TokenSpeed's `_TOP_K_DISABLED`; `_TOP_K_FUSED_MAX` bounds any other top_k. */
export const TOP_K_DISABLED = 1 << 30;
const TOP_K_FUSED_MAX = 128;

// Maps stay maps (the handshake is named keys), never msgpackr records.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, int64AsType: 'number' });

export class BadFrame extends Error {
  override readonly name = 'BadFrame';
}

export function pack(value: unknown): Buffer {
  return packr.pack(value);
}

export function unpack(buf: Buffer): unknown {
  try {
    return packr.unpack(buf);
  } catch (e) {
    throw new BadFrame(`not msgpack: ${(e as Error).message}`);
  }
}

/** The 2-byte little-endian identity an engine dials with (its DP rank). */
export function identityOf(rank: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(rank);
  return b;
}

/** What the engine reads from the gateway's INIT map. */
export function decodeInit(payload: Buffer): { input: string; output: string } {
  const m = unpack(payload) as { addresses?: { inputs?: unknown; outputs?: unknown } } | null;
  const inputs = m?.addresses?.inputs;
  const outputs = m?.addresses?.outputs;
  if (!Array.isArray(inputs) || typeof inputs[0] !== 'string' || !Array.isArray(outputs) || typeof outputs[0] !== 'string') {
    throw new BadFrame('INIT has no addresses.inputs[0] / addresses.outputs[0]');
  }
  return { input: inputs[0], output: outputs[0] };
}

/** The sampling fields the simulated scheduler acts on (positions of TokenSpeed SamplingParams). */
export interface SimSampling {
  maxNewTokens: number | null;
  stopTokenIds: number[] | null;
  temperature: number;
  topP: number;
  topK: number;
  minNewTokens: number;
  ignoreEos: boolean;
  seed: number | null;
  logprobs: number | null;
  n: number;
  grammars: number;
  isNormalized: boolean;
}

export interface AddRequest {
  rid: string;
  inputIds: number[];
  sampling: SimSampling;
  returnLogprob: boolean;
  logprobStartLen: number;
  topLogprobsNum: number;
  stream: boolean;
  /** Elements in the ADD array (the gateway sends the 11-element prefix). */
  arity: number;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function field<T>(a: unknown[], i: number, dflt: T, ok: (v: unknown) => boolean, name: string): T {
  if (i >= a.length) return dflt; // msgspec fills missing trailing fields with their defaults
  const v = a[i];
  if (!ok(v)) throw new BadFrame(`${name} has the wrong type`);
  return v as T;
}

const intOrNull = (v: unknown): boolean => v === null || isInt(v);
const strOrNull = (v: unknown): boolean => v === null || typeof v === 'string';
const bool = (v: unknown): boolean => typeof v === 'boolean';
const uintList = (v: unknown): boolean => Array.isArray(v) && v.every((x) => isInt(x) && x >= 0 && x <= 0xffffffff);

/**
 * Decodes an ADD payload as TokenSpeed's msgspec decoder would: a tagged positional array whose
 * missing trailing fields take their defaults; a type mismatch is a malformed frame (dropped).
 */
export function decodeAdd(payload: Buffer): AddRequest {
  const a = unpack(payload);
  if (!Array.isArray(a) || a[0] !== ADD_TAG) throw new BadFrame(`ADD payload is not a tagged ${ADD_TAG} array`);
  if (a.length < 6) throw new BadFrame(`ADD payload has ${a.length} elements; rid, input_ids and sampling_params are required`);
  const rid = field<string>(a, 1, '', (v) => typeof v === 'string' && v.length > 0, 'rid');
  const inputIds = field<number[]>(a, 4, [], uintList, 'input_ids');
  const sp = a[5];
  if (!Array.isArray(sp)) throw new BadFrame('sampling_params is not a positional array');
  const sampling: SimSampling = {
    maxNewTokens: field(sp, 0, null, intOrNull, 'max_new_tokens'),
    stopTokenIds: field(sp, 2, null, (v) => v === null || uintList(v), 'stop_token_ids'),
    temperature: field(sp, 3, 1.0, isNum, 'temperature'),
    topP: field(sp, 4, 1.0, isNum, 'top_p'),
    topK: field(sp, 5, -1, isInt, 'top_k'),
    minNewTokens: field(sp, 10, 0, isInt, 'min_new_tokens'),
    ignoreEos: field(sp, 15, false, bool, 'ignore_eos'),
    seed: field(sp, 23, null, intOrNull, 'seed'),
    logprobs: field(sp, 24, null, intOrNull, 'logprobs'),
    n: field(sp, 25, 1, isInt, 'n'),
    grammars: [11, 12, 13].filter((i) => field(sp, i, null, strOrNull, 'grammar') !== null).length,
    isNormalized: field(sp, 28, false, bool, 'is_normalized'),
  };
  for (const i of [7, 8, 9]) field(sp, i, 0, isNum, 'penalty');
  field(sp, 6, 0, isNum, 'min_p');
  if (!sampling.isNormalized) normalize(sampling);
  return {
    rid,
    inputIds,
    sampling,
    returnLogprob: field(a, 6, false, bool, 'return_logprob'),
    logprobStartLen: field(a, 7, -1, isInt, 'logprob_start_len'),
    topLogprobsNum: field(a, 8, 0, isInt, 'top_logprobs_num'),
    stream: field(a, 10, false, bool, 'stream'),
    arity: a.length,
  };
}

/** SamplingParams.__post_init__ for a sender that did not normalize. */
function normalize(s: SimSampling): void {
  if (s.stopTokenIds && s.stopTokenIds.length === 0) s.stopTokenIds = null;
  if (s.temperature < 1e-6) {
    s.temperature = 1.0;
    s.topK = 1;
  }
  if (s.topK === 1) s.seed = 0;
  if (s.topK === -1) s.topK = TOP_K_DISABLED;
}

/** SamplingParams.verify plus the msgpack ingress checks: the reason a request is refused. */
export function refusal(req: AddRequest, contextLength: number): string | null {
  const s = req.sampling;
  if (s.n !== 1) return `n=${s.n} is not supported on the msgpack wire; the frontend must fan out n > 1 itself`;
  if (req.inputIds.length === 0) return 'input_ids is empty';
  if (req.inputIds.length >= contextLength) return `prompt of ${req.inputIds.length} tokens does not fit context length ${contextLength}`;
  if (!(s.topP > 0 && s.topP <= 1)) return `top_p must be in (0, 1], got ${s.topP}.`;
  if (s.topK !== TOP_K_DISABLED && (s.topK < 1 || s.topK >= TOP_K_FUSED_MAX))
    return `top_k must be < ${TOP_K_FUSED_MAX} (fused kernel limit) or -1 (disable), got ${s.topK}.`;
  if (s.maxNewTokens !== null && s.maxNewTokens < 0) return `max_new_tokens must be at least 0, got ${s.maxNewTokens}.`;
  if (s.maxNewTokens !== null && s.minNewTokens > s.maxNewTokens)
    return `min_new_tokens must be in (0, max_new_tokens(${s.maxNewTokens})], got ${s.minNewTokens}.`;
  if (s.logprobs !== null && s.logprobs !== 0) return `logprobs=${s.logprobs} is not supported; use logprobs=0 (the sampled token's logprob).`;
  if (s.grammars > 1) return 'Only one of regex, json_schema, or ebnf can be set.';
  if (req.logprobStartLen !== -1) return 'prompt logprobs are not carried on the msgpack wire';
  return null;
}

/** An ABORT payload: a plain msgpack list of rid strings. */
export function decodeAbort(payload: Buffer): string[] {
  const a = unpack(payload);
  if (!Array.isArray(a) || !a.every((x) => typeof x === 'string')) throw new BadFrame('ABORT payload is not a list of strings');
  return a as string[];
}

/** One row of an output batch. */
export interface OutRow {
  rid: string;
  outputIds: number[];
  finished: '' | 'stop' | 'length' | 'abort';
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  logprobs: number[];
}

export interface BatchLoad {
  running: number;
  waiting: number;
  kvActivePages: number;
  kvTotalPages: number;
}

/** BatchTokenIDOutSlim: tag, 8 parallel columns, engine_index, then the load snapshot tail. */
export function encodeBatch(rows: readonly OutRow[], engineIndex: number, load: BatchLoad, ragged = false): Buffer {
  const value = [
    OUTPUT_TAG,
    rows.map((r) => r.rid),
    rows.map((r) => r.outputIds),
    rows.map((r) => r.finished),
    rows.map((r) => r.promptTokens),
    rows.map((r) => r.completionTokens),
    rows.map((r) => r.cachedTokens),
    rows.map((r) => r.logprobs),
    rows.map((r) => (r.logprobs.length > 0 ? r.outputIds : [])),
    engineIndex,
    load.running,
    load.waiting,
    load.kvActivePages,
    load.kvTotalPages,
  ];
  if (ragged) (value[3] as string[]).push('stop'); // the `ragged` fault: one extra finish reason
  return pack(value);
}
