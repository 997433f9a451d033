// `rlgate refit`: a trainer's refit over NATS — one request on `<root>.refit.request`, answered by
// whichever gateway replica takes it, with the per-engine report on stdout. Its events
// (`<root>.refit.<id>.events`, subscribed before the request goes out, under an id chosen here when
// the request has none) are shown on stderr while it runs: a live view on a terminal, one line per
// event otherwise. The report is the first of the reply, the report event, the report subject and
// the journal (src/bus/refit-report.ts), so a replica dying with the request costs no wait.
// Exit codes are REFIT_EXIT.

import { redactUrl } from '../obs/redact-url.ts';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ErrorStatus } from '../api/errors.ts';
import { natsClientFlagsHelp, natsClientParseOptions, readNatsClientFlags } from '../bus/client-flags.ts';
import { checkNatsSettings, natsConnectOptions } from '../bus/connect-options.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, BusUnavailable, connectBus, type Bus } from '../bus/connection.ts';
import { watchRefitReport, type RefitReportWatch } from '../bus/refit-report.ts';
import { DEFAULT_ROOT, subjects, type Subjects } from '../bus/subjects.ts';
import { refitDisplay, type RefitDisplay } from './refit-display.ts';

/** What the exit code says. */
export const REFIT_EXIT = {
  /** The report: every engine succeeded (200); or a dry run's plan. */
  ok: 0,
  /** The refit did not run, or its report never came: NATS unreachable, no gateway, refused, timed out. */
  failed: 1,
  /** Bad flags or request file. */
  usage: 2,
  /** The report: at least one engine failed (207). */
  partial: 3,
} as const;

const REFIT_ID = /^[A-Za-z0-9_-]{1,128}$/;

const HELP = `usage: rlgate refit --version V (--model-path P | --request FILE) [--selector S] [--refit-id ID]
                     [--strategy all|rolling|in_flight [strategy flags]]
                     [--nats-url U] [--subject-root R] [--timeout-secs N] [--quiet] [NATS credential flags]
  Sends {"weight_version", "selector", "source": {"kind": "disk", "model_path"}} (or the JSON
  request in FILE) on <root>.refit.request and prints the report (JSON) on stdout. While the refit
  runs, its events (<root>.refit.<id>.events) are shown on stderr: a live view per engine on a
  terminal, one key=value line per event otherwise.
  --refit-id      the refit's id, [A-Za-z0-9_-]{1,128} (default: the request file's refit_id, else a
                  random UUID); the same id again is the same refit, never a second one
  --strategy      how the fleet is refit (the request's "strategy", docs/refit-strategies.md):
                  all (every engine at once, the default), rolling (in waves), in_flight (running
                  requests kept in place); replaces the request file's strategy
  --max-unavailable N|P%   rolling: engines per wave, a count or a share of the targets (default 1)
  --drain-timeout-ms N     rolling: how long a wave's requests may take to end (default 30000)
  --pause-mode abort|retract  rolling: how what still runs after the drain is paused (default abort)
  --max-failed N           rolling: more failed engines than N and no further wave starts (default 0)
  --cache keep|flush       in_flight: keep the old weights' KV (default), or flush it with the load
  --timeout-secs  longest wait for the report (default 900)
  --quiet         no progress on stderr
  --subject-root  the gateways' subject root [RLGATE_SUBJECT_ROOT] (default rl)
${natsClientFlagsHelp()}
exit codes: 0 every engine succeeded (200), or a dry run's plan; 3 at least one engine failed
  (207); 1 the refit did not run or its report did not come (NATS or no gateway reachable, the
  gateway refused it with an error: its {error, message} on stdout, or --timeout-secs passed: the
  refit may still run, look it up by its id); 2 usage`;

interface RefitArgs {
  request: Record<string, unknown>;
  root: string;
  timeoutMs: number;
  quiet: boolean;
  nats: ReturnType<typeof readNatsClientFlags>;
}

