// Every TokenSpeedScheduler method but Generate: HealthCheck (deep
// probe), Abort (rid and its `-n<i>` children), GetModelInfo, GetServerInfo, GetLoads, FlushCache,
// StartProfile/StopProfile, GetTokenizer (the zipped tokenizer files) and SubscribeKvEvents.
// Unary handlers return a message or throw RpcError; faults and recording wrap them elsewhere.

import { loadsAnswer, type RankLoadFields } from '../core/loads.ts';
import { status, type ServerWritableStream } from '@grpc/grpc-js';
import { abortFinish } from '../core/sequence.ts';
import { BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, VOCAB_SIZE } from '../core/tokens.ts';
import { bundleChunks, zipStored } from './bundle.ts';
import type { TsEngine } from './engine.ts';
import { RpcError } from './generate.ts';
import { toStruct } from './proto.ts';
import { schedulerInfo, serverArgs } from './server-args.ts';
import { tokenizerFiles } from './tokenizer.ts';

type Req = Record<string, any>;
type Msg = Record<string, unknown>;
export type UnaryHandler = (req: Req) => Msg | Promise<Msg>;
export type StreamHandler = (call: ServerWritableStream<Req, Msg>) => void;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function unimplemented(method: string): never {
  throw new RpcError(status.UNIMPLEMENTED, `${method} is not implemented by the rust servicer`);
}

export function unaryHandlers(engine: TsEngine): Record<string, UnaryHandler> {
  const o = engine.opts;
  return {
    async HealthCheck() {
      if (engine.shuttingDown) return { healthy: false, message: 'Server is shutting down' };
      const ok = await engine.scheduler.probe(o.healthCheckTimeoutMs);
      return ok
        ? { healthy: true, message: 'Health check passed' }
        : { healthy: false, message: `Health check timeout after ${o.healthCheckTimeoutMs / 1000}s` };
    },

    Abort(req) {
      const rid = String(req.request_id ?? '');
      const child = new RegExp(`^${escapeRegExp(rid)}-n\\d+$`);
      const n = engine.scheduler.abortWhere((r) => r === rid || child.test(r), abortFinish(req.reason ? `Aborted: ${req.reason}` : 'Aborted by client'));
      return n > 0 ? { success: true, message: `Aborted ${n} request(s) for ${rid}` } : { success: false, message: `Request ${rid} not found` };
    },

    GetModelInfo() {
      return {
        model_path: engine.weights.modelPath,
        tokenizer_path: o.tokenizerPath,
        served_model_name: o.servedModelName,
        model_type: 'llama',
        architectures: ['LlamaForCausalLM'],
        max_context_length: o.contextLength,
        max_req_input_len: o.contextLength - 1,
        vocab_size: VOCAB_SIZE,
        eos_token_ids: [EOS_TOKEN_ID],
        pad_token_id: PAD_TOKEN_ID,
        bos_token_id: BOS_TOKEN_ID,
        weight_version: engine.factsVersion(),
        default_sampling_params_json: '',
        supports_vision: false,
        supports_multimodal: false,
        supported_modalities: [],
        model_dtype: 'bfloat16',
        multimodal_encoder_dtype: 'bfloat16',
      };
    },

    GetServerInfo() {
      return {
        server_args: toStruct(serverArgs(engine)),
        scheduler_info: toStruct(schedulerInfo(engine)),
        active_requests: engine.scheduler.counts().live,
        is_paused: o.profile.reportsPaused ? engine.paused : false,
        uptime_seconds: (Date.now() - engine.startedAt) / 1000,
        max_total_num_tokens: engine.maxTotalTokens,
        tokenspeed_version: o.version,
        start_time: { seconds: Math.floor(engine.startedAt / 1000), nanos: (engine.startedAt % 1000) * 1_000_000 },
      };
    },

    GetLoads(req) {
      const include = new Set<string>((req.include as string[] | undefined)?.length ? req.include : ['core']);
      const all = include.has('all');
      const ranks = engine.scheduler.countsByRank();
      const kv = engine.scheduler.kvByRank();
      const paused = engine.scheduler.counts().held;
      const total = engine.maxTotalTokens;
      const loads = ranks
        .map((r, dp_rank) => {
          const load: Msg = {
            dp_rank,
            num_running_reqs: r.running,
            num_waiting_reqs: r.waiting,
            num_total_reqs: r.running + r.waiting,
            num_used_tokens: r.tokens,
            max_total_num_tokens: total,
            max_running_requests: o.maxRunningRequests,
            token_usage: r.tokens / total,
            gen_throughput: 0,
            cache_hit_rate: kv?.[dp_rank].cacheHitRate ?? 0,
            utilization: r.running / o.maxRunningRequests,
            num_waiting_uncached_tokens: 0,
          };
          if (all || include.has('memory')) load.memory = { weight_gb: 2, kv_cache_gb: 8, graph_gb: 0.5, token_capacity: total };
          if (all || include.has('queues')) load.queues = { waiting: r.waiting, grammar: 0, paused: dp_rank === 0 ? paused : 0, retracted: 0 };
          return load;
        })
        .filter((l) => req.dp_rank === undefined || l.dp_rank === req.dp_rank);
      return loadsAnswer(loads as Array<Record<string, unknown> & RankLoadFields>, 'tokenspeed', o.maxRunningRequests);
    },

    async FlushCache(req) {
      if (!o.profile.adminRpcs) unimplemented('FlushCache');
      const waitS = Number(req.timeout_s ?? 0);
      const sched = engine.scheduler;
      if (waitS > 0 && !sched.idle) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          sched.whenIdle(),
          new Promise<void>((r) => {
            timer = setTimeout(r, waitS * 1000);
          }),
        ]);
        clearTimeout(timer);
      }
      if (sched.flushCache()) return { success: true, message: 'Cache flushed successfully' };
      const c = sched.counts();
      return { success: false, message: `Cache flush failed: ${c.running} running and ${c.waiting} waiting requests` };
    },

    StartProfile(req) {
      if (!o.profile.adminRpcs) unimplemented('StartProfile');
      if (engine.profiling) throw new RpcError(status.INTERNAL, 'Start profiling failed: profiling is already in progress');
      engine.profiling = { since: new Date().toISOString(), outputDir: req.output_dir ?? null };
      return { success: true, message: 'Start profiling succeeded' };
    },

    StopProfile() {
      if (!o.profile.adminRpcs) unimplemented('StopProfile');
      if (!engine.profiling) throw new RpcError(status.INTERNAL, 'Stop profiling failed: profiling is not in progress');
      engine.profiling = null;
      return { success: true, message: 'Stop profiling succeeded' };
    },
  };
}

