// Options of the ZMQ engine simulator: names, defaults, the `rlgate sim zmq` flag parser and the
// --help text, plus the handshake-address rule the gateway also follows (FNV-1a-64 of the ipc
// path, re-implemented here on purpose). Engine options map onto the shared TokenSpeed engine's
// (sim/tokenspeed/options.ts). It never opens a socket.

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JoinGroup } from '../broadcast/types.ts';
import { FaultError } from '../core/faults.ts';
import { flagJson, flagNumber } from '../core/flags.ts';
import { positiveInt, readEngineFlags, type CommandLine } from '../core/options.ts';
import { parseFaults as parseControlFaults, type FaultRule } from '../tokenspeed/faults.ts';
import type { TokenspeedSimOptions } from '../tokenspeed/options.ts';
import { parseFaults, type SimFault } from './faults.ts';

export interface ZmqSimOptions {
  /** Worker URL the gateway registers: `ipc://<path>` or `tcp://127.0.0.1:<port>`. Default: a fresh ipc path. */
  url?: string;
  /** Handshake address to dial; default: tcp://127.0.0.1:<20000 + FNV-1a-64(path) % 10000> (tcp URLs: the URL). */
  handshakeAddress?: string;
  /** DP rank: the 2-byte engine identity and `engine_index` of every batch. */
  rank?: number;
  dpSize?: number;
  tpSize?: number;
  ppSize?: number;
  model?: string;
  weightVersion?: string;
  /** Tokens/s per request; 0 or Infinity = as fast as possible. Default 2000. */
  tokenRate?: number;
  maxRunning?: number;
  /** `max_model_len` in the ready response. */
  contextLength?: number;
  /** `vllm_version` in the ready response (TokenSpeed sends its own version there). */
  version?: string;
  /** Admin HTTP port (`/_sim/*`, always 127.0.0.1; 0 = any free port). */
  adminPort?: number;
  /** Control app port (0 = any free port); null = no control app. Default 0. */
  rlControlPort?: number | null;
  rlControlHost?: string;
  rlControlApiKey?: string;
  /** Lane faults (faults.ts). */
  faults?: SimFault[];
  /** Control-app route faults (sim/tokenspeed/faults.ts). */
  controlFaults?: FaultRule[];
  groupTimeoutMs?: number;
  recordLimit?: number;
  /** Broadcast transport for the NCCL-shaped refit routes; without it they move no bytes. */
  joinGroup?: JoinGroup;
  /** Called by `exit` faults and POST /_sim/exit; default process.exit. */
  onExit?: (code: number) => void;
}

export interface Resolved {
  url: string;
  /** The temporary socket directory made for a default URL; removed on close. */
  createdDir: string | null;
  handshakeAddress: string;
  rank: number;
  dpSize: number;
  tpSize: number;
  ppSize: number;
  adminPort: number;
  faults: SimFault[];
  onExit: (code: number) => void;
  /** What the shared TokenSpeed engine and its control app are started with. */
  engine: TokenspeedSimOptions;
}

/** 64-bit FNV-1a → the gateway's default handshake port for an ipc path. */
export function defaultHandshakePort(path: string): number {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(path, 'utf8')) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return 20000 + Number(h % 10000n);
}

export function resolve(o: ZmqSimOptions): Resolved {
  if (o.url !== undefined && !o.url.startsWith('ipc://') && !o.url.startsWith('tcp://')) {
    throw new Error(`--url must be ipc://<path> or tcp://127.0.0.1:<port>, got ${o.url}`);
  }
  const createdDir = o.url === undefined ? mkdtempSync(join(tmpdir(), 'rlgate-zmq-')) : null;
  const url = o.url ?? `ipc://${join(createdDir!, 'engine')}`;
  const handshakeAddress = o.handshakeAddress ?? (url.startsWith('tcp://') ? url : `tcp://127.0.0.1:${defaultHandshakePort(url.slice('ipc://'.length))}`);
  if (!handshakeAddress.startsWith('tcp://')) throw new Error(`--handshake-address must be tcp://, got ${handshakeAddress}`);
  const rank = o.rank ?? 0;
  if (!Number.isInteger(rank) || rank < 0 || rank > 0xffff) throw new Error('--dp-rank must be an integer in 0..65535');
  const onExit = o.onExit ?? ((code: number) => process.exit(code));
  const tpSize = positiveInt(o.tpSize, 1, 'tpSize');
  return {
    url,
    createdDir,
    handshakeAddress,
    rank,
    dpSize: positiveInt(o.dpSize, rank + 1, 'dpSize'),
    tpSize,
    ppSize: positiveInt(o.ppSize, 1, 'ppSize'),
    adminPort: o.adminPort ?? 0,
    faults: o.faults ?? [],
    onExit,
    engine: {
      // One process is one DP rank: the engine state behind it has a single rank.
      dpSize: 1,
      attnTpSize: tpSize,
      model: o.model,
      weightVersion: o.weightVersion,
      tokenRate: o.tokenRate,
      maxRunningRequests: o.maxRunning,
      contextLength: o.contextLength,
      version: o.version ?? 'tokenspeed-sim-0.2.0',
      rlControlPort: o.rlControlPort === undefined ? 0 : o.rlControlPort,
      rlControlHost: o.rlControlHost,
      rlControlApiKey: o.rlControlApiKey,
      faults: o.controlFaults,
      groupTimeoutMs: o.groupTimeoutMs,
      recordLimit: o.recordLimit,
      joinGroup: o.joinGroup,
      onExit,
    },
  };
}

