// The ZMQ lane's data-plane bytes, TokenSpeed dialect: the request
// type frame, the positional ADD and ABORT payloads the gateway sends, and the output batches it
// reads. Pure: no sockets, no timers. The handshake's named maps live in handshake.ts.

import type { Unpackr } from 'msgpackr';
import type { TokenRequest } from '../generation.ts';
import { msgpackr } from '../libraries.ts';
import { MsgpackWriter } from './msgpack-writer.ts';

/** Single-byte request-type frames (TokenSpeed `REQ_TYPE_ADD` / `REQ_TYPE_ABORT`). */
export const REQ_ADD = Buffer.from([0x00]);
export const REQ_ABORT = Buffer.from([0x01]);
/** The single-frame sentinel an engine pushes on the output socket when it dies. */
export const ENGINE_CORE_DEAD = Buffer.from('ENGINE_CORE_DEAD', 'latin1');
export const ADD_TAG = 'TokenizedGenerateReqInput';
export const OUTPUT_TAG = 'BatchTokenIDOutSlim';
/** TokenSpeed's "top_k disabled" sentinel, sent in place of -1 by a normalizing sender. */
export const TOP_K_DISABLED = 1 << 30;
const SAMPLING_EPS = 1e-6;

/** A frame the lane cannot read: counted towards the "3 undecodable outputs" liveness rule. */
export class WireError extends Error {
  override readonly name = 'WireError';
}

/**
 * The ADD payload: the tagged 11-element prefix of `TokenizedGenerateReqInput` with a 29-element
 * normalized SamplingParams. Float fields are always float64 and integers take their shortest
 * form, which is what msgspec emits: the bytes equal the Python encoder's for the same prefix.
 * `n` must already be 1 (the client fans `n > 1` out into several rids).
 */
export function encodeAdd(req: TokenRequest): Buffer {
  const s = req.sampling;
  const w = new MsgpackWriter(96 + req.inputIds.length * 5 + Buffer.byteLength(req.rid));
  w.arrayHeader(11);
  w.str(ADD_TAG);
  w.str(req.rid);
  w.nil(); // http_worker_ipc
  w.nil(); // input_text
  w.arrayHeader(req.inputIds.length);
  for (const id of req.inputIds) w.int(id);

  // SamplingParams, normalized here so the engine skips its own __post_init__ (is_normalized).
  let temperature = s.temperature ?? 1.0;
  let topK = s.top_k ?? -1;
  if (temperature < SAMPLING_EPS) {
    temperature = 1.0;
    topK = 1;
  }
  if (topK === -1) topK = TOP_K_DISABLED;
  const stopIds = s.stop_token_ids && s.stop_token_ids.length > 0 ? s.stop_token_ids : null;
  w.arrayHeader(29);
  optionalInt(w, s.max_new_tokens);
  w.nil(); // stop: string stops never travel on this wire
  if (stopIds) {
    w.arrayHeader(stopIds.length);
    for (const id of stopIds) w.int(id);
  } else w.nil();
  w.f64(temperature);
  w.f64(s.top_p ?? 1.0);
  w.int(topK);
  w.f64(s.min_p ?? 0.0);
  w.f64(s.frequency_penalty ?? 0.0);
  w.f64(s.presence_penalty ?? 0.0);
  w.f64(s.repetition_penalty ?? 1.0);
  w.int(s.min_new_tokens ?? 0);
  optionalStr(w, s.json_schema);
  optionalStr(w, s.regex);
  optionalStr(w, s.ebnf);
  w.nil(); // structural_tag
  w.bool(s.ignore_eos ?? false);
  w.bool(s.skip_special_tokens ?? true);
  w.bool(s.spaces_between_special_tokens ?? true);
  w.bool(s.no_stop_trim ?? false);
  w.nil(); // thinking_budget
  w.nil(); // custom_params
  w.nil(); // stream_interval
  w.nil(); // logit_bias: never forwarded
  optionalInt(w, s.sampling_seed); // null: the engine derives one from the rid
  w.nil(); // logprobs: return_logprob below asks for the sampled token's logprob
  w.int(1); // n
  w.arrayHeader(0); // stop_strs
  w.int(0); // stop_str_max_len
  w.bool(true); // is_normalized

  w.bool(req.returnLogprob);
  w.int(-1); // logprob_start_len: no prompt logprobs on this wire
  w.int(0); // top_logprobs_num: only the sampled token's logprob is carried
  w.nil(); // token_ids_logprob
  w.bool(req.stream);
  return w.done();
}

/** The ABORT payload: a msgpack list of rid strings (not a tagged struct). */
export function encodeAbort(rids: readonly string[]): Buffer {
  const w = new MsgpackWriter(8 + rids.reduce((n, r) => n + Buffer.byteLength(r) + 5, 0));
  w.arrayHeader(rids.length);
  for (const rid of rids) w.str(rid);
  return w.done();
}

function optionalInt(w: MsgpackWriter, v: number | undefined): void {
  if (v === undefined || v === null) w.nil();
  else w.int(v);
}

