// Command-line face of the trainer client: parse flags, run one distributed refit through the
// gateway (over NATS with --nats-url, over HTTP with --gateway), print the report (summary lines,
// or its JSON with --json) on stdout, its progress (refit-display.ts) and one line on where it came
// from on stderr, and exit with a code that says how it went. It owns no refit logic (refit.ts,
// nats-refit.ts) and no parameter synthesis (chunks.ts).

import { redactUrl } from '../../obs/redact-url.ts';
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { NATS_CLIENT_FLAGS, natsClientFlagsHelp, natsClientParseOptions, natsUrlFromEnv, readNatsClientFlags } from '../../bus/client-flags.ts';
import { checkNatsSettings, type NatsAuthSettings } from '../../bus/connect-options.ts';
import { DEFAULT_ROOT, subjects } from '../../bus/subjects.ts';
import { refitDisplay } from '../refit-display.ts';
import { dtypeWidth } from '../../../sim/broadcast/dtype.ts';
import { DEFAULT_DTYPE, DEFAULT_SHAPE, makeChunks, paramsForBytes } from './chunks.ts';
import { runNatsRefit } from './nats-refit.ts';
import { runDistributedRefit, TrainerError, type DistributedRefitResult } from './refit.ts';
import { reportLines } from './summary.ts';

/** What the exit code says (the same meaning of 0, 2 and 3 as `rlgate refit`). */
export const TRAINER_EXIT = {
  /** A report: every engine succeeded (200). */
  ok: 0,
  /** The gateway answered and refused the refit or its plan (4xx/5xx, or an `Rlgate-Error` reply): nothing was touched. */
  refused: 1,
  /** Bad flags. */
  usage: 2,
  /** A report in which at least one engine failed (207). */
  partial: 3,
  /** No report: no gateway answered, NATS or the gateway could not be reached, or none came within --timeout-secs. */
  noReport: 4,
} as const;

export const TRAINER_USAGE = `usage: rlgate trainer (--nats-url U | --gateway URL) --version V [--bytes SIZE | --params N]
               [--per-chunk K] [--selector EXPR] [--refit-id ID] [--master-address HOST]
               [--timeout-secs N] [--json] [--sent-file FILE] [--group NAME] [--dtype D] [--shape A,B]
               [--subject-root R] [NATS credential flags] | [--admin-key KEY]
  One distributed (NCCL-style) refit: asks the gateway's plan (dry_run) for the group's size, opens
  the broadcast group as rank 0, asks for the refit and broadcasts every chunk meanwhile.
  --gateway    refit over HTTP (POST URL/v1/rl/refits) instead of NATS (<root>.refit.request, the
               report from the reply, <root>.refit.<id>.report or the journal); with neither
               --gateway nor --nats-url: the NATS URL of $RLGATE_NATS_URL, then $NATS_URL
  --version    the new weight version
  --bytes      total parameter bytes to broadcast, e.g. 64MiB (B, KB, MB, GB, KiB, MiB, GiB),
               rounded up to whole parameters of --shape and --dtype
  --params     parameters in the synthetic model instead (default 146)
  --per-chunk  parameters per update_weights_from_distributed call (default 64)
  --selector   engines to refit (default: every engine)
  --refit-id   the refit's id, [A-Za-z0-9_-]{1,128} (default: a random UUID); the same id
               again is the same refit, never a second one
  --master-address  address the broadcast group binds and the engines dial (default 127.0.0.1;
               in containers, the trainer's host name)
  --verify-values N  have the gateway read back the first N values of the first tensor of the first
               and the last chunk from every engine after the load (verify_weights; 1..64): an
               engine that answered 200 without loading is caught and quarantined
  --timeout-secs  longest wait for the report, from start (default 900; HTTP: each call, default 600)
  --json       print the report as JSON instead of summary lines
  --sent-file  write the name, size and sha256 of every tensor broadcast to FILE (JSON)
  --group, --dtype, --shape  group name (weight_update_group), dtype (bfloat16), shape (256,256)
  --subject-root  the gateways' subject root [RLGATE_SUBJECT_ROOT] (default rl)
  --admin-key  gateway admin key, HTTP only (default: $RLGATE_ADMIN_KEY)
${natsClientFlagsHelp()}
progress: on stderr while the refit runs, from its events (<root>.refit.<id>.events, or over HTTP
  GET /v1/rl/refits/{id}/events): a live view per engine on a terminal, one line per event otherwise
exit codes: 0 every engine succeeded (200); 3 at least one failed (207); 1 the gateway refused the
  refit or its plan (nothing was touched); 4 no report (no gateway answered, NATS or the gateway
  unreachable, or --timeout-secs passed: the refit may still run, look it up by its id); 2 usage`;

