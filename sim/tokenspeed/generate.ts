// The Generate RPC: request checks (INVALID_ARGUMENT, the rust profile's
// refusals), one engine request per choice (`{request_id}-n{i}` when n > 1), one chunk per engine
// output step when streaming, one complete per choice, weight_version stamped on both, logprobs
// when the engine has them, and an engine-side abort ending the stream with a gRPC error status.

import { randomUUID } from 'node:crypto';
import { status, type ServerWritableStream } from '@grpc/grpc-js';
import { abortFinish, Sequence, type AbortFinish } from '../core/sequence.ts';
import { seedOf } from '../core/tokens.ts';
import type { TsEngine } from './engine.ts';
import type { FaultRule } from './faults.ts';
import { choiceSeed, logprobAt, tokenAt, topLogprobsAt } from './sampler.ts';

type Req = Record<string, any>;
export type GenerateCall = ServerWritableStream<Req, Record<string, unknown>>;

export const DEFAULT_MAX_NEW_TOKENS = 128;

export class RpcError extends Error {
  constructor(
    readonly code: status,
    message: string,
  ) {
    super(message);
  }
}

/** The Python servicer's rule: the abort's HTTP-like code decides the gRPC status the stream ends with. */
export function abortStatus(statusCode: number | null): status {
  if (statusCode === 400) return status.INVALID_ARGUMENT;
  if (statusCode === 408 || statusCode === 504) return status.DEADLINE_EXCEEDED;
  if (statusCode === 429) return status.RESOURCE_EXHAUSTED;
  return status.INTERNAL;
}

interface Plan {
  stream: boolean;
  noStopTrim: boolean;
  logprobs: boolean;
  topK: number;
}

/** Request checks in the order the servicer applies them; throws RpcError. */
function checkRequest(engine: TsEngine, req: Req): void {
  const p = engine.opts.profile;
  if (engine.shuttingDown) throw new RpcError(status.UNAVAILABLE, 'Server is shutting down');
  if (!req.tokenized) throw new RpcError(status.INVALID_ARGUMENT, 'GenerateRequest.tokenized is required');
  if (!Array.isArray(req.tokenized.input_ids) || req.tokenized.input_ids.length === 0) {
    throw new RpcError(status.INVALID_ARGUMENT, 'GenerateRequest.tokenized.input_ids is empty');
  }
  if (req.mm_inputs && Array.isArray(req.mm_inputs.items) && req.mm_inputs.items.length > 0) {
    throw new RpcError(status.INVALID_ARGUMENT, `model ${engine.opts.model} does not accept multimodal inputs`);
  }
  if (!p.rankedAndPromptLogprobs) {
    if (req.top_logprobs_num > 1) {
      throw new RpcError(status.INVALID_ARGUMENT, 'ranked top logprobs (top_logprobs_num > 1) are not supported by the rust servicer');
    }
    if (req.return_logprob && req.logprob_start_len !== undefined && req.logprob_start_len >= 0) {
      throw new RpcError(status.INVALID_ARGUMENT, 'prompt logprobs (logprob_start_len) are not supported by the rust servicer');
    }
    if ((req.sampling_params?.stop ?? []).length > 0 && !engine.opts.tokenizerPath) {
      throw new RpcError(status.INVALID_ARGUMENT, 'string stop sequences need a local tokenizer directory, and none could be resolved');
    }
  }
  if (!p.bootstrapFields && (req.kv_bootstrap_info || req.encode_bootstrap_info)) {
    throw new RpcError(status.INVALID_ARGUMENT, 'PD/EPD bootstrap fields are supported only by the python servicer');
  }
  if (req.encode_bootstrap_info && !req.mm_inputs) {
    throw new RpcError(status.INVALID_ARGUMENT, 'GenerateRequest.encode_bootstrap_info present but mm_inputs is missing');
  }
}

/** One Sequence per choice; throws RpcError on a bad or duplicate request. */
function makeSequences(engine: TsEngine, req: Req, rid: string): Sequence[] {
  const sp: Req = req.sampling_params ?? {};
  const promptIds = (req.tokenized.input_ids as number[]).map(Number);
  const n = Math.max(1, Number(sp.n ?? 0));
  const greedy = sp.temperature !== undefined && sp.temperature < 1e-6;
  let samplingSeed = 0n;
  if (sp.sampling_seed !== undefined) {
    try {
      samplingSeed = BigInt(sp.sampling_seed);
    } catch {
      throw new RpcError(status.INVALID_ARGUMENT, 'sampling_seed must be an integer');
    }
  }
  const stopTokenIds = Array.isArray(sp.stop_token_ids) && sp.stop_token_ids.length > 0 ? new Set<number>(sp.stop_token_ids) : null;
  const stopStrings = Array.isArray(sp.stop) && sp.stop.length > 0 ? (sp.stop as string[]) : null;
  const promptHash = seedOf(promptIds, 0);
  const pin = engine.opts.dpSize > 1 && req.data_parallel_rank !== undefined ? Number(req.data_parallel_rank) : undefined;
  if (pin !== undefined && (pin < 0 || pin >= engine.opts.dpSize)) {
    throw new RpcError(status.INVALID_ARGUMENT, `data_parallel_rank ${pin} is out of range for dp_size ${engine.opts.dpSize}`);
  }
  const seqs: Sequence[] = [];
  for (let i = 0; i < n; i++) {
    const childRid = n > 1 ? `${rid}-n${i}` : rid;
    if (engine.scheduler.isLive(childRid)) throw new RpcError(status.INVALID_ARGUMENT, `Duplicate request ID: ${childRid}`);
    seqs.push(
      new Sequence(
        {
          rid: childRid,
          promptIds,
          promptHash,
          seed: choiceSeed(promptIds, i, samplingSeed, greedy),
          maxNewTokens: sp.max_new_tokens ?? DEFAULT_MAX_NEW_TOKENS,
          minNewTokens: Number(sp.min_new_tokens ?? 0),
          stopTokenIds,
          stopStrings,
          noStopTrim: sp.no_stop_trim === true,
          ignoreEos: sp.ignore_eos === true,
          dpRank: engine.scheduler.rankFor(pin),
        },
        tokenAt,
      ),
    );
  }
  return seqs;
}

