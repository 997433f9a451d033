// The launch options every simulated engine spells, defaults and checks alike: the model and its
// version, the token rate, the batch and context limits, the group deadline, the record limit,
// and the command-line switches every simulator has (`--help`, `--exit-on-stdin-close`). The cost
// model's options resolve here too; their flags are cost-model.ts's, read only by the simulators
// that model cost. Each simulator keeps its other flags, its own defaults where they differ, and
// its --help text; this file never starts anything.

import { resolveCostModel, type CostModel, type CostModelOptions } from './cost-model.ts';
import { flagNumber, readFlags } from './flags.ts';

/** The options below, as a simulator's options object carries them. */
export interface EngineOptions {
  /** `model_path`; default `sim-model`. */
  model?: string;
  /** `served_model_name`; default = model. */
  servedModelName?: string;
  /** Initial `weight_version`; default `"default"`. */
  weightVersion?: string;
  /** Tokens/s per request; 0 or Infinity = as fast as possible. Default 2000. */
  tokenRate?: number;
  maxRunningRequests?: number;
  /** SGLang's `--stream-interval`: a streamed answer sends an event every this many tokens (and at the first and the last). Default 1. */
  streamInterval?: number;
  contextLength?: number;
  /** Broadcast-group rendezvous and per-chunk receive deadline; default 120 s. */
  groupTimeoutMs?: number;
  /** Requests kept for `/_sim/requests` (and any other record); 0 = none. Default 10000. */
  recordLimit?: number;
  /** The engine's own version string. */
  version?: string;
  /** Which cost model and its figures; default the fixed one. */
  cost?: CostModelOptions;
}

export interface ResolvedEngineOptions {
  model: string;
  servedModelName: string;
  weightVersion: string;
  tokenRate: number;
  maxRunningRequests: number;
  streamInterval: number;
  contextLength: number;
  groupTimeoutMs: number;
  recordLimit: number;
  cost: CostModel;
}

/** A positive integer option, `d` when absent. */
export function positiveInt(v: number | undefined, d: number, name: string): number {
  const x = v ?? d;
  if (!Number.isInteger(x) || x < 1) throw new Error(`${name} must be a positive integer`);
  return x;
}

export function resolveEngineOptions(o: EngineOptions): ResolvedEngineOptions {
  const model = o.model ?? 'sim-model';
  return {
    model,
    servedModelName: o.servedModelName ?? model,
    weightVersion: o.weightVersion ?? 'default',
    tokenRate: o.tokenRate === undefined ? 2000 : o.tokenRate <= 0 ? Infinity : o.tokenRate,
    maxRunningRequests: positiveInt(o.maxRunningRequests, 256, 'maxRunningRequests'),
    streamInterval: positiveInt(o.streamInterval, 1, 'streamInterval'),
    contextLength: positiveInt(o.contextLength, 32768, 'contextLength'),
    groupTimeoutMs: o.groupTimeoutMs ?? 120_000,
    recordLimit: o.recordLimit ?? 10_000,
    cost: resolveCostModel(o.cost ?? {}),
  };
}

export interface CommandLine {
  help: boolean;
  /** Stop when stdin closes: a test harness that dies takes its simulators with it. */
  exitOnStdinClose: boolean;
}

/**
 * Walks argv (`--flag value` and `--flag=value`): `--help`/`-h`, `--exit-on-stdin-close` and the
 * flags every simulator spells alike land here, in `o`; every other flag goes to `visit`, which
 * returns false for one it does not know (an error).
 */
export function readEngineFlags(argv: readonly string[], o: EngineOptions, visit: (flag: string, next: () => string) => boolean): CommandLine {
  const line: CommandLine = { help: false, exitOnStdinClose: false };
  readFlags(argv, (flag, next) => {
    switch (flag) {
      case '--help':
      case '-h':
        line.help = true;
        return;
      case '--exit-on-stdin-close':
        line.exitOnStdinClose = true;
        return;
      case '--model':
      case '--model-path':
        o.model = next();
        return;
      case '--weight-version':
        o.weightVersion = next();
        return;
      case '--token-rate':
        o.tokenRate = flagNumber(flag, next());
        return;
      case '--context-length':
        o.contextLength = flagNumber(flag, next());
        return;
      case '--version':
        o.version = next();
        return;
      case '--group-timeout':
        o.groupTimeoutMs = flagNumber(flag, next());
        return;
      case '--record-limit':
        o.recordLimit = flagNumber(flag, next());
        return;
      default:
        if (!visit(flag, next)) throw new Error(`unknown flag ${flag} (see --help)`);
    }
  });
  return line;
}