/** Flags both ways of reaching the gateway take. */
export interface TrainerCommonArgs {
  version: string;
  params: number;
  perChunk: number;
  selector?: string;
  groupName?: string;
  masterAddress?: string;
  /** --verify-values: the gateway reads back this many first values of two tensors from every engine. */
  verifyValues?: number;
  dtype: string;
  shape: number[];
  /** --bytes as given, when it set `params`. */
  bytes?: number;
  refitId?: string;
  timeoutSecs?: number;
  json?: true;
  sentFile?: string;
}

/** The trainer over HTTP (`--gateway`). */
export interface TrainerArgs extends TrainerCommonArgs {
  gateway: string;
  adminKey?: string;
}

/** The trainer over NATS (`--nats-url`, or the environment's NATS URL). */
export interface NatsTrainerArgs extends TrainerCommonArgs {
  nats: { url: string; auth: Partial<NatsAuthSettings> };
  subjectRoot: string;
}

export type TrainerInvocation = { via: 'http'; args: TrainerArgs } | { via: 'nats'; args: NatsTrainerArgs };

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
};

/** `64MiB` → 67108864; a whole number of bytes ≥ 1. */
export function parseByteSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new Error(`--bytes must be a size such as 64MiB or 1000000, got ${text}`);
  const bytes = Math.ceil(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw new Error(`--bytes must be at least 1 byte, got ${text}`);
  return bytes;
}