/** The flags, read; throws an Error saying what is wrong. */
async function parseRefitArgs(argv: string[]): Promise<RefitArgs> {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      version: { type: 'string' },
      'model-path': { type: 'string' },
      request: { type: 'string' },
      selector: { type: 'string' },
      'refit-id': { type: 'string' },
      strategy: { type: 'string' },
      'max-unavailable': { type: 'string' },
      'drain-timeout-ms': { type: 'string' },
      'pause-mode': { type: 'string' },
      'max-failed': { type: 'string' },
      cache: { type: 'string' },
      'subject-root': { type: 'string' },
      'timeout-secs': { type: 'string' },
      quiet: { type: 'boolean' },
      ...natsClientParseOptions(),
    },
  });
  let request: Record<string, unknown>;
  if (values.request !== undefined) {
    let text: string;
    try {
      text = await readFile(values.request, 'utf8');
    } catch (err) {
      throw new Error(`--request ${values.request}: ${(err as Error).message}`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new Error(`--request ${values.request} is not JSON: ${(err as Error).message}`);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error(`--request ${values.request} must hold a JSON object`);
    request = parsed as Record<string, unknown>;
  } else {
    if (!values.version || !values['model-path']) throw new Error('--version and --model-path (or --request FILE) are required');
    request = { weight_version: values.version, source: { kind: 'disk', model_path: values['model-path'] } };
    if (values.selector) request.selector = values.selector;
  }
  const strategy = strategyOf(values);
  if (strategy) request.strategy = strategy;
  const id = values['refit-id'];
  if (id !== undefined) {
    if (!REFIT_ID.test(id)) throw new Error(`--refit-id must match [A-Za-z0-9_-]{1,128}, got ${JSON.stringify(id)}`);
    request.refit_id = id;
  }
  const secs = values['timeout-secs'] ?? '900';
  if (!/^\d+$/.test(secs) || Number(secs) < 1 || Number(secs) > 2_147_483) throw new Error(`--timeout-secs must be a whole number of seconds ≥ 1, got ${secs}`);
  const root = values['subject-root'] ?? (process.env.RLGATE_SUBJECT_ROOT || DEFAULT_ROOT);
  subjects(root); // throws on a root that is not a subject
  const nats = readNatsClientFlags(argv);
  checkNatsSettings(nats.url, nats.auth);
  return { request, root, timeoutMs: Number(secs) * 1000, quiet: values.quiet === true, nats };
}

const STRATEGY_FLAGS = ['max-unavailable', 'drain-timeout-ms', 'pause-mode', 'max-failed', 'cache'] as const;

/**
 * The request's `strategy` from the flags, or undefined without `--strategy`. Numbers are sent as
 * numbers; whether a field fits the kind is the gateway's to say (one set of rules, one 400).
 */
function strategyOf(values: Partial<Record<'strategy' | (typeof STRATEGY_FLAGS)[number], string>>): Record<string, unknown> | undefined {
  if (values.strategy === undefined) {
    const stray = STRATEGY_FLAGS.find((f) => values[f] !== undefined);
    if (stray) throw new Error(`--${stray} needs --strategy`);
    return undefined;
  }
  const whole = (flag: (typeof STRATEGY_FLAGS)[number]): number | undefined => {
    const v = values[flag];
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) throw new Error(`--${flag} must be a whole number, got ${v}`);
    return Number(v);
  };
  const out: Record<string, unknown> = { kind: values.strategy };
  const max = values['max-unavailable'];
  if (max !== undefined) out.max_unavailable = max.endsWith('%') ? max : whole('max-unavailable');
  if (values['drain-timeout-ms'] !== undefined) out.drain_timeout_ms = whole('drain-timeout-ms');
  if (values['pause-mode'] !== undefined) out.pause_mode = values['pause-mode'];
  if (values['max-failed'] !== undefined) out.max_failed = whole('max-failed');
  if (values.cache !== undefined) out.cache = values.cache;
  return out;
}

