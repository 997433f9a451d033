// The ZMQ lane's addressing and startup handshake: which sockets a
// worker URL binds, the FNV-derived handshake port, the engine identity, and the msgpack maps
// with named keys (HELLO/READY in, INIT out, the engine's ready response on the input socket).
// Pure: binding and receiving belong to lane.ts.

import { MsgpackWriter } from './msgpack-writer.ts';
import { unpackr, WireError } from './wire.ts';

export interface LaneAddresses {
  /** Handshake ROUTER (always tcp). A `:0` port means "any free port", read back after bind. */
  handshake: string;
  /** Input ROUTER the engines connect to for requests. */
  input: string;
  /** Output PULL the engines push their batches to. */
  output: string;
  /** ipc socket files to clear before binding and whose directory must be ours; empty for tcp. */
  ipcPaths: string[];
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** 64-bit FNV-1a over the UTF-8 bytes of `text`. */
export function fnv1a64(text: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(text, 'utf8')) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

/** The default handshake port of an ipc path: 20000 + FNV-1a-64(path) % 10000. */
export function handshakePort(ipcPath: string): number {
  return 20000 + Number(fnv1a64(ipcPath) % 10000n);
}

/**
 * The sockets a worker URL (without its `@rank` suffix) binds. `ipc://<path>`: handshake
 * `tcp://127.0.0.1:<FNV port>` unless `handshakeAddress` overrides it, input `ipc://<path>-in.sock`,
 * output `ipc://<path>-out.sock`. `tcp://127.0.0.1:<port>` (rlgate's own variant, no SMG
 * equivalent): the handshake binds that address and the data-plane sockets take free loopback
 * ports, handed to the engine in INIT. Throws on anything else.
 */
export function laneAddresses(baseUrl: string, handshakeAddress?: string): LaneAddresses {
  if (handshakeAddress !== undefined) checkTcp(handshakeAddress, 'zmq_handshake_address');
  if (baseUrl.startsWith('ipc://')) {
    const path = baseUrl.slice('ipc://'.length);
    if (!path.startsWith('/')) throw new Error(`ZMQ worker URL must be ipc://<absolute path>, got '${baseUrl}'`);
    return {
      handshake: handshakeAddress ?? `tcp://127.0.0.1:${handshakePort(path)}`,
      input: `ipc://${path}-in.sock`,
      output: `ipc://${path}-out.sock`,
      ipcPaths: [`${path}-in.sock`, `${path}-out.sock`],
    };
  }
  if (baseUrl.startsWith('tcp://')) {
    checkTcp(baseUrl, 'ZMQ worker URL');
    return { handshake: handshakeAddress ?? baseUrl, input: 'tcp://127.0.0.1:0', output: 'tcp://127.0.0.1:0', ipcPaths: [] };
  }
  throw new Error(`ZMQ worker URL must be ipc://<path> or tcp://127.0.0.1:<port>, got '${baseUrl}'`);
}

/** The lane only ever binds loopback (same host only). */
function checkTcp(address: string, what: string): void {
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d+)$/.exec(address);
  if (!m) throw new Error(`${what} must be tcp://<host>:<port>, got '${address}'`);
  if (!LOOPBACK.has(m[1])) throw new Error(`${what} must name a loopback host (the ZMQ lane is same-host only), got '${address}'`);
  if (Number(m[2]) > 65535) throw new Error(`${what} has a port out of range: '${address}'`);
}

/** What libzmq binds for an address: port 0 becomes its wildcard `*`. */
export function bindable(address: string): string {
  return address.replace(/^(tcp:\/\/.+):0$/, '$1:*');
}

/** The engine identity: its DP rank as 2 little-endian bytes. */
export function engineIdentity(rank: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(rank);
  return b;
}

/** The rank of a 2-byte identity; null for any other identity. */
export function rankOf(identity: Buffer): number | null {
  return identity.length === 2 ? identity.readUInt16LE(0) : null;
}

/** `HandshakeInitMessage`: the data-plane addresses, as a named map. */
export function encodeInit(input: string, output: string): Buffer {
  const w = new MsgpackWriter(128 + input.length + output.length);
  w.mapHeader(2);
  w.str('addresses');
  w.mapHeader(5);
  w.str('inputs');
  w.arrayHeader(1);
  w.str(input);
  w.str('outputs');
  w.arrayHeader(1);
  w.str(output);
  w.str('coordinator_input');
  w.nil();
  w.str('coordinator_output');
  w.nil();
  w.str('frontend_stats_publish_address');
  w.nil();
  w.str('parallel_config');
  w.mapHeader(0);
  return w.done();
}

function decodeMap(payload: Buffer, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = unpackr().unpack(payload);
  } catch (e) {
    throw new WireError(`undecodable ${what}: ${(e as Error).message}`);
  }
  // A positional array here means the sender used the data-plane encoding: the classic mismatch.
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new WireError(`${what} is not a msgpack map with named keys`);
  return v as Record<string, unknown>;
}

/** `ReadyMessage.status` of a handshake frame: `HELLO`, `READY`, or whatever else was sent. */
export function decodeReadyStatus(payload: Buffer): string | null {
  const m = decodeMap(payload, 'handshake message');
  return typeof m.status === 'string' ? m.status : null;
}

/** The fields of `EngineCoreReadyResponse` the gateway reads (absent numbers are null). */
export interface EngineReady {
  maxModelLen: number | null;
  numGpuBlocks: number | null;
  /** `block_size`, or TokenSpeed's `prefix_granularity`. */
  blockSize: number | null;
  dtype: string | null;
  engineVersion: string | null;
  worldSize: number | null;
  dataParallelSize: number | null;
  tensorParallelSize: number | null;
  pipelineParallelSize: number | null;
  dataParallelRank: number | null;
  maxNumSeqs: number | null;
  /** TokenSpeed's `chunked_prefill_size`; -1 = off. */
  maxNumBatchedTokens: number | null;
  instanceId: string | null;
  kvCacheSizeTokens: number | null;
}

function num(m: Record<string, unknown>, key: string): number | null {
  const v = Object.hasOwn(m, key) ? m[key] : undefined;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function text(m: Record<string, unknown>, key: string): string | null {
  const v = Object.hasOwn(m, key) ? m[key] : undefined;
  return typeof v === 'string' ? v : null;
}

/** Reads the registration an engine sends on the input socket after READY. */
export function decodeEngineReady(payload: Buffer): EngineReady {
  if (payload.length === 0) throw new WireError('empty EngineCoreReadyResponse');
  const m = decodeMap(payload, 'EngineCoreReadyResponse');
  if (num(m, 'max_model_len') === null) throw new WireError('EngineCoreReadyResponse has no max_model_len');
  return {
    maxModelLen: num(m, 'max_model_len'),
    numGpuBlocks: num(m, 'num_gpu_blocks'),
    blockSize: num(m, 'block_size') ?? num(m, 'prefix_granularity'),
    dtype: text(m, 'dtype'),
    engineVersion: text(m, 'vllm_version'),
    worldSize: num(m, 'world_size'),
    dataParallelSize: num(m, 'data_parallel_size'),
    tensorParallelSize: num(m, 'tensor_parallel_size'),
    pipelineParallelSize: num(m, 'pipeline_parallel_size'),
    dataParallelRank: num(m, 'data_parallel_rank'),
    maxNumSeqs: num(m, 'max_num_seqs'),
    maxNumBatchedTokens: num(m, 'max_num_batched_tokens'),
    instanceId: text(m, 'instance_id'),
    kvCacheSizeTokens: num(m, 'kv_cache_size_tokens'),
  };
}
