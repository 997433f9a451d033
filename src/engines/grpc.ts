// TokenSpeed engines over gRPC (`tokenspeed.grpc.scheduler.TokenSpeedScheduler`, proto/): discovery
// through GetServerInfo + GetModelInfo, liveness through the HealthCheck RPC, and token-level
// generation with the engine-stamped weight version. Control calls never come here: they go to
// the engine's HTTP control app (control-client.ts). Also hands over the engine's own tokenizer
// (the GetTokenizer bundle, fetched once and cached) and opens its KV-event stream
// (SubscribeKvEvents; kv-events.ts keeps it open). Knows nothing of routes or NATS.

import { fileURLToPath } from 'node:url';
import type * as grpc from '@grpc/grpc-js';
import type * as ProtoLoader from '@grpc/proto-loader';
import type { EngineClient, EngineFacts } from './engine-client.ts';
import { kvBatchFromProto, type KvEventSource, type KvStreamHandlers } from './kv-events.ts';
import {
  GenerationError,
  PLAIN_SAMPLING_KEYS,
  type FinishReason,
  type TokenEngine,
  type TokenChunk,
  type TokenComplete,
  type TokenEvent,
  type TokenRequest,
} from './generation.ts';
import { TokenizerUnavailable, tokenizerFromBundle, type Tokenizer, type TokenizerSource } from './tokenizer.ts';
import type { BundleChunk } from './tokenizer-bundle.ts';
import { grpcJs, protoLoader } from './libraries.ts';

const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

type Unary = (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: any) => void) => grpc.ClientUnaryCall; // eslint-disable-line @typescript-eslint/no-explicit-any
interface SchedulerClient extends grpc.Client {
  Generate(req: unknown, md: grpc.Metadata, opts?: grpc.CallOptions): grpc.ClientReadableStream<GenerateResponse>;
  HealthCheck: Unary;
  Abort: Unary;
  GetModelInfo: Unary;
  GetServerInfo: Unary;
  GetTokenizer(req: unknown, md: grpc.Metadata, opts?: grpc.CallOptions): grpc.ClientReadableStream<BundleChunk>;
  SubscribeKvEvents(req: unknown, md: grpc.Metadata, opts?: grpc.CallOptions): grpc.ClientReadableStream<unknown>;
}

/** How long one GetTokenizer stream may take (bundles are a few MB at most). */
const TOKENIZER_DEADLINE_MS = 60_000;
/** An engine that said it has no tokenizer is not asked again for this long. */
const NO_TOKENIZER_RETRY_MS = 30_000;

interface OutputLogProbs {
  token_logprobs?: number[];
}
interface GenerateResponse {
  request_id: string;
  response?: 'chunk' | 'complete';
  chunk?: {
    token_ids: number[];
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    output_logprobs?: OutputLogProbs | null;
    index: number;
    weight_version?: string;
  };
  complete?: {
    output_ids: number[];
    finish_reason: string;
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    output_logprobs?: OutputLogProbs | null;
    matched_stop?: 'matched_token_id' | 'matched_stop_str';
    matched_token_id?: number;
    matched_stop_str?: string;
    index: number;
    weight_version?: string;
  };
}

let ctor: (new (address: string, creds: grpc.ChannelCredentials, opts?: grpc.ChannelOptions) => SchedulerClient) | undefined;
let definition: ProtoLoader.PackageDefinition | undefined;

/** The scheduler's proto as the gateway decodes it (field names kept, 64-bit ints and enums as text), loaded once. */
export function schedulerDefinition(): ProtoLoader.PackageDefinition {
  definition ??= protoLoader().loadSync(['tokenspeed_scheduler.proto'], {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [PROTO_DIR],
  });
  return definition;
}

/** Loaded once per process, from the same proto/ the simulators use. */
function schedulerCtor() {
  if (ctor) return ctor;
  const def = schedulerDefinition();
  const pkg = grpcJs().loadPackageDefinition(def) as unknown as { tokenspeed: { grpc: { scheduler: { TokenSpeedScheduler: typeof ctor } } } };
  ctor = pkg.tokenspeed.grpc.scheduler.TokenSpeedScheduler;
  return ctor!;
}

