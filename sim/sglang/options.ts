// Options of the SGLang simulator: their defaults, the `rlgate sim sglang` flag parser and the
// --help text. It owns every option name and default; it never starts a server.

import type { JoinGroup } from '../broadcast/types.ts';
import { costModelHelp, readCostFlag, type CostModel } from '../core/cost-model.ts';
import { flagJson, flagNumber } from '../core/flags.ts';
import { positiveInt, readEngineFlags, resolveEngineOptions, type CommandLine, type EngineOptions } from '../core/options.ts';
import { parseFaults, type Fault } from './faults.ts';

export type HealthMode = 'generate' | 'liveness';

export interface SglangSimOptions extends EngineOptions {
  /** Bind address; default 127.0.0.1. */
  host?: string;
  /** 0 = any free port. */
  port?: number;
  tpSize?: number;
  dpSize?: number;
  ppSize?: number;
  /** When set, every route but /health*, /metrics and /_sim/* needs `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** Faults active from the start. */
  faults?: Fault[];
  /** How long /health_generate waits for a closed gate (pause) before 503; SGLang's 20 s. */
  healthCheckTimeoutMs?: number;
  /** `generate` (newer builds: /health = /health_generate) or `liveness` (always 200). */
  healthMode?: HealthMode;
  enableMemorySaver?: boolean;
  /** Broadcast-group transport; without it the NCCL routes validate and record metadata only. */
  joinGroup?: JoinGroup;
  /** Called by the `exit` fault and POST /_sim/exit; default: drop every connection and close. */
  onExit?: (code: number) => void;
}

export interface ResolvedOptions {
  host: string;
  port: number;
  model: string;
  servedModelName: string;
  weightVersion: string;
  tpSize: number;
  dpSize: number;
  ppSize: number;
  tokenRate: number;
  apiKey: string | null;
  version: string;
  faults: Fault[];
  maxRunningRequests: number;
  streamInterval: number;
  contextLength: number;
  healthCheckTimeoutMs: number;
  healthMode: HealthMode;
  groupTimeoutMs: number;
  recordLimit: number;
  cost: CostModel;
  enableMemorySaver: boolean;
  joinGroup: JoinGroup | null;
  onExit: ((code: number) => void) | null;
}

export function resolveOptions(o: SglangSimOptions): ResolvedOptions {
  return {
    host: o.host ?? '127.0.0.1',
    port: o.port ?? 0,
    ...resolveEngineOptions(o),
    tpSize: positiveInt(o.tpSize, 1, 'tpSize'),
    dpSize: positiveInt(o.dpSize, 1, 'dpSize'),
    ppSize: positiveInt(o.ppSize, 1, 'ppSize'),
    apiKey: o.apiKey ? o.apiKey : null,
    version: o.version ?? '0.5.19',
    faults: o.faults ?? [],
    healthCheckTimeoutMs: o.healthCheckTimeoutMs ?? 20_000,
    healthMode: o.healthMode ?? 'generate',
    enableMemorySaver: o.enableMemorySaver ?? true,
    joinGroup: o.joinGroup ?? null,
    onExit: o.onExit ?? null,
  };
}

export type Transport = 'auto' | 'metadata';

export interface CliOptions extends CommandLine {
  options: SglangSimOptions;
  transport: Transport;
}

export const HELP = `Usage: rlgate sim sglang [flags]

An SGLang-shaped HTTP engine for demos, tests and benchmarks.
Prints {"event":"listening","url":...,"port":...} on stdout when ready; SIGTERM/SIGINT stop it.

  --host <addr>                 bind address (default 127.0.0.1)
  --port <n>                    port, 0 = any free port (default 0)
  --model <name>                model_path (default sim-model); also --model-path
  --served-model-name <name>    served_model_name (default = --model)
  --weight-version <v>          initial weight_version (default "default")
  --tp-size <n>                 tp_size, also the GPUs joined to a broadcast group (default 1);
                                also --tp, --tensor-parallel-size (SGLang's spellings)
  --dp-size <n>                 dp_size: /v1/loads reports one entry per rank (default 1);
                                also --dp, --data-parallel-size
  --pp-size <n>                 pp_size (default 1); also --pp, --pipeline-parallel-size
  --token-rate <r>              tokens/s per request; 0 or inf = as fast as possible (default 2000)
  --max-running <n>             max running requests; more wait in the queue (default 256);
                                also --max-running-requests
  --stream-interval <n>         a streamed answer sends an event every n tokens, and at the first
                                and the last (SGLang's --stream-interval; default 1)
${costModelHelp(32)}  --context-length <n>          longest accepted prompt, in tokens (default 32768)
  --api-key <key>               require "Authorization: Bearer <key>" (not on /health*, /_sim/*)
  --version <v>                 SGLang version reported by /server_info (default 0.5.19)
  --fault <json>                a fault object or list (repeatable); see sim/sglang/README.md
  --health-mode generate|liveness   /health behaves as /health_generate, or always 200 (default generate)
  --health-check-timeout <ms>   /health_generate wait while paused before 503 (default 20000)
  --group-timeout <ms>          broadcast-group rendezvous/receive deadline (default 120000)
  --record-limit <n>            requests kept for /_sim/requests, 0 = off (default 10000)
  --no-memory-saver             answer release/resume_memory_occupation with 400
  --transport auto|metadata     auto: use sim/broadcast/member.ts when present (default auto)
  --exit-on-stdin-close         stop when stdin reaches EOF (for harnesses that spawn it)
  --help                        this text
`;

/** Parses `--flag value` and `--flag=value`; unknown flags are an error. */
export function parseArgs(argv: readonly string[]): CliOptions {
  const o: SglangSimOptions = {};
  const faults: Fault[] = [];
  let transport: Transport = 'auto';
  const line = readEngineFlags(argv, o, (flag, next) => {
    switch (flag) {
      case '--host':
        o.host = next();
        break;
      case '--port':
        o.port = flagNumber(flag, next());
        break;
      case '--served-model-name':
        o.servedModelName = next();
        break;
      case '--tp-size':
      case '--tp':
      case '--tensor-parallel-size':
        o.tpSize = flagNumber(flag, next());
        break;
      case '--dp-size':
      case '--dp':
      case '--data-parallel-size':
        o.dpSize = flagNumber(flag, next());
        break;
      case '--pp-size':
      case '--pp':
      case '--pipeline-parallel-size':
        o.ppSize = flagNumber(flag, next());
        break;
      case '--max-running':
      case '--max-running-requests':
        o.maxRunningRequests = flagNumber(flag, next());
        break;
      case '--stream-interval':
        o.streamInterval = flagNumber(flag, next());
        break;
      case '--api-key':
        o.apiKey = next();
        break;
      case '--fault': {
        const parsed = flagJson(flag, next());
        faults.push(...parseFaults(parsed));
        break;
      }
      case '--health-mode': {
        const v = next();
        if (v !== 'generate' && v !== 'liveness') throw new Error('--health-mode is generate or liveness');
        o.healthMode = v;
        break;
      }
      case '--health-check-timeout':
        o.healthCheckTimeoutMs = flagNumber(flag, next());
        break;
      case '--no-memory-saver':
        o.enableMemorySaver = false;
        break;
      case '--transport': {
        const v = next();
        if (v !== 'auto' && v !== 'metadata') throw new Error('--transport is auto or metadata');
        transport = v;
        break;
      }
      default:
        return readCostFlag(flag, next, o);
    }
    return true;
  });
  if (faults.length > 0) o.faults = faults;
  return { options: o, transport, ...line };
}