export async function refitCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${HELP}\n`);
    return REFIT_EXIT.ok;
  }
  let args: RefitArgs;
  try {
    args = await parseRefitArgs(argv);
  } catch (err) {
    // node's own message quotes a stray argument: a NATS URL with its password, maybe
    process.stderr.write(`${redactUrl((err as Error).message)}\n${HELP}\n`);
    return REFIT_EXIT.usage;
  }
  const { request } = args;
  const subj = subjects(args.root);
  const dryRun = request.dry_run === true;
  // The id is chosen here, so that its events can be followed from the first one. A request
  // file's refit_id of the wrong shape is left for the gateway to refuse (invalid_request).
  if (!dryRun && request.refit_id === undefined) request.refit_id = randomUUID();
  const refitId = typeof request.refit_id === 'string' && REFIT_ID.test(request.refit_id) ? request.refit_id : undefined;

  let bus: Bus;
  try {
    bus = await connectBus({ ...natsConnectOptions(args.nats.url, args.nats.auth), name: 'rlgate-refit' });
  } catch (err) {
    process.stderr.write(`refit: ${(err as Error).message}\n`);
    return REFIT_EXIT.failed;
  }
  let display: RefitDisplay | undefined;
  let watch: RefitReportWatch | undefined;
  try {
    if (refitId !== undefined && !dryRun) {
      const shown = refitDisplay(refitId, process.stderr, { quiet: args.quiet });
      display = shown;
      const version = request.weight_version;
      // Subscribed (events, report) before the request goes out; the journal is read while waiting.
      watch = await watchRefitReport(bus, {
        root: args.root,
        refitId,
        ...(typeof version === 'string' ? { weightVersion: version } : {}),
        onEvent: (data) => shown.event(data),
        log: (line) => shown.note(`refit: ${line}`),
      });
      bus.onStatus((s) => {
        if (s.event === 'disconnect') shown.note(`NATS disconnected (${s.server ?? '?'}); reconnecting…`);
        else if (s.event === 'reconnect') shown.note(`NATS reconnected (${s.server ?? '?'})`);
      });
    }
    return await ask(bus, subj, args, refitId, display, watch);
  } finally {
    await watch?.close();
    display?.close();
    await bus.close();
  }
}

/** Sends the request, prints what came back, and says how it went (REFIT_EXIT). */
async function ask(
  bus: Bus,
  subj: Subjects,
  args: RefitArgs,
  refitId: string | undefined,
  display: RefitDisplay | undefined,
  watch: RefitReportWatch | undefined,
): Promise<number> {
  const subject = subj.refitRequest();
  const named = refitId ? `refit ${refitId}` : 'refit';
  let answer: { status: number; report?: unknown; plan?: unknown };
  try {
    // A dry run, or an id the gateway will refuse, has no report to wait for: its reply is all.
    answer = watch ? await watch.ask(args.request, args.timeoutMs) : await bus.request(subject, args.request, args.timeoutMs);
  } catch (err) {
    await watch?.close();
    display?.close(); // its last frame first, then why there is no report
    return failure(err, named, subject, args.timeoutMs, refitId);
  }
  // The reply may overtake the refit's last events: closing the watch lets the ones on their way land.
  await watch?.close();
  display?.close(answer.report);
  // A dry run answers the plan instead of a report.
  process.stdout.write(`${JSON.stringify(answer.report ?? answer.plan, null, 2)}\n`);
  if (answer.status === 200) return REFIT_EXIT.ok;
  if (answer.status === 207) return REFIT_EXIT.partial;
  process.stderr.write(`${named}: unexpected answer status ${answer.status}\n`);
  return REFIT_EXIT.failed;
}

function failure(err: unknown, named: string, subject: string, timeoutMs: number, refitId: string | undefined): number {
  if (err instanceof BusRemoteError) {
    // The gateway refused it: nothing was paused. Its error envelope is the answer.
    const status = (ErrorStatus as Record<string, number>)[err.code];
    process.stdout.write(`${JSON.stringify(err.body, null, 2)}\n`);
    process.stderr.write(`${named} refused: ${err.code}${status ? ` (${status})` : ''}: ${err.message}\n`);
  } else if (err instanceof BusNoResponders) {
    process.stderr.write(`${named}: no gateway answers on ${subject} (no replica with RL on is connected to this NATS server with this subject root)\n`);
  } else if (err instanceof BusTimeout) {
    process.stderr.write(
      `${named}: no report within ${Math.round(timeoutMs / 1000)} s; it may still run: GET /v1/rl/refits/${refitId ?? '<id>'} on any replica\n`,
    );
  } else if (err instanceof BusUnavailable) {
    process.stderr.write(`${named}: ${err.message}; it may have reached a gateway: send the same request again (same refit id) to have its report\n`);
  } else {
    process.stderr.write(`${named}: ${(err as Error)?.message ?? String(err)}\n`);
  }
  return REFIT_EXIT.failed;
}
