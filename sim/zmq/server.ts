// Starts one simulated ZMQ engine: the shared TokenSpeed engine state (sim/tokenspeed) with
// its HTTP RL control app and admin server, the ZMQ face and link dialling the gateway, and the
// lane's admin server in front. Returns its URLs and a clean close; no engine behaviour here.

import { rmSync } from 'node:fs';
import { TsEngine } from '../tokenspeed/engine.ts';
import { startHttpFaces, type HttpFaces } from '../tokenspeed/http-faces.ts';
import { resolveOptions } from '../tokenspeed/options.ts';
import { startZmqAdmin, type ZmqAdmin } from './admin.ts';
import { KV_TOTAL_PAGES, PAGE_SIZE, ZmqFace } from './face.ts';
import { Link } from './link.ts';
import { resolve, type ZmqSimOptions } from './options.ts';

export type { ZmqSimOptions } from './options.ts';

export interface ZmqSim {
  /** Worker URL to register with the gateway. */
  url: string;
  handshakeAddress: string;
  /** The control app's URL; null with --no-rl-control. Register it as the `rl.control_url` label. */
  controlUrl: string | null;
  /** The `/_sim/*` admin server. */
  adminUrl: string;
  port: number;
  engine: TsEngine;
  face: ZmqFace;
  close(): Promise<void>;
}

export async function startZmqSim(options: ZmqSimOptions = {}): Promise<ZmqSim> {
  const o = resolve(options);
  const ts = resolveOptions(o.engine);
  const engine = new TsEngine(ts);
  // EngineCoreReadyResponse as TokenSpeed fills it (`prefix_granularity`, chunked prefill -1).
  const readyResponse = {
    max_model_len: ts.contextLength,
    num_gpu_blocks: KV_TOTAL_PAGES,
    prefix_granularity: PAGE_SIZE,
    dp_stats_address: null,
    dtype: 'bfloat16',
    multimodal_encoder_dtype: null,
    vllm_version: ts.version,
    world_size: o.tpSize * o.ppSize,
    data_parallel_size: o.dpSize,
    tensor_parallel_size: o.tpSize,
    pipeline_parallel_size: o.ppSize,
    decode_context_parallel_size: 1,
    data_parallel_rank: o.rank,
    max_num_seqs: ts.maxRunningRequests,
    max_num_batched_tokens: -1,
    instance_id: `zmq-sim-${process.pid}-${o.rank}`,
    kv_cache_size_tokens: KV_TOTAL_PAGES * PAGE_SIZE,
    kv_cache_max_concurrency: null,
    kv_events_config: null,
  };
  let face: ZmqFace | null = null;
  const link = new Link({ handshakeAddress: o.handshakeAddress, rank: o.rank, readyResponse }, (frames) => face?.onRequest(frames));
  face = new ZmqFace(engine, link, o.rank, o.onExit);
  let http: HttpFaces | null = null;
  let admin: ZmqAdmin | null = null;
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    engine.shuttingDown = true;
    face?.close();
    engine.close();
    await Promise.all([http?.close(), admin?.close(), link.close()]);
    if (o.createdDir) rmSync(o.createdDir, { recursive: true, force: true });
  };
  try {
    // The engine's own admin server sits behind the lane's, on any free port.
    http = await startHttpFaces(engine, o.onExit, 0);
    admin = await startZmqAdmin(engine, face, http.admin.url, o.adminPort);
  } catch (e) {
    await close();
    throw e;
  }
  for (const f of o.faults) face.applyFault(f);
  link.start();
  return {
    url: o.url,
    handshakeAddress: o.handshakeAddress,
    controlUrl: http.control?.url ?? null,
    adminUrl: admin.url,
    port: admin.port,
    engine,
    face,
    close,
  };
}