/** `grpc://host:port` (or `grpcs://`) with an optional `@<dp-rank>` → a channel target. */
export function grpcTarget(url: string): { address: string; tls: boolean } {
  const m = /^(grpcs?):\/\/(.+?)(?:@\d+)?\/?$/.exec(url.trim());
  if (!m) throw new Error(`not a gRPC worker URL: ${url}`);
  return { address: m[2]!, tls: m[1] === 'grpcs' };
}

export class GrpcEngineClient implements EngineClient, TokenEngine, TokenizerSource, KvEventSource {
  readonly mode = 'grpc' as const;
  private readonly client: SchedulerClient;
  private tokenizerLoad: Promise<Tokenizer> | undefined;
  private noTokenizer: { until: number; error: TokenizerUnavailable } | undefined;

  constructor(readonly url: string) {
    const { address, tls } = grpcTarget(url);
    const Ctor = schedulerCtor();
    const { credentials } = grpcJs();
    this.client = new Ctor(address, tls ? credentials.createSsl() : credentials.createInsecure(), {
      'grpc.keepalive_time_ms': 30_000,
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
    });
  }

  async discover(signal: AbortSignal): Promise<EngineFacts> {
    const [server, model] = await Promise.all([this.unary('GetServerInfo', {}, signal, 10_000), this.unary('GetModelInfo', {}, signal, 10_000)]);
    // server_args is a Struct: proto-loader hands it as {fields: {key: Value}}.
    const serverArgs = structToJson(server.server_args);
    if (typeof server.tokenspeed_version === 'string' && server.tokenspeed_version) serverArgs.version ??= server.tokenspeed_version;
    const scheduler = structToJson(server.scheduler_info);
    if (scheduler.shm_namespace_id !== undefined) serverArgs.shm_namespace_id = scheduler.shm_namespace_id;
    // is_paused is the live scheduler state, but only servicers that advertise rl.* report it (the
    // rust servicer always says false): without the advertisement it is unknown.
    const reportsPaused = Object.keys(serverArgs).some((k) => k.startsWith('rl.'));
    return {
      serverInfo: serverArgs,
      modelInfo: model as Record<string, unknown>,
      paused: reportsPaused && typeof server.is_paused === 'boolean' ? server.is_paused : undefined,
    };
  }

  async probe(signal: AbortSignal, quiet = false): Promise<void> {
    // HealthCheck runs a generation: a paused engine is only asked for its model info.
    if (quiet) {
      await this.unary('GetModelInfo', {}, signal, 10_000);
      return;
    }
    const res = await this.unary('HealthCheck', {}, signal, 25_000);
    if (!res.healthy) throw new Error(`HealthCheck: unhealthy${res.message ? `: ${res.message}` : ''}`);
  }