export interface Cli extends CommandLine {
  options: ZmqSimOptions;
}

export const HELP = `Usage: rlgate sim zmq [flags]

A TokenSpeed engine on the ZMQ lane: it dials the gateway's handshake socket,
serves ADD/ABORT frames and pushes output batches, with TokenSpeed's HTTP RL control app on
--rl-control-port and /_sim admin routes on --port. Prints {"event":"listening","url":...,
"handshake":...,"control_url":...,"admin_url":...,"port":...} when up (the ZMQ dial retries until
the gateway binds).

  --url <ipc://path|tcp://127.0.0.1:P>  worker URL to register (default: ipc://<fresh tmp dir>/engine)
  --handshake-address <tcp://...>       address to dial (default: FNV-derived port for ipc, the URL for tcp)
  --dp-rank <n>                  engine identity and engine_index (default 0)
  --dp-size / --tp-size / --pp-size <n>  parallelism in the ready response (default rank+1 / 1 / 1)
  --model <name>                 model path for the control app's /model_info (default sim-model)
  --weight-version <v>           initial weight version (default "default")
  --token-rate <r>               tokens/s per request; 0 or inf = as fast as possible (default 2000)
  --max-running <n>              running requests; more wait (default 256)
  --context-length <n>           max_model_len (default 32768)
  --version <v>                  engine version in the ready response (default tokenspeed-sim-0.2.0)
  --port <n>                     admin port (/_sim/*, 127.0.0.1), 0 = any free port (default 0)
  --rl-control-port <n>          control app port, 0 = any free port (default 0)
  --no-rl-control                no control app (a ZMQ worker without rl.control_url)
  --rl-control-host <addr>       control app bind address (default 127.0.0.1)
  --rl-control-api-key <key>     bearer key for every control route
  --fault <json>                 a lane fault or list (repeatable); see sim/zmq/README.md
  --control-fault <json>         a control-route fault or list (sim/tokenspeed/README.md)
  --group-timeout <ms>           broadcast-group rendezvous/receive deadline (default 120000)
  --record-limit <n>             control requests kept for /_sim/requests (default 10000)
  --exit-on-stdin-close          stop when stdin reaches EOF (for harnesses that spawn it)
  --help                         this text
`;

/** Parses `--flag value` and `--flag=value`; unknown flags are an error. */
export function parseArgs(argv: readonly string[]): Cli {
  const o: ZmqSimOptions = {};
  const faults: SimFault[] = [];
  const controlFaults: FaultRule[] = [];
  const line = readEngineFlags(argv, o, (flag, next) => {
    switch (flag) {
      case '--url':
        o.url = next();
        break;
      case '--handshake-address':
        o.handshakeAddress = next();
        break;
      case '--dp-rank':
        o.rank = flagNumber(flag, next());
        break;
      case '--dp-size':
        o.dpSize = flagNumber(flag, next());
        break;
      case '--tp-size':
        o.tpSize = flagNumber(flag, next());
        break;
      case '--pp-size':
        o.ppSize = flagNumber(flag, next());
        break;
      case '--max-running':
        o.maxRunning = flagNumber(flag, next());
        break;
      case '--port':
      case '--admin-port':
        o.adminPort = flagNumber(flag, next());
        break;
      case '--rl-control-port':
        o.rlControlPort = flagNumber(flag, next());
        break;
      case '--no-rl-control':
        o.rlControlPort = null;
        break;
      case '--rl-control-host':
        o.rlControlHost = next();
        break;
      case '--rl-control-api-key':
        o.rlControlApiKey = next();
        break;
      case '--fault':
        faults.push(...parseFaults(flagJson(flag, next())));
        break;
      case '--control-fault':
        try {
          controlFaults.push(...parseControlFaults(flagJson(flag, next())));
        } catch (e) {
          throw e instanceof FaultError ? new Error(`--control-fault: ${e.message}`) : e;
        }
        break;
      default:
        return false;
    }
    return true;
  });
  if (faults.length > 0) o.faults = faults;
  if (controlFaults.length > 0) o.controlFaults = controlFaults;
  return { options: o, ...line };
}