function optionalStr(w: MsgpackWriter, v: string | undefined): void {
  if (v === undefined || v === null) w.nil();
  else w.str(v);
}

/** One request's slice of an output batch. */
export interface RequestOutput {
  rid: string;
  /** New token ids this step. */
  outputIds: number[];
  /** `''` while running, else `stop` / `length` / `abort` (or another engine reason). */
  finished: string;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Sampled-token logprobs of `outputIds`; empty when not requested. */
  logprobs: number[];
}

/** Piggybacked scheduler load of the producing rank. */
export interface RankLoad {
  running: number;
  waiting: number;
  kvUsage: number;
}

export interface OutputBatch {
  engineIndex: number;
  outputs: RequestOutput[];
  /** Null when the sender took no snapshot (`kv_total_pages == 0`, or an older sender). */
  load: RankLoad | null;
}

let reader: Unpackr | undefined;

/**
 * The lane's msgpack reader, made on first use (msgpackr is loaded with the first ZMQ engine).
 * Maps as objects (the handshake reads named keys), 64-bit integers as numbers: no field on this
 * wire exceeds 2^53, and a BigInt would break every arithmetic use downstream.
 */
export function unpackr(): Unpackr {
  return (reader ??= new (msgpackr().Unpackr)({ useRecords: false, mapsAsObjects: true, int64AsType: 'number' }));
}

function column(a: unknown[], i: number, name: string, n: number): unknown[] {
  const c = a[i];
  if (!Array.isArray(c)) throw new WireError(`${OUTPUT_TAG}.${name} is not an array`);
  if (c.length !== n) throw new WireError(`${OUTPUT_TAG} has ragged columns: rids=${n}, ${name}=${c.length}`);
  return c;
}

function tail(a: unknown[], i: number, name: string): number {
  const v = a[i];
  if (v === undefined) return 0; // appended field an older sender does not emit
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new WireError(`${OUTPUT_TAG}.${name} is not an unsigned integer`);
  return v;
}

function count(v: unknown, name: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new WireError(`${OUTPUT_TAG}.${name} holds a non-integer`);
  return v;
}

/**
 * Reads one output payload. Ragged columns, a wrong tag or wrong types throw WireError; trailing
 * fields after the known ones are skipped (the struct is append-only).
 */
export function decodeOutput(payload: Buffer): OutputBatch {
  let a: unknown;
  try {
    a = unpackr().unpack(payload);
  } catch (e) {
    throw new WireError(`undecodable output payload: ${(e as Error).message}`);
  }
  if (!Array.isArray(a) || a[0] !== OUTPUT_TAG) throw new WireError(`output payload is not a tagged ${OUTPUT_TAG} array`);
  if (a.length < 9) throw new WireError(`${OUTPUT_TAG} has ${a.length} elements, fewer than 9`);
  const rids = a[1];
  if (!Array.isArray(rids)) throw new WireError(`${OUTPUT_TAG}.rids is not an array`);
  const n = rids.length;
  const ids = column(a, 2, 'output_ids', n);
  const finished = column(a, 3, 'finished_reasons', n);
  const prompt = column(a, 4, 'prompt_tokens', n);
  const completion = column(a, 5, 'completion_tokens', n);
  const cached = column(a, 6, 'cached_tokens', n);
  const lpVal = column(a, 7, 'output_token_logprobs_val', n);
  column(a, 8, 'output_token_logprobs_idx', n);
  const outputs = new Array<RequestOutput>(n);
  for (let i = 0; i < n; i++) {
    const rid = rids[i];
    const out = ids[i];
    const reason = finished[i];
    const lp = lpVal[i];
    if (typeof rid !== 'string') throw new WireError(`${OUTPUT_TAG}.rids[${i}] is not a string`);
    if (!Array.isArray(out)) throw new WireError(`${OUTPUT_TAG}.output_ids[${i}] is not an array`);
    if (typeof reason !== 'string') throw new WireError(`${OUTPUT_TAG}.finished_reasons[${i}] is not a string`);
    if (!Array.isArray(lp)) throw new WireError(`${OUTPUT_TAG}.output_token_logprobs_val[${i}] is not an array`);
    outputs[i] = {
      rid,
      outputIds: out as number[],
      finished: reason,
      promptTokens: count(prompt[i], 'prompt_tokens'),
      completionTokens: count(completion[i], 'completion_tokens'),
      cachedTokens: count(cached[i], 'cached_tokens'),
      logprobs: lp as number[],
    };
  }
  const engineIndex = tail(a, 9, 'engine_index');
  const running = tail(a, 10, 'num_running');
  const waiting = tail(a, 11, 'num_waiting');
  const active = tail(a, 12, 'kv_active_pages');
  const total = tail(a, 13, 'kv_total_pages');
  return { engineIndex, outputs, load: total > 0 ? { running, waiting, kvUsage: active / total } : null };
}

/** True for the one-frame `ENGINE_CORE_DEAD` sentinel. */
export function isDeadSentinel(frames: readonly Buffer[]): boolean {
  return frames.length === 1 && frames[0].equals(ENGINE_CORE_DEAD);
}