const REFIT_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** Parse the flags of either form; throws an Error whose message says what is wrong. */
export function parseTrainerInvocation(argv: string[], env: NodeJS.ProcessEnv = process.env): TrainerInvocation {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      gateway: { type: 'string' },
      'subject-root': { type: 'string' },
      ...natsClientParseOptions(),
      version: { type: 'string' },
      params: { type: 'string' },
      bytes: { type: 'string' },
      'per-chunk': { type: 'string', default: '64' },
      'admin-key': { type: 'string' },
      selector: { type: 'string' },
      group: { type: 'string' },
      'master-address': { type: 'string' },
      'verify-values': { type: 'string' },
      dtype: { type: 'string', default: DEFAULT_DTYPE },
      shape: { type: 'string', default: DEFAULT_SHAPE.join(',') },
      'refit-id': { type: 'string' },
      'timeout-secs': { type: 'string' },
      json: { type: 'boolean' },
      'sent-file': { type: 'string' },
    },
  });
  const str = (name: string): string | undefined => {
    const v = (values as Record<string, string | boolean | undefined>)[name];
    return typeof v === 'string' ? v : undefined;
  };
  const gateway = str('gateway');
  const natsFlag = str('nats-url');
  const natsOnly = ['subject-root', ...NATS_CLIENT_FLAGS.map((f) => f.flag)].filter((f) => str(f) !== undefined);
  if (gateway !== undefined && natsFlag !== undefined) throw new Error('give --gateway (HTTP) or --nats-url (NATS), not both');
  const natsUrl = natsFlag ?? (gateway === undefined ? natsUrlFromEnv(env) : undefined);
  if (gateway === undefined && natsUrl === undefined) {
    throw new Error('--nats-url (or --gateway) is required: no RLGATE_NATS_URL or NATS_URL in the environment');
  }
  if (gateway !== undefined && natsOnly.length) throw new Error(`--${natsOnly[0]} goes with --nats-url, not --gateway`);
  if (natsUrl !== undefined && str('admin-key') !== undefined) throw new Error('--admin-key guards HTTP only; over NATS give --nats-* credentials');
  const version = str('version');
  if (!version) throw new Error('--version is required');

  const int = (flag: string, text: string, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || n < min || n > max)
      throw new Error(`${flag} must be an integer ≥ ${min}${max < Number.MAX_SAFE_INTEGER ? ` and ≤ ${max}` : ''}, got ${text}`);
    return n;
  };
  const dtype = values.dtype!;
  const shape = values
    .shape!.split(',')
    .filter((s) => s.trim() !== '')
    .map((s) => int('--shape', s, 0));
  let params: number;
  let bytes: number | undefined;
  const bytesText = str('bytes');
  if (bytesText !== undefined) {
    if (str('params') !== undefined) throw new Error('give --bytes or --params, not both');
    bytes = parseByteSize(bytesText);
    const width = dtypeWidth(dtype);
    if (width === undefined) throw new Error(`--bytes needs a dtype of known width, got --dtype ${dtype}`);
    const perParam = width * shape.reduce((n, d) => n * d, 1);
    if (perParam < 1) throw new Error(`--bytes needs parameters of at least one element, got --shape ${values.shape}`);
    params = paramsForBytes(bytes, perParam);
  } else {
    params = int('--params', str('params') ?? '146', 0);
  }
  const refitId = str('refit-id');
  if (refitId !== undefined && !REFIT_ID.test(refitId)) throw new Error(`--refit-id must match [A-Za-z0-9_-]{1,128}, got ${JSON.stringify(refitId)}`);
  const timeout = str('timeout-secs');
  const common: TrainerCommonArgs = {
    version,
    params,
    perChunk: int('--per-chunk', values['per-chunk']!, 1),
    dtype,
    shape,
    ...(str('selector') === undefined ? {} : { selector: str('selector')! }),
    ...(str('group') === undefined ? {} : { groupName: str('group')! }),
    ...(str('master-address') === undefined ? {} : { masterAddress: str('master-address')! }),
    ...(str('verify-values') === undefined ? {} : { verifyValues: int('--verify-values', str('verify-values')!, 1, 64) }),
    ...(bytes === undefined ? {} : { bytes }),
    ...(refitId === undefined ? {} : { refitId }),
    // setTimeout's ceiling, in seconds
    ...(timeout === undefined ? {} : { timeoutSecs: int('--timeout-secs', timeout, 1, 2_147_483) }),
    ...(values.json ? { json: true as const } : {}),
    ...(str('sent-file') === undefined ? {} : { sentFile: str('sent-file')! }),
  };

  if (gateway !== undefined) {
    const adminKey = str('admin-key') ?? env.RLGATE_ADMIN_KEY;
    return { via: 'http', args: { gateway, ...common, ...(adminKey ? { adminKey } : {}) } };
  }
  // The NATS URL and credentials as `rlgate refit` and `rlgate watch` read them (flags, then the environment).
  const nats = readNatsClientFlags(argv, env);
  checkNatsSettings(nats.url, nats.auth);
  const subjectRoot = str('subject-root') ?? (env.RLGATE_SUBJECT_ROOT || DEFAULT_ROOT);
  subjects(subjectRoot); // throws on a root that is not a subject
  return { via: 'nats', args: { nats, subjectRoot, ...common } };
}

/**
 * The HTTP form (`--gateway`), for callers that read `gateway` (the compose file's checks): throws
 * unless --gateway is given.
 */
export function parseTrainerArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): TrainerArgs {
  const inv = parseTrainerInvocation(argv, env);
  if (inv.via !== 'http') throw new Error('--gateway is required (this reads the HTTP form; --nats-url is read by parseTrainerInvocation)');
  return inv.args;
}