/** A trailing matched stop token leaves output_ids unless no_stop_trim. */
function keptIds(seq: Sequence, noStopTrim: boolean): number[] {
  const f = seq.finish;
  if (!noStopTrim && f?.type === 'stop' && typeof f.matched === 'number' && seq.outputIds[seq.outputIds.length - 1] === f.matched) {
    return seq.outputIds.slice(0, -1);
  }
  return seq.outputIds;
}

function outputLogprobs(seq: Sequence, from: number, to: number, plan: Plan): Record<string, unknown> | null {
  if (!plan.logprobs || to <= from) return null;
  const token_logprobs: number[] = [];
  const token_ids: number[] = [];
  const top_logprobs: Array<{ values: number[]; token_ids: number[] }> = [];
  for (let i = from; i < to; i++) {
    token_logprobs.push(logprobAt(seq.params.seed, i));
    token_ids.push(seq.outputIds[i]);
    const top = plan.topK > 0 ? topLogprobsAt(seq.params.seed, i, plan.topK) : { values: [], tokenIds: [] };
    top_logprobs.push({ values: top.values, token_ids: top.tokenIds });
  }
  return { token_logprobs, token_ids, top_logprobs };
}

export function generate(engine: TsEngine, call: GenerateCall, fault: FaultRule | null): void {
  const req = call.request;
  let seqs: Sequence[];
  try {
    checkRequest(engine, req);
    seqs = makeSequences(engine, req, req.request_id || randomUUID().replace(/-/g, ''));
  } catch (e) {
    const err = e instanceof RpcError ? e : new RpcError(status.INTERNAL, String(e));
    call.emit('error', { code: err.code, details: err.message });
    return;
  }
  const promptLen = seqs[0].params.promptIds.length;
  const plan: Plan = {
    stream: req.stream === true,
    noStopTrim: req.sampling_params?.no_stop_trim === true,
    logprobs: engine.opts.enableOutputLogprobs && req.return_logprob === true,
    topK: Math.max(0, Number(req.top_logprobs_num ?? 0)),
  };
  const responseId: string = req.request_id;
  const abortAfter = fault?.fault.abortAfterTokens;
  let open = true;
  let remaining = seqs.length;
  const finals: Array<Record<string, unknown>> = [];

  const stop = (): void => {
    open = false;
    for (const s of seqs) engine.scheduler.cancel(s);
  };
  const fail = (f: AbortFinish): void => {
    if (!open) return;
    stop();
    call.emit('error', { code: abortStatus(f.statusCode), details: f.message || 'aborted' });
  };
  const counts = (s: Sequence) => ({ prompt_tokens: promptLen, completion_tokens: s.outputIds.length, cached_tokens: s.cachedTokens });
  const stamped = (msg: Record<string, unknown>): Record<string, unknown> => {
    const v = engine.stampVersion();
    if (v !== undefined) msg.weight_version = v;
    return msg;
  };

  // A choice's index is its place in the call: seqs hold the choices in order.
  for (const [index, seq] of seqs.entries()) {
    let emitted = 0;
    seq.onUpdate = (s) => {
      if (!open) return;
      if (abortAfter !== undefined && !s.done && s.outputIds.length >= abortAfter) {
        engine.scheduler.abortWhere((rid) => rid === s.rid, abortFinish('Aborted by injected fault', fault?.fault.abortStatus ?? null));
        return;
      }
      const f = s.finish;
      if (f?.type === 'abort') return fail(f);
      const ids = f ? keptIds(s, plan.noStopTrim) : s.outputIds;
      if (plan.stream && (ids.length > emitted || f)) {
        const to = Math.max(emitted, ids.length);
        call.write({
          request_id: responseId,
          chunk: stamped({
            token_ids: ids.slice(emitted, to),
            ...counts(s),
            output_logprobs: outputLogprobs(s, emitted, to, plan),
            index,
          }),
        });
        emitted = to;
      }
      if (!f) return;
      const complete: Record<string, unknown> = {
        output_ids: ids,
        finish_reason: f.type,
        ...counts(s),
        output_logprobs: outputLogprobs(s, 0, ids.length, plan),
        index,
        spec_accepted_tokens: 0,
        spec_draft_tokens: 0,
      };
      if (f.type === 'stop') {
        if (typeof f.matched === 'number') complete.matched_token_id = f.matched;
        else complete.matched_stop_str = f.matched;
      }
      // Streaming sends each complete as its choice ends; otherwise the engine hands every choice
      // over at once, so a later abort never follows partial successes.
      const msg = { request_id: responseId, complete: stamped(complete) };
      if (plan.stream) call.write(msg);
      else finals.push(msg);
      if (--remaining === 0) {
        open = false;
        for (const m of finals) call.write(m);
        call.end();
      }
    };
  }
  // A client that goes away aborts every engine request of the call.
  call.on('cancelled', stop);
  if (promptLen > engine.opts.contextLength) {
    return fail(abortFinish(`The input (${promptLen} tokens) is longer than the model's context length (${engine.opts.contextLength} tokens).`, 400));
  }
  engine.scheduler.submit(seqs);
}
