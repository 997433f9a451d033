// Command-line face of the trainer simulator: parse flags, run one distributed refit through the
// gateway, print the gateway's report as JSON on stdout and a one-line summary on stderr.
// It owns no refit logic (refit.ts) and no parameter synthesis (chunks.ts).

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { DEFAULT_DTYPE, DEFAULT_SHAPE, makeChunks } from './chunks.ts';
import { runDistributedRefit, type DistributedRefitResult } from './refit.ts';

export const TRAINER_USAGE = `usage: trainer --gateway URL --version V [--params N] [--per-chunk K]
               [--admin-key KEY] [--selector EXPR] [--group NAME] [--dtype D] [--shape A,B]
               [--master-address HOST]
  --params     parameters in the synthetic model (default 146)
  --per-chunk  parameters per update_weights_from_distributed call (default 64)
  --admin-key  gateway admin key (default: $RLGATE_ADMIN_KEY)
  --master-address  address the broadcast group binds and the engines dial (default 127.0.0.1;
               in containers, the trainer's host name)`;

export interface TrainerArgs {
  gateway: string;
  version: string;
  params: number;
  perChunk: number;
  adminKey?: string;
  selector?: string;
  groupName?: string;
  masterAddress?: string;
  dtype: string;
  shape: number[];
}

/** Parse the flags; throws an Error whose message says what is wrong. */
export function parseTrainerArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): TrainerArgs {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      gateway: { type: 'string' },
      version: { type: 'string' },
      params: { type: 'string', default: '146' },
      'per-chunk': { type: 'string', default: '64' },
      'admin-key': { type: 'string' },
      selector: { type: 'string' },
      group: { type: 'string' },
      'master-address': { type: 'string' },
      dtype: { type: 'string', default: DEFAULT_DTYPE },
      shape: { type: 'string', default: DEFAULT_SHAPE.join(',') },
    },
  });
  if (!values.gateway) throw new Error('--gateway is required');
  if (!values.version) throw new Error('--version is required');
  const int = (flag: string, text: string, min: number): number => {
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || n < min) throw new Error(`${flag} must be an integer ≥ ${min}, got ${text}`);
    return n;
  };
  const shape = values.shape.split(',').filter((s) => s.trim() !== '').map((s) => int('--shape', s, 0));
  const adminKey = values['admin-key'] ?? env.RLGATE_ADMIN_KEY;
  return {
    gateway: values.gateway,
    version: values.version,
    params: int('--params', values.params, 0),
    perChunk: int('--per-chunk', values['per-chunk'], 1),
    dtype: values.dtype,
    shape,
    ...(adminKey ? { adminKey } : {}),
    ...(values.selector === undefined ? {} : { selector: values.selector }),
    ...(values.group === undefined ? {} : { groupName: values.group }),
    ...(values['master-address'] === undefined ? {} : { masterAddress: values['master-address'] }),
  };
}

/** Run the trainer; returns the exit code (0 when the gateway answered 200). */
export async function trainerCommand(argv: string[]): Promise<number> {
  let args: TrainerArgs;
  try {
    args = parseTrainerArgs(argv);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n${TRAINER_USAGE}\n`);
    return 2;
  }
  const chunks = makeChunks({ params: args.params, perChunk: args.perChunk, shape: args.shape, dtype: args.dtype });
  let result: DistributedRefitResult;
  try {
    result = await runDistributedRefit({
      gateway: args.gateway,
      version: args.version,
      chunks,
      ...(args.adminKey ? { adminKey: args.adminKey } : {}),
      ...(args.selector === undefined ? {} : { selector: args.selector }),
      ...(args.groupName === undefined ? {} : { groupName: args.groupName }),
      ...(args.masterAddress === undefined ? {} : { masterAddress: args.masterAddress }),
    });
  } catch (err) {
    process.stderr.write(`refit ${args.version} not requested: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  process.stdout.write(`${JSON.stringify(result.report, null, 2)}\n`);
  const broke = result.transferError ? `; broadcast stopped: ${result.transferError.code} (${result.transferError.message})` : '';
  process.stderr.write(`refit ${args.version}: HTTP ${result.status}, world_size ${result.worldSize}, ` +
    `${result.chunksSent}/${chunks.length} chunks, ${result.sent.length} tensors broadcast${broke}\n`);
  return result.status === 200 ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await trainerCommand(process.argv.slice(2));
}