/** Run the trainer; returns the exit code (TRAINER_EXIT). */
export async function trainerCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${TRAINER_USAGE}\n`);
    return TRAINER_EXIT.ok;
  }
  let inv: TrainerInvocation;
  try {
    inv = parseTrainerInvocation(argv);
  } catch (err) {
    process.stderr.write(`${redactUrl(err instanceof Error ? err.message : String(err))}\n${TRAINER_USAGE}\n`);
    return TRAINER_EXIT.usage;
  }
  const a = inv.args;
  const chunks = makeChunks({ params: a.params, perChunk: a.perChunk, shape: a.shape, dtype: a.dtype });
  // The id is chosen here so that the refit's events can be followed from the first one: its
  // progress on stderr (a live view on a terminal, one line per event otherwise).
  const refitId = a.refitId ?? randomUUID();
  const progress = refitDisplay(refitId, process.stderr);
  const common = {
    version: a.version,
    chunks,
    ...(a.selector === undefined ? {} : { selector: a.selector }),
    ...(a.groupName === undefined ? {} : { groupName: a.groupName }),
    ...(a.masterAddress === undefined ? {} : { masterAddress: a.masterAddress }),
    ...(a.verifyValues === undefined ? {} : { verifyValues: a.verifyValues }),
    refitId,
    onEvent: (event: unknown) => progress.event(event),
  };
  const debug = (line: string) => progress.note(`trainer: ${line}`);
  let result: DistributedRefitResult & { refitId?: string };
  try {
    result =
      inv.via === 'http'
        ? await runDistributedRefit({
            ...common,
            gateway: inv.args.gateway,
            ...(inv.args.adminKey ? { adminKey: inv.args.adminKey } : {}),
            ...(a.timeoutSecs === undefined ? {} : { httpTimeoutMs: a.timeoutSecs * 1000 }),
          })
        : await runNatsRefit({
            ...common,
            nats: inv.args.nats,
            subjectRoot: inv.args.subjectRoot,
            ...(a.timeoutSecs === undefined ? {} : { timeoutMs: a.timeoutSecs * 1000 }),
            log: debug,
          });
  } catch (err) {
    progress.close();
    if (err instanceof TrainerError && err.refused) {
      process.stderr.write(`refit ${a.version} refused: ${err.message}\n`);
      return TRAINER_EXIT.refused;
    }
    if ((err as Error)?.name === 'NatsSettingsError') {
      process.stderr.write(`${(err as Error).message}\n`);
      return TRAINER_EXIT.usage;
    }
    const why = err instanceof Error ? err.message : String(err);
    process.stderr.write(`refit ${a.version}: ${err instanceof TrainerError ? why : `no report: ${why}`}\n`);
    return TRAINER_EXIT.noReport;
  }
  progress.close(result.report);
  if (a.sentFile !== undefined) await writeFile(a.sentFile, `${JSON.stringify(result.sent, null, 2)}\n`);
  if (result.status !== 200 && result.status !== 207) {
    // Over HTTP the refit itself can be refused (409 refit_in_progress, 400, 503...): no report.
    process.stderr.write(`refit ${a.version} refused: HTTP ${result.status}: ${JSON.stringify(result.report).slice(0, 500)}\n`);
    return TRAINER_EXIT.refused;
  }
  const answered = (result.report as { weight_version?: unknown } | null)?.weight_version;
  if (typeof answered === 'string' && answered !== a.version.trim()) {
    // A known refit id is answered with that refit's report, whatever the request says.
    process.stderr.write(
      `refit ${a.refitId ?? '?'} refused: that id is an earlier refit, to version ${answered}; ` +
        `its report came back and nothing ran for version ${a.version} (use a new --refit-id)\n`,
    );
    return TRAINER_EXIT.refused;
  }
  process.stdout.write(a.json ? `${JSON.stringify(result.report, null, 2)}\n` : `${reportLines(result.report).join('\n')}\n`);
  const id = (result.report as { id?: unknown } | null)?.id ?? result.refitId ?? '?';
  const broke = result.transferError ? `; broadcast stopped: ${result.transferError.code} (${result.transferError.message})` : '';
  process.stderr.write(
    `refit ${String(id)} to version ${a.version}: ${result.status}, report from ${origin(result.from)}, world_size ${result.worldSize}, ` +
      `${result.chunksSent}/${chunks.length} chunks, ${result.sent.length} tensors broadcast${broke}\n`,
  );
  return result.status === 200 ? TRAINER_EXIT.ok : TRAINER_EXIT.partial;
}

function origin(from: DistributedRefitResult['from']): string {
  switch (from) {
    case 'http':
      return 'the HTTP answer';
    case 'reply':
      return 'the NATS reply';
    case 'event':
      return 'the report event';
    case 'report_subject':
      return 'the report subject';
    case 'journal':
      return 'the refit journal';
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await trainerCommand(process.argv.slice(2));
}