  async *generate(req: TokenRequest, signal: AbortSignal): AsyncIterable<TokenEvent> {
    const call = this.client.Generate(toProto(req), new (grpcJs().Metadata)());
    let seen = 0;
    const onAbort = () => {
      call.cancel();
      // The engine aborts the request when the stream drops; say so explicitly as SMG does.
      this.client.Abort({ request_id: req.rid, reason: 'Stream dropped' }, new (grpcJs().Metadata)(), { deadline: Date.now() + 5_000 }, () => {});
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    try {
      for await (const msg of call as AsyncIterable<GenerateResponse>) {
        const ev = fromProto(msg);
        if (!ev) continue;
        seen++;
        yield ev;
      }
    } catch (err) {
      throw toGenerationError(err as grpc.ServiceError, seen === 0, signal.aborted);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /**
   * The engine's tokenizer from its GetTokenizer bundle, fetched once and shared by every caller
   * (a caller's abort stops its wait, not the shared fetch). Rejects with TokenizerUnavailable.
   */
  tokenizer(signal: AbortSignal): Promise<Tokenizer> {
    if (this.noTokenizer && Date.now() < this.noTokenizer.until) return Promise.reject(this.noTokenizer.error);
    if (!this.tokenizerLoad) {
      const load = this.fetchTokenizer();
      this.tokenizerLoad = load;
      // Failures are not cached as a load: the next caller asks again (after a pause when the
      // engine said outright that it has none).
      load.catch(() => {
        if (this.tokenizerLoad === load) this.tokenizerLoad = undefined;
      });
    }
    return untilAborted(this.tokenizerLoad, signal);
  }

  private async fetchTokenizer(): Promise<Tokenizer> {
    const chunks: BundleChunk[] = [];
    const call = this.client.GetTokenizer({}, new (grpcJs().Metadata)(), { deadline: Date.now() + TOKENIZER_DEADLINE_MS });
    try {
      for await (const c of call as AsyncIterable<BundleChunk>) chunks.push({ data: c.data ?? new Uint8Array(0), sha256: c.sha256 ?? '' });
    } catch (err) {
      const e = err as grpc.ServiceError;
      const { status } = grpcJs();
      const error = new TokenizerUnavailable(`GetTokenizer on ${this.url}: ${status[e.code] ?? e.code} ${e.details ?? e.message}`.trim());
      if (e.code === status.FAILED_PRECONDITION || e.code === status.UNIMPLEMENTED || e.code === status.NOT_FOUND) {
        this.noTokenizer = { until: Date.now() + NO_TOKENIZER_RETRY_MS, error };
      }
      throw error;
    }
    return tokenizerFromBundle(chunks);
  }

  /** One SubscribeKvEvents stream of the batches after `after` (no deadline: it lasts as long as the engine). */
  subscribeKvEvents(after: bigint, on: KvStreamHandlers): { cancel(): void } {
    const call = this.client.SubscribeKvEvents({ start_sequence_number: after.toString() }, new (grpcJs().Metadata)());
    let done = false;
    const end = (kind: 'unimplemented' | 'failed' | 'ended', detail: string) => {
      if (done) return;
      done = true;
      on.ended({ kind, detail });
    };
    call.on('data', (msg: unknown) => {
      const batch = kvBatchFromProto(msg);
      if (batch && !done) on.batch(batch);
    });
    call.on('error', (err: grpc.ServiceError) => {
      const { status } = grpcJs();
      const detail = `SubscribeKvEvents on ${this.url}: ${status[err.code] ?? err.code} ${err.details ?? err.message}`.trim();
      end(err.code === status.UNIMPLEMENTED ? 'unimplemented' : 'failed', detail);
    });
    call.on('end', () => end('ended', `SubscribeKvEvents on ${this.url}: the engine ended the stream`));
    return {
      cancel: () => {
        done = true;
        call.cancel();
      },
    };
  }

  async close(): Promise<void> {
    this.client.close();
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  private unary(method: 'HealthCheck' | 'GetModelInfo' | 'GetServerInfo', req: unknown, signal: AbortSignal, timeoutMs: number): Promise<any> {
    return new Promise((resolve, reject) => {
      const call = this.client[method](req, new (grpcJs().Metadata)(), { deadline: Date.now() + timeoutMs }, (err, res) => {
        signal.removeEventListener('abort', onAbort);
        if (err) reject(new Error(`${method}: ${grpcJs().status[err.code] ?? err.code} ${err.details ?? ''}`.trim()));
        else resolve(res);
      });
      const onAbort = () => call.cancel();
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new TokenizerUnavailable('cancelled by the client'));
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(new TokenizerUnavailable('cancelled by the client'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function toProto(req: TokenRequest): Record<string, unknown> {
  const s = req.sampling;
  // proto3 plain bools: SGLang's defaults are sent when the request names none.
  const sampling: Record<string, unknown> = { skip_special_tokens: true, spaces_between_special_tokens: true };
  for (const k of PLAIN_SAMPLING_KEYS) if (s[k] !== undefined && k !== 'ebnf') sampling[k] = s[k];
  if (s.stop !== undefined) sampling.stop = s.stop;
  if (s.ebnf !== undefined) sampling.ebnf_grammar = s.ebnf;
  if (s.structural_tag !== undefined) sampling.structural_tag = s.structural_tag;
  if (s.logit_bias !== undefined) sampling.logit_bias = s.logit_bias;
  if (s.custom_params !== undefined) sampling.custom_params = jsonToStruct(s.custom_params);
  return {
    request_id: req.rid,
    tokenized: { input_ids: req.inputIds },
    sampling_params: sampling,
    return_logprob: req.returnLogprob,
    top_logprobs_num: req.topLogprobsNum,
    stream: req.stream,
  };
}

function fromProto(msg: GenerateResponse): TokenEvent | undefined {
  if (msg.chunk && (msg.response === 'chunk' || !msg.complete)) {
    const c = msg.chunk;
    return withCounts<TokenChunk>({ kind: 'chunk', index: c.index, tokenIds: c.token_ids }, c);
  }
  if (!msg.complete) return undefined;
  const c = msg.complete;
  return withCounts<TokenComplete>({ kind: 'complete', index: c.index, outputIds: c.output_ids, finishReason: finishOf(c) }, c);
}

/** The fields a chunk and a completion share: token counts, logprobs when sent, the version when stamped. */
type Counts = 'promptTokens' | 'completionTokens' | 'cachedTokens';
function withCounts<E extends TokenEvent>(ev: Omit<E, Counts>, c: NonNullable<GenerateResponse['chunk'] | GenerateResponse['complete']>): E {
  const out = { ...ev, promptTokens: c.prompt_tokens, completionTokens: c.completion_tokens, cachedTokens: c.cached_tokens } as E;
  if (c.output_logprobs?.token_logprobs?.length) out.logprobs = c.output_logprobs.token_logprobs;
  if (c.weight_version !== undefined) out.weightVersion = c.weight_version;
  return out;
}

function finishOf(c: NonNullable<GenerateResponse['complete']>): FinishReason {
  switch (c.finish_reason) {
    case 'length':
      return { type: 'length', length: c.completion_tokens };
    case 'abort':
      return { type: 'abort', message: 'aborted by the engine' };
    default:
      return { type: 'stop', matched: c.matched_stop === 'matched_stop_str' ? (c.matched_stop_str ?? null) : (c.matched_token_id ?? null) };
  }
}

/** gRPC status → why the stream ended (aborts end with an error status). */
function toGenerationError(err: grpc.ServiceError, beforeFirst: boolean, cancelledByUs: boolean): GenerationError {
  const { status } = grpcJs();
  const detail = `${status[err.code] ?? err.code}: ${err.details || err.message}`;
  if (cancelledByUs) return new GenerationError('aborted', 'cancelled by the client', beforeFirst);
  switch (err.code) {
    case status.INVALID_ARGUMENT:
      return new GenerationError('invalid_argument', detail, beforeFirst);
    case status.UNAVAILABLE:
      return new GenerationError('unavailable', detail, beforeFirst);
    case status.DEADLINE_EXCEEDED:
      return new GenerationError('deadline', detail, beforeFirst);
    case status.CANCELLED:
    case status.INTERNAL:
    case status.ABORTED:
    case status.RESOURCE_EXHAUSTED:
      // The python servicer ends an engine-side abort with a status derived from the abort's
      // code (anything but 400/408/429/504 → INTERNAL): an abort partial, not a gateway error.
      return new GenerationError('aborted', detail, beforeFirst);
    default:
      return new GenerationError('internal', detail, beforeFirst);
  }
}

/** Plain JSON → google.protobuf.Struct as proto-loader encodes it (the inverse of structToJson). */
export function jsonToStruct(o: Record<string, unknown>): { fields: Record<string, unknown> } {
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) fields[k] = jsonToValue(v);
  return { fields };
}

function jsonToValue(v: unknown): Record<string, unknown> {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(jsonToValue) } };
  return { structValue: jsonToStruct(v as Record<string, unknown>) };
}

/** google.protobuf.Struct as proto-loader decodes it → plain JSON. */
export function structToJson(s: unknown): Record<string, unknown> {
  const fields = (s as { fields?: Record<string, unknown> } | null)?.fields;
  if (!fields) return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) out[k] = valueToJson(v);
  return out;
}

function valueToJson(v: unknown): unknown {
  const val = v as { kind?: string; [k: string]: unknown };
  switch (val?.kind) {
    case 'nullValue':
      return null;
    case 'numberValue':
      return val.numberValue;
    case 'stringValue':
      return val.stringValue;
    case 'boolValue':
      return val.boolValue;
    case 'structValue':
      return structToJson(val.structValue);
    case 'listValue':
      return ((val.listValue as { values?: unknown[] })?.values ?? []).map(valueToJson);
    default:
      return null;
  }
}