export function streamHandlers(engine: TsEngine): Record<string, StreamHandler> {
  const o = engine.opts;
  let archive: Buffer | null = null;
  return {
    GetTokenizer(call) {
      if (!o.tokenizerPath) {
        call.emit('error', { code: status.FAILED_PRECONDITION, details: 'Tokenizer path is not configured on this server.' });
        return;
      }
      archive ??= zipStored(tokenizerFiles({ modelName: o.model, contextLength: o.contextLength }));
      for (const c of bundleChunks(archive)) call.write({ data: c.data, sha256: c.sha256 });
      call.end();
    },

    SubscribeKvEvents(call) {
      const kv = engine.kv;
      if (!kv) {
        call.emit('error', {
          code: status.UNIMPLEMENTED,
          details: 'KV cache events not enabled. Start TokenSpeed with --kv-events-config \'{"enable_kv_cache_events": true, "publisher": "zmq"}\'',
        });
        return;
      }
      let start = 0n;
      try {
        start = BigInt(call.request.start_sequence_number ?? 0);
      } catch {
        start = 0n;
      }
      const unsubscribe = kv.subscribe(start, (batch) => {
        if (!call.cancelled) call.write({ ...batch });
      });
      const end = (): void => {
        unsubscribe();
        engine.subscriptions.delete(end);
        if (!call.cancelled) call.end();
      };
      engine.subscriptions.add(end);
      call.on('cancelled', end);
    },
  };
}
